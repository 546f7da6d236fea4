// FLB at the destination edge switch (paper 002, sections 3.2, 3.3, 5), P4_16 for v1model (bmv2 simple_switch):
// congestion detection and CNM generation, lbpipe's `flb-cnm` block (docs/flb_cnm.md; golden model sim/flb/cnm.py),
// event for event.
//
// Per egress port a queue estimate, moved by each event's amount (enqueue up, dequeue down), clamped to
// [0, 2^q_bits - 1], and a set of up to n_slots congested flows. An enqueue leaving q >= K whose flow is not in the
// port's set takes the lowest free slot and emits a congestion CNM with n = the set's count including it (no free
// slot: no CNM). Any event leaving q < K while the set is not empty frees the lowest occupied slot and emits that
// flow's release CNM with n = the count before the removal. Every CNM names its congestion point (cnm_cp: the
// port). A port at or above n_ports: rejected (ok 0).
//
// Refresh CNMs (issue 17): a join or a release makes every other flow in the port's set owe its source a refresh
// (r_owed, bit port * 8 + slot; the port's debts replaced). An in-range event with no CNM of its own pays the
// lowest owed bit (any port) as a congestion CNM: the slot's flow and src, its port's current count (r_count) and
// cp = its port; the debt is cleared. Bit order port * 8 + slot is the golden model's port * n_slots + slot.
//
// Test harness header (`cnm_tick_t`, EtherType 0x88B5, after Ethernet): op 0 an event (tag, port, deq, amount,
// flow, src in; flags ok/cnm/cnm_cong, qlen, cnm_flow, cnm_src, cnm_n, cnm_cp out; port 1), op 1 an lbpipe `ctl`
// command (table 0: K = data's low q_bits bits unless 0; dropped).
//
// Control plane (lbpipe/p4.py flb_cnm_commands):
//   table_set_default cnm_config set_config N_PORTS N_SLOTS Q_MASK THRESHOLD

#include <core.p4>
#include <v1model.p4>

const bit<16> ETH_CNM_TICK = 0x88B5;
#define MAX_PORTS 32
#define MAX_SLOTS 8

header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header cnm_tick_t {
    bit<8> op; bit<16> tag; bit<8> port; bit<8> deq; bit<32> amount; bit<32> flow; bit<16> src;   // in: op 0
    bit<8> ctl_table; bit<24> ctl_index; bit<64> ctl_data;                                       // in: op 1
    bit<8> flags; bit<32> qlen; bit<32> cnm_flow; bit<16> cnm_src; bit<8> cnm_n; bit<8> cnm_cp;  // out: flags 0 ok,
    bit<16> ether_type;                                                                          // 1 cnm, 2 cong
}

struct headers_t { ethernet_t eth; cnm_tick_t tick; }

struct meta_t {
    bit<8> n_ports; bit<8> n_slots; bit<32> qmask; bit<32> threshold;
    bit<1> v0; bit<1> v1; bit<1> v2; bit<1> v3; bit<1> v4; bit<1> v5; bit<1> v6; bit<1> v7;
    bit<32> f0; bit<32> f1; bit<32> f2; bit<32> f3; bit<32> f4; bit<32> f5; bit<32> f6; bit<32> f7;
    bit<1> found; bit<1> has_free; bit<8> free_j; bit<1> has_first; bit<8> first_j; bit<8> count;
}

parser CnmParser(packet_in pk, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pk.extract(h.eth);
        transition select(h.eth.ether_type) { ETH_CNM_TICK: tick; default: accept; }
    }
    state tick { pk.extract(h.tick); transition accept; }
}

control CnmVerify(inout headers_t h, inout meta_t m) { apply { } }

control CnmIngress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    register<bit<32>>(MAX_PORTS) r_q;                       // port: the queue estimate
    register<bit<1>>(MAX_PORTS * MAX_SLOTS) r_valid;        // port * 8 + slot
    register<bit<32>>(MAX_PORTS * MAX_SLOTS) r_flow;
    register<bit<16>>(MAX_PORTS * MAX_SLOTS) r_src;
    register<bit<32>>(1) r_k;                               // K written by ctl; 0: the configured threshold
    register<bit<256>>(1) r_owed;                           // refresh debts, bit port * 8 + slot
    register<bit<8>>(MAX_PORTS) r_count;                    // port: flows in its set

    action set_config(bit<8> n_ports, bit<8> n_slots, bit<32> qmask, bit<32> threshold) {
        m.n_ports = n_ports; m.n_slots = n_slots; m.qmask = qmask; m.threshold = threshold;
    }
    table cnm_config { actions = { set_config; } default_action = set_config(8, 4, 65535, 512); }

