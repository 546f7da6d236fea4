// FLB at the source edge switch (paper 002, sections 3.2, 3.3), P4_16 for v1model (bmv2 simple_switch): the
// isolation table of lbpipe's `flb-isolate` block (docs/flb_isolate.md; golden model sim/flb/isolate.py), event
// for event, with the CNMs arriving as frames.
//
// Up to 8 entries (valid, flow, destination, congestion point, weight 840/n, stamp), fully associative, in registers.
// At every event (packet or CNM) the entries idle `timeout` ticks or more are released first. A congestion CNM
// (n 1 to 8, point cp below n_ports) first gives every entry of its point (its destination and cp) the weight 840/n
// (a point's flows at its latest n), then renews its flow's entry for its destination (weight, stamp, point) or
// takes the lowest free entry; a non-congestion CNM removes it; a CNM of a flow isolated toward another
// destination, a full table: nothing else; forged fields: nothing. A packet of a flow isolated
// toward its destination renews the stamp and takes path n_paths - 1 - (rank mod k), its rank the destination's
// entries below its own, k = min(n_paths - 1, ceil(sum of the destination's weights / 840)); mask = the top k paths.
//
// Test harness header (`iso_tick_t`, EtherType 0x88B5, after Ethernet): op 0 a packet (tag, flow, dest, now in;
// flags ok/isolated/held, path, mask out; leaves on port 1), op 1 an lbpipe `ctl` command (the block has no tables:
// dropped), op 2 a CNM (flow, dest, n, cong, cp, now; applied and dropped).
//
// Control plane (lbpipe/p4.py flb_isolate_commands):
//   table_set_default iso_config set_config N_FLOWS N_DESTS N_PATHS N_SLOTS TIME_MASK TIMEOUT N_PORTS

#include <core.p4>
#include <v1model.p4>

const bit<16> ETH_ISO_TICK = 0x88B5;
#define MAX_SLOTS 8

header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header iso_tick_t {
    bit<8> op; bit<16> tag; bit<32> flow; bit<16> dest; bit<32> now;   // in: op 0 packet, 1 ctl, 2 CNM
    bit<8> n; bit<8> cong; bit<8> cp;                                   // in: op 2
    bit<8> ctl_table; bit<24> ctl_index; bit<64> ctl_data;              // in: op 1
    bit<8> flags; bit<8> path; bit<16> mask;                            // out: flags 0 ok, 1 isolated, 2 held
    bit<16> ether_type;
}

struct headers_t { ethernet_t eth; iso_tick_t tick; }

struct meta_t {
    bit<32> n_flows; bit<16> n_dests; bit<8> n_paths; bit<8> n_slots; bit<32> tmask; bit<32> timeout;
    bit<8> n_ports;
    bit<8> c0; bit<8> c1; bit<8> c2; bit<8> c3; bit<8> c4; bit<8> c5; bit<8> c6; bit<8> c7;
    bit<1> v0; bit<1> v1; bit<1> v2; bit<1> v3; bit<1> v4; bit<1> v5; bit<1> v6; bit<1> v7;
    bit<32> f0; bit<32> f1; bit<32> f2; bit<32> f3; bit<32> f4; bit<32> f5; bit<32> f6; bit<32> f7;
    bit<16> d0; bit<16> d1; bit<16> d2; bit<16> d3; bit<16> d4; bit<16> d5; bit<16> d6; bit<16> d7;
    bit<16> w0; bit<16> w1; bit<16> w2; bit<16> w3; bit<16> w4; bit<16> w5; bit<16> w6; bit<16> w7;
    bit<32> s0; bit<32> s1; bit<32> s2; bit<32> s3; bit<32> s4; bit<32> s5; bit<32> s6; bit<32> s7;
    bit<1> found; bit<8> j; bit<16> jdest; bit<1> has_free; bit<8> free_j;
    bit<16> sum; bit<8> k; bit<8> r;
}

