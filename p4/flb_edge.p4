// FLB at the source edge switch (paper 002, sections 3.1, 3.2, 3.4, Algorithm 1), P4_16 for v1model (bmv2
// simple_switch): the per-packet path decision of lbpipe's `flb-route` block (docs/flb_route.md; golden model
// sim/flb/route.py), decision for decision.
//
// Per packet of an IPv4 flow: flow = CRC16 of the 5-tuple (v1model's crc16, as the paper's prototype keys its flow
// table); dest = the destination edge switch, from an LPM table on the IPv4 destination; now = the timer tick.
// The flow table (its previous packet's tick and its path) lives in one register array indexed by the flow. A flow
// with no entry, or idle `timeout` ticks or more, is new: the minimum-delay path outside dest's isolated set. An
// existing flow on path p with gap dt moves to the fastest eligible p' with 0 < delay(p) - delay(p') < dt - margin,
// else stays; off an isolated path it takes the fastest eligible p' slower than p or with delay(p) - delay(p') <
// dt - margin, else the fastest eligible path. Ties go to the lowest path index; when every path is isolated,
// isolation is ignored. `margin` (ticks, 0 by default: the paper's window) is flb-route's: "< dt - margin" on
// integer ticks is its "<= dt - 1 - margin" (docs/flb_route.md, "Tick rounding and margin").
//
// Test harness header (`flb_tick_t`, EtherType 0x88B5, IEEE 802 local experimental, between Ethernet and IPv4):
// bmv2's clock cannot be set from a test, so the tick comes in the frame (op 0), and the decision goes back out
// in the same header (flow, dest, path, flags), every frame leaving on port 1 unless `path_port` maps the path.
// Op 1 carries one lbpipe `ctl` command (table, index, data), applied in the data plane with the block's range
// rules and dropped: commands between packets, in trace order. Frames without the header take the tick from
// ingress_global_timestamp (bmv2: microseconds) >> TICK_SHIFT and leave on path_port's port for their path.
//
// Control plane (lbpipe/p4.py flb_edge_commands writes it from the same `ctl` commands as the RTL):
//   table_set_default flb_config set_config N_PATHS N_DESTS TIMEOUT MARGIN   (default 8 16 4096 0)
//   table_add dest_edge set_dest PREFIX/LEN => DEST                    (a miss: no route, dest 0xFFFF)
//   register_write r_delay DEST*8+PATH DELAY                           (ctl table 0)
//   register_write r_isolated DEST MASK                                (ctl table 1)
//   table_add path_port set_port PATH => PORT                          (deployment; a miss: port 1)

#include <core.p4>
#include <v1model.p4>

const bit<16> ETH_IPV4 = 0x0800;
const bit<16> ETH_FLB_TICK = 0x88B5;
const bit<8> IP_TCP = 6;
const bit<8> IP_UDP = 17;
// The largest tables: 8 paths per destination (the unrolled choice below), 256 destinations, 2^16 flows (CRC16).
#define MAX_PATHS 8
#define MAX_DESTS 256
#define N_FLOWS 65536
// Deployment only: ticks of 2^TICK_SHIFT microseconds when the frame carries no tick.
#define TICK_SHIFT 0
const bit<16> NO_DEST = 0xFFFF;

header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header flb_tick_t {
    bit<8> op; bit<8> kind; bit<16> tag; bit<32> now;               // in: op 0 packet, 1 control command
    bit<8> ctl_table; bit<24> ctl_index; bit<64> ctl_data;          // in: op 1
    bit<16> flow; bit<16> dest; bit<8> path; bit<8> flags;          // out: flags bit 0 ok, 1 new, 2 rerouted
    bit<16> ether_type;
}
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> total_len; bit<16> id;
    bit<3> flags; bit<13> frag; bit<8> ttl; bit<8> protocol; bit<16> checksum; bit<32> src; bit<32> dst;
}
header ipv4_opts_t { varbit<320> opts; }
header ports_t { bit<16> sport; bit<16> dport; }                    // TCP's and UDP's first four bytes

struct headers_t { ethernet_t eth; flb_tick_t tick; ipv4_t ipv4; ipv4_opts_t ipv4_opts; ports_t ports; }

struct meta_t {
    bit<8> n_paths; bit<16> n_dests; bit<32> timeout; bit<16> margin;
    bit<16> flow; bit<16> dest; bit<16> now;
    bit<16> d0; bit<16> d1; bit<16> d2; bit<16> d3; bit<16> d4; bit<16> d5; bit<16> d6; bit<16> d7;
    bit<16> dcur; bit<16> gap; bit<8> cur;
    bit<8> exists; bit<8> elig; bit<8> cand;
    bit<17> best_d; bit<8> path; bit<1> ok; bit<1> is_new; bit<1> rerouted;
}