// Slot J of the event's port: read; counted; the flow found; the lowest free slot below n_slots; the lowest occupied.
// One halving step of the paid debt's bit number (low: a single bit).
#define LOG2(S) if ((low >> S) != 0) { idx = idx + S; low = low >> S; }
#define READ(J) r_valid.read(m.v##J, base + J); r_flow.read(m.f##J, base + J);
#define SCAN(J) if (m.v##J == 1) { m.count = m.count + 1; if (m.f##J == h.tick.flow) { m.found = 1; } \
    if (m.has_first == 0) { m.has_first = 1; m.first_j = J; } } \
    else if (m.has_free == 0 && J < m.n_slots) { m.has_free = 1; m.free_j = J; }

    apply {
        cnm_config.apply();
        bit<32> k;
        r_k.read(k, 0);
        if (k == 0) { k = m.threshold; }
        if (!h.tick.isValid()) {
            sm.egress_spec = 1;                             // not a harness frame: passes unchanged
        } else if (h.tick.op == 1) {
            bit<32> nk = h.tick.ctl_data[31:0] & m.qmask;
            if (h.tick.ctl_table == 0 && nk != 0) { r_k.write(0, nk); }
            mark_to_drop(sm);
        } else {
            bit<1> ok = 0;
            bit<1> cnm = 0;
            bit<1> cong = 0;
            h.tick.qlen = 0; h.tick.cnm_flow = 0; h.tick.cnm_src = 0; h.tick.cnm_n = 0; h.tick.cnm_cp = 0;
            if (h.tick.port < m.n_ports) {
                ok = 1;
                bit<256> owed;
                r_owed.read(owed, 0);
                bit<32> qold;
                r_q.read(qold, (bit<32>)h.tick.port);
                bit<40> q40;
                if (h.tick.deq != 0) {
                    if (h.tick.amount > qold) { q40 = 0; } else { q40 = (bit<40>)(qold - h.tick.amount); }
                } else {
                    q40 = (bit<40>)qold + (bit<40>)h.tick.amount;
                    if (q40 > (bit<40>)m.qmask) { q40 = (bit<40>)m.qmask; }
                }
                bit<32> q = (bit<32>)q40;
                r_q.write((bit<32>)h.tick.port, q);
                h.tick.qlen = q;
                bit<32> base = (bit<32>)h.tick.port * MAX_SLOTS;
                READ(0) READ(1) READ(2) READ(3) READ(4) READ(5) READ(6) READ(7)
                m.found = 0; m.has_free = 0; m.free_j = 0; m.has_first = 0; m.first_j = 0; m.count = 0;
                SCAN(0) SCAN(1) SCAN(2) SCAN(3) SCAN(4) SCAN(5) SCAN(6) SCAN(7)
                bit<8> vmask = m.v7 ++ m.v6 ++ m.v5 ++ m.v4 ++ m.v3 ++ m.v2 ++ m.v1 ++ m.v0;
                bit<8> sh = (bit<8>)base;                          // port * 8 <= 248
                bit<256> field = ((bit<256>)0xFF) << sh;
                if (q >= k && h.tick.deq == 0) {
                    if (m.found == 0 && m.has_free == 1) {
                        bit<32> at = base + (bit<32>)m.free_j;
                        r_valid.write(at, 1); r_flow.write(at, h.tick.flow); r_src.write(at, h.tick.src);
                        cnm = 1; cong = 1;
                        h.tick.cnm_flow = h.tick.flow; h.tick.cnm_src = h.tick.src; h.tick.cnm_n = m.count + 1;
                        h.tick.cnm_cp = h.tick.port;
                        r_count.write((bit<32>)h.tick.port, m.count + 1);
                        owed = (owed & ~field) | (((bit<256>)vmask) << sh);     // the others owe
                    }
                } else if (q < k && m.count != 0) {
                    bit<32> at = base + (bit<32>)m.first_j;
                    r_flow.read(h.tick.cnm_flow, at); r_src.read(h.tick.cnm_src, at);
                    r_valid.write(at, 0);
                    cnm = 1;
                    h.tick.cnm_n = m.count;
                    h.tick.cnm_cp = h.tick.port;
                    r_count.write((bit<32>)h.tick.port, m.count - 1);
                    bit<8> rest = vmask & ~((bit<8>)1 << m.first_j);
                    owed = (owed & ~field) | (((bit<256>)rest) << sh);      // the rest owe
                }
                if (cnm == 0 && owed != 0) {                        // a refresh rides this event
                    bit<256> low = owed & (~owed + 1);
                    bit<16> idx = 0;
                    LOG2(128) LOG2(64) LOG2(32) LOG2(16) LOG2(8) LOG2(4) LOG2(2) LOG2(1)
                    r_flow.read(h.tick.cnm_flow, (bit<32>)idx); r_src.read(h.tick.cnm_src, (bit<32>)idx);
                    r_count.read(h.tick.cnm_n, (bit<32>)(idx >> 3));
                    h.tick.cnm_cp = (bit<8>)(idx >> 3);
                    cnm = 1; cong = 1;
                    owed = owed & ~((bit<256>)1 << (bit<8>)idx);
                }
                r_owed.write(0, owed);
            }
            h.tick.flags = 5w0 ++ cong ++ cnm ++ ok;
            sm.egress_spec = 1;
        }
    }
}

control CnmEgress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CnmCompute(inout headers_t h, inout meta_t m) { apply { } }

control CnmDeparser(packet_out pk, in headers_t h) {
    apply { pk.emit(h.eth); pk.emit(h.tick); }
}

V1Switch(CnmParser(), CnmVerify(), CnmIngress(), CnmEgress(), CnmCompute(), CnmDeparser()) main;