parser IsoParser(packet_in pk, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pk.extract(h.eth);
        transition select(h.eth.ether_type) { ETH_ISO_TICK: tick; default: accept; }
    }
    state tick { pk.extract(h.tick); transition accept; }
}

control IsoVerify(inout headers_t h, inout meta_t m) { apply { } }

control IsoIngress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    register<bit<1>>(MAX_SLOTS) r_valid;
    register<bit<32>>(MAX_SLOTS) r_flow;
    register<bit<16>>(MAX_SLOTS) r_dest;
    register<bit<8>>(MAX_SLOTS) r_cp;               // the congestion point (flb-cnm's port) at the destination
    register<bit<16>>(MAX_SLOTS) r_weight;          // 840 / n
    register<bit<32>>(MAX_SLOTS) r_stamp;
    register<bit<1>>(1) r_paired;                   // the previous event was a CNM: the next packet is `held`

    action set_config(bit<32> n_flows, bit<16> n_dests, bit<8> n_paths, bit<8> n_slots, bit<32> tmask,
                      bit<32> timeout, bit<8> n_ports) {
        m.n_flows = n_flows; m.n_dests = n_dests; m.n_paths = n_paths; m.n_slots = n_slots; m.tmask = tmask;
        m.timeout = timeout; m.n_ports = n_ports;
    }
    table iso_config { actions = { set_config; } default_action = set_config(65536, 16, 8, 8, 65535, 4096, 8); }