parser FlbParser(packet_in pk, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pk.extract(h.eth);
        transition select(h.eth.ether_type) { ETH_FLB_TICK: tick; ETH_IPV4: ipv4; default: accept; }
    }
    state tick {
        pk.extract(h.tick);
        transition select(h.tick.op, h.tick.ether_type) { (0, ETH_IPV4): ipv4; default: accept; }
    }
    state ipv4 {
        pk.extract(h.ipv4);
        transition select(h.ipv4.ihl) { 5: l4; 6 &&& 0xE: opts; 8 &&& 0x8: opts; default: accept; }
    }
    state opts {
        pk.extract(h.ipv4_opts, ((bit<32>)h.ipv4.ihl - 5) * 32);
        transition l4;
    }
    // Ports only from an unfragmented TCP or UDP packet: fragments hash with ports 0 (every fragment alike).
    state l4 {
        transition select(h.ipv4.flags[0:0], h.ipv4.frag, h.ipv4.protocol) {
            (0, 0, IP_TCP): ports; (0, 0, IP_UDP): ports; default: accept;
        }
    }
    state ports { pk.extract(h.ports); transition accept; }
}

control FlbVerify(inout headers_t h, inout meta_t m) { apply { } }

control FlbIngress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    register<bit<32>>(N_FLOWS) r_flows;                 // bit 31 valid, 23:16 path, 15:0 stamp (tick)
    register<bit<16>>(MAX_DESTS * MAX_PATHS) r_delay;   // dest * 8 + path: queueing delay in ticks
    register<bit<8>>(MAX_DESTS) r_isolated;             // dest: mask of isolated paths

    action set_config(bit<8> n_paths, bit<16> n_dests, bit<32> timeout, bit<16> margin) {
        m.n_paths = n_paths; m.n_dests = n_dests; m.timeout = timeout; m.margin = margin;
    }
    table flb_config { actions = { set_config; } default_action = set_config(8, 16, 4096, 0); }

    action set_dest(bit<16> dest) { m.dest = dest; }
    action no_route() { m.dest = NO_DEST; }
    table dest_edge {
        key = { h.ipv4.dst: lpm; }
        actions = { set_dest; no_route; }
        default_action = no_route();
        size = 1024;
    }

    action set_port(bit<9> port) { sm.egress_spec = port; }
    table path_port { key = { m.path: exact; } actions = { set_port; } default_action = set_port(1); size = 64; }

    // The range rules of the block's ctl port: an out-of-range destination, path or value changes nothing.
    action ctl_delay() {
        r_delay.write((bit<32>)h.tick.ctl_index[23:4] * MAX_PATHS + (bit<32>)h.tick.ctl_index[3:0],
                      h.tick.ctl_data[15:0]);
    }
    action ctl_isolate() { r_isolated.write((bit<32>)h.tick.ctl_index, h.tick.ctl_data[7:0]); }

    action read_delays() {
        bit<32> base = (bit<32>)m.dest * MAX_PATHS;
        r_delay.read(m.d0, base); r_delay.read(m.d1, base + 1); r_delay.read(m.d2, base + 2);
        r_delay.read(m.d3, base + 3); r_delay.read(m.d4, base + 4); r_delay.read(m.d5, base + 5);
        r_delay.read(m.d6, base + 6); r_delay.read(m.d7, base + 7);
    }

// Path Q joins the candidates when eligible and COND holds (DQ its delay).
#define MEMBER(Q, DQ, COND) if (m.elig[Q:Q] == 1 && (COND)) { m.cand = m.cand | (8w1 << Q); }
// Within the bound: delay(p) - delay(q) < gap - margin, as delay(p) + margin < delay(q) + gap in 18-bit sums (no
// wrap: each side is below 2^17; gap - margin may be negative: a gap at or below the margin admits no faster path).
#define WITHIN(DQ) ((bit<18>)m.dcur + (bit<18>)m.margin < (bit<18>)DQ + (bit<18>)m.gap)
// The window of Algorithm 1, 0 < delay(p) - delay(q) < gap - margin.
#define IN_WINDOW(DQ) (DQ < m.dcur && WITHIN(DQ))
// Cannot overtake the previous packet: q slower than p (whatever the margin), or within the bound. With margin 0
// a slower q is always within the bound; with a margin it need not be (gap 0, q one tick slower, margin 1).
#define SAFE(DQ) (DQ > m.dcur || WITHIN(DQ))
// The fastest candidate, ties to the lowest index (strict <, in index order).
#define PICK(Q, DQ) if (m.cand[Q:Q] == 1 && (bit<17>)DQ < m.best_d) { m.best_d = (bit<17>)DQ; m.path = Q; }

    apply {
        flb_config.apply();
        if (h.tick.isValid() && h.tick.op == 1) {
            bit<32> dest = (bit<32>)h.tick.ctl_index[23:4];
            bit<8> path = (bit<8>)h.tick.ctl_index[3:0];
            if (h.tick.ctl_table == 0 && dest < (bit<32>)m.n_dests && path < m.n_paths
                    && h.tick.ctl_data[63:16] == 0) {
                ctl_delay();
            } else if (h.tick.ctl_table == 1 && (bit<32>)h.tick.ctl_index < (bit<32>)m.n_dests
                    && (h.tick.ctl_data >> m.n_paths) == 0) {
                ctl_isolate();
            }
            mark_to_drop(sm);
            return;
        }
        m.path = 0; m.ok = 0; m.is_new = 0; m.rerouted = 0; m.flow = 0; m.dest = NO_DEST;
        if (h.ipv4.isValid()) {
            bit<16> sport = 0;
            bit<16> dport = 0;
            if (h.ports.isValid()) { sport = h.ports.sport; dport = h.ports.dport; }
            hash(m.flow, HashAlgorithm.crc16, (bit<16>)0, { h.ipv4.src, h.ipv4.dst, h.ipv4.protocol, sport, dport },
                 (bit<32>)N_FLOWS);
            dest_edge.apply();
            if (h.tick.isValid()) {
                m.now = h.tick.now[15:0];
            } else {
                m.now = (bit<16>)(sm.ingress_global_timestamp >> TICK_SHIFT);
            }
        }
        // A flow is always in range (16 bits, 2^16 entries); the destination must be below n_dests.
        if (h.ipv4.isValid() && (bit<16>)m.dest < m.n_dests) {
            m.ok = 1;
            bit<32> entry;
            r_flows.read(entry, (bit<32>)m.flow);
            m.gap = m.now - entry[15:0];
            m.cur = entry[23:16];
            bool existing = entry[31:31] == 1 && (bit<32>)m.gap < m.timeout;
            read_delays();
            bit<8> iso;
            r_isolated.read(iso, (bit<32>)m.dest);
            m.exists = (bit<8>)(((bit<9>)1 << m.n_paths) - 1);
            m.elig = m.exists & ~iso;
            if (m.elig == 0) { m.elig = m.exists; }
            r_delay.read(m.dcur, (bit<32>)m.dest * MAX_PATHS + (bit<32>)m.cur);
            m.cand = 0;
            if (!existing) {
                m.cand = m.elig;
            } else if (((m.elig >> m.cur) & 1) == 0) {
                MEMBER(0, m.d0, SAFE(m.d0)) MEMBER(1, m.d1, SAFE(m.d1)) MEMBER(2, m.d2, SAFE(m.d2))
                MEMBER(3, m.d3, SAFE(m.d3)) MEMBER(4, m.d4, SAFE(m.d4)) MEMBER(5, m.d5, SAFE(m.d5))
                MEMBER(6, m.d6, SAFE(m.d6)) MEMBER(7, m.d7, SAFE(m.d7))
                if (m.cand == 0) { m.cand = m.elig; }
            } else {
                MEMBER(0, m.d0, IN_WINDOW(m.d0)) MEMBER(1, m.d1, IN_WINDOW(m.d1))
                MEMBER(2, m.d2, IN_WINDOW(m.d2)) MEMBER(3, m.d3, IN_WINDOW(m.d3))
                MEMBER(4, m.d4, IN_WINDOW(m.d4)) MEMBER(5, m.d5, IN_WINDOW(m.d5))
                MEMBER(6, m.d6, IN_WINDOW(m.d6)) MEMBER(7, m.d7, IN_WINDOW(m.d7))
            }
            if (m.cand == 0) {
                m.path = m.cur;                         // Algorithm 1, lines 13-14: stay
            } else {
                m.best_d = 0x1FFFF;
                PICK(0, m.d0) PICK(1, m.d1) PICK(2, m.d2) PICK(3, m.d3)
                PICK(4, m.d4) PICK(5, m.d5) PICK(6, m.d6) PICK(7, m.d7)
            }
            if (existing) {
                m.rerouted = (bit<1>)(m.path != m.cur);
            } else {
                m.is_new = 1;
            }
            r_flows.write((bit<32>)m.flow, 1w1 ++ 7w0 ++ m.path ++ m.now);
        }
        if (m.ok == 1) { path_port.apply(); } else { sm.egress_spec = 1; }
        if (h.tick.isValid()) {
            h.tick.flow = m.flow; h.tick.dest = m.dest; h.tick.path = m.path;
            h.tick.flags = 5w0 ++ m.rerouted ++ m.is_new ++ m.ok;
        }
    }
}

control FlbEgress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control FlbCompute(inout headers_t h, inout meta_t m) { apply { } }

control FlbDeparser(packet_out pk, in headers_t h) {
    apply { pk.emit(h.eth); pk.emit(h.tick); pk.emit(h.ipv4); pk.emit(h.ipv4_opts); pk.emit(h.ports); }
}

V1Switch(FlbParser(), FlbVerify(), FlbIngress(), FlbEgress(), FlbCompute(), FlbDeparser()) main;