// Entry J read; released when idle `timeout` ticks or more; written back.
#define READ(J) r_valid.read(m.v##J, J); r_flow.read(m.f##J, J); r_dest.read(m.d##J, J); \
    r_weight.read(m.w##J, J); r_stamp.read(m.s##J, J); r_cp.read(m.c##J, J);
#define EXPIRE(J) if (m.v##J == 1 && ((h.tick.now - m.s##J) & m.tmask) >= m.timeout) { m.v##J = 0; }
#define PUT(J) r_valid.write(J, m.v##J);
// The first live entry of the flow (any destination); the lowest free entry below n_slots.
#define FIND(J) if (m.found == 0 && m.v##J == 1 && m.f##J == h.tick.flow) { m.found = 1; m.j = J; m.jdest = m.d##J; }
#define FREE(J) if (m.has_free == 0 && J < m.n_slots && m.v##J == 0) { m.has_free = 1; m.free_j = J; }
// A congestion CNM's point: every live entry of it takes the CNM's weight.
#define POINT(J) if (m.v##J == 1 && m.d##J == h.tick.dest && m.c##J == h.tick.cp) { r_weight.write(J, w); }
// The destination's weights.
#define SUM(J) if (m.v##J == 1 && m.d##J == h.tick.dest) { m.sum = m.sum + m.w##J; }
// k = ceil(sum / 840): the thresholds passed.
#define STEP(T) if (m.sum > T * 840) { m.k = T + 1; }
// The flow's rank: the destination's live entries below its own.
#define RANK(J) if (J < m.j && m.v##J == 1 && m.d##J == h.tick.dest) { m.r = m.r + 1; }
// r = rank mod k by subtraction (rank < 8, k >= 1).
#define MOD() if (m.r >= m.k) { m.r = m.r - m.k; }

    apply {
        iso_config.apply();
        bit<1> paired;
        r_paired.read(paired, 0);
        if (!h.tick.isValid()) {
            sm.egress_spec = 1;                         // not a harness frame: passes unchanged
        } else if (h.tick.op == 1) {
            r_paired.write(0, 0);                       // the block ignores its ctl commands
            mark_to_drop(sm);
        } else {
            READ(0) READ(1) READ(2) READ(3) READ(4) READ(5) READ(6) READ(7)
            EXPIRE(0) EXPIRE(1) EXPIRE(2) EXPIRE(3) EXPIRE(4) EXPIRE(5) EXPIRE(6) EXPIRE(7)
            PUT(0) PUT(1) PUT(2) PUT(3) PUT(4) PUT(5) PUT(6) PUT(7)
            m.found = 0; m.j = 0; m.jdest = 0; m.has_free = 0; m.free_j = 0;
            FIND(0) FIND(1) FIND(2) FIND(3) FIND(4) FIND(5) FIND(6) FIND(7)
            bool mine = m.found == 1 && m.jdest == h.tick.dest;
            bool in_range = h.tick.flow < m.n_flows && h.tick.dest < m.n_dests;
            bool cp_ok = h.tick.op != 2 || h.tick.cp < m.n_ports;
            if (h.tick.op == 2) {
                r_paired.write(0, 1);
                FREE(0) FREE(1) FREE(2) FREE(3) FREE(4) FREE(5) FREE(6) FREE(7)
                bit<16> w = 0;
                if (h.tick.n == 1) { w = 840; } else if (h.tick.n == 2) { w = 420; }
                else if (h.tick.n == 3) { w = 280; } else if (h.tick.n == 4) { w = 210; }
                else if (h.tick.n == 5) { w = 168; } else if (h.tick.n == 6) { w = 140; }
                else if (h.tick.n == 7) { w = 120; } else if (h.tick.n == 8) { w = 105; }
                if (!in_range || !cp_ok || (h.tick.cong != 0 && w == 0)) {
                    // forged: nothing
                } else if (h.tick.cong != 0) {
                    POINT(0) POINT(1) POINT(2) POINT(3) POINT(4) POINT(5) POINT(6) POINT(7)
                    if (mine) {
                        r_weight.write((bit<32>)m.j, w); r_stamp.write((bit<32>)m.j, h.tick.now);
                        r_cp.write((bit<32>)m.j, h.tick.cp);
                    } else if (m.found == 0 && m.has_free == 1) {
                        bit<32> f = (bit<32>)m.free_j;
                        r_valid.write(f, 1); r_flow.write(f, h.tick.flow); r_dest.write(f, h.tick.dest);
                        r_weight.write(f, w); r_stamp.write(f, h.tick.now); r_cp.write(f, h.tick.cp);
                    }
                } else if (mine) {
                    r_valid.write((bit<32>)m.j, 0);
                }
                mark_to_drop(sm);
            } else {
                r_paired.write(0, 0);
                bit<1> ok = 0;
                bit<1> isolated = 0;
                h.tick.path = 0; h.tick.mask = 0;
                if (in_range) {
                    ok = 1;
                    m.sum = 0;
                    SUM(0) SUM(1) SUM(2) SUM(3) SUM(4) SUM(5) SUM(6) SUM(7)
                    m.k = 0;
                    STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)
                    if (m.k > m.n_paths - 1) { m.k = m.n_paths - 1; }
                    h.tick.mask = (((bit<16>)1 << m.k) - 1) << (m.n_paths - m.k);
                    if (mine) {
                        r_stamp.write((bit<32>)m.j, h.tick.now);
                        isolated = 1;
                        m.r = 0;
                        RANK(0) RANK(1) RANK(2) RANK(3) RANK(4) RANK(5) RANK(6)
                        MOD() MOD() MOD() MOD() MOD() MOD() MOD()
                        h.tick.path = m.n_paths - 1 - m.r;
                    }
                }
                h.tick.flags = 5w0 ++ paired ++ isolated ++ ok;
                sm.egress_spec = 1;
            }
        }
    }
}

control IsoEgress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control IsoCompute(inout headers_t h, inout meta_t m) { apply { } }

control IsoDeparser(packet_out pk, in headers_t h) {
    apply { pk.emit(h.eth); pk.emit(h.tick); }
}

V1Switch(IsoParser(), IsoVerify(), IsoIngress(), IsoEgress(), IsoCompute(), IsoDeparser()) main;
