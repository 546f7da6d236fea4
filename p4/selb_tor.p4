// SELB at the source ToR (paper 004, section III "Rerouting Strategy"), P4_16 for v1model (bmv2 simple_switch): the
// per-packet path of lbpipe's `selb-reroute` block (docs/selb_reroute.md; golden model sim/selb/reroute.py),
// decision for decision, fed with the cluster fields `selb-cluster` publishes (docs/selb_cluster.md).
//
// Per packet of an IPv4 flow: flow = CRC16 of the 5-tuple (v1model's crc16, as flb_edge.p4), its low log2 n_flows
// bits; path = the path the packet was looked up on (harness header; without it, the flow's current path, or
// CRC16 mod n_paths for a new flow); now = the timer tick. The per-flow entry (valid, in flight, epoch, path,
// the tick of the last reroute) lives in one register array indexed by the flow. The cluster fields come from
// registers the control plane writes (the clustering itself, k-means, runs off the switch: lbpipe's
// sim/selb/cluster.py, whose published result lbpipe/p4.py selb_cluster_commands turns into register writes):
// per path its cluster and congested flag, per cluster the `alt` mask (its non-congested paths), and the
// shortest-queue path. A 16-bit LFSR in a register, stepped once per packet as the block's, draws uniformly among
// the set bits of `alt` (the floor(state x m / 2^16)-th of its m, from bit 0); an empty `alt` gives the shortest
// path. A data packet (harness `kind` 1; every packet without the harness header) of a congested flow with no reroute
// in flight (`hold` ticks since the last) whose candidate differs from its path moves: this packet is the tail (it
// leaves on the old path, marked, with the old epoch); the entry takes the new path and flips its epoch.
//
// Test harness header (`selb_tick_t`, EtherType 0x88B5, between Ethernet and IPv4): op 0 a packet (tick, the
// lookup path, kind, tag in; flow, path, flags and the cluster fields used out); op 1 an lbpipe `ctl` command of
// the block (selb-reroute has no tables: dropped, nothing changes); op 2 a control-plane register write (table,
// index, data; range rules below; dropped). Frames without the header take the tick from
// ingress_global_timestamp >> TICK_SHIFT and leave on path_port's port for their path.
//
// Control plane (lbpipe/p4.py selb_tor_commands):
//   table_set_default selb_config set_config N_PATHS FLOW_MASK HOLD      (default 64 1023 32)
//   register_write r_lfsr 0 SEED                                          (the block's lfsr_seed; 0 at power-up)
//   register_write r_cluster PATH CLUSTER / r_congested PATH BIT / r_alt CLUSTER MASK / r_shortest 0 PATH
//   in-band op 2: table 0 cluster (index path), 1 congested (path), 2 alt (cluster), 3 shortest (index 0)

#include <core.p4>
#include <v1model.p4>

const bit<16> ETH_IPV4 = 0x0800;
const bit<16> ETH_SELB_TICK = 0x88B5;
const bit<8> IP_TCP = 6;
const bit<8> IP_UDP = 17;
#define MAX_PATHS 64
#define MAX_CLUSTERS 64
#define MAX_FLOWS 4096
#define TICK_SHIFT 0

header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header selb_tick_t {
    bit<8> op; bit<8> kind; bit<16> tag; bit<32> now; bit<8> path;  // in: op 0 packet, 1 block ctl, 2 register
    bit<8> ctl_table; bit<24> ctl_index; bit<64> ctl_data;          // in: op 1 and 2
    bit<16> flow; bit<8> out_path; bit<8> flags;                    // out: flags 0 ok, 1 tail, 2 epoch, 3 stale,
    bit<8> cluster; bit<8> shortest; bit<64> alt;                   //      4 congested, 5 new; the cluster fields
    bit<16> ether_type;
}
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> total_len; bit<16> id;
    bit<3> flags; bit<13> frag; bit<8> ttl; bit<8> protocol; bit<16> checksum; bit<32> src; bit<32> dst;
}
header ipv4_opts_t { varbit<320> opts; }
header ports_t { bit<16> sport; bit<16> dport; }

struct headers_t { ethernet_t eth; selb_tick_t tick; ipv4_t ipv4; ipv4_opts_t ipv4_opts; ports_t ports; }

struct meta_t {
    bit<8> n_paths; bit<16> flow_mask; bit<16> hold;
    bit<8> path_mask; bit<64> alt_mask;
    bit<16> flow; bit<16> now; bit<8> path; bit<16> lfsr;
    bit<8> cluster; bit<8> congested; bit<64> alt; bit<8> shortest;
    bit<64> ones; bit<8> rank; bit<8> cand;
    bit<8> cur; bit<1> inflight; bit<1> epoch; bit<16> since;
    bit<1> ok; bit<1> is_new; bit<1> stale; bit<1> move;
}

parser SelbParser(packet_in pk, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pk.extract(h.eth);
        transition select(h.eth.ether_type) { ETH_SELB_TICK: tick; ETH_IPV4: ipv4; default: accept; }
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
    state l4 {
        transition select(h.ipv4.flags[0:0], h.ipv4.frag, h.ipv4.protocol) {
            (0, 0, IP_TCP): ports; (0, 0, IP_UDP): ports; default: accept;
        }
    }
    state ports { pk.extract(h.ports); transition accept; }
}

control SelbVerify(inout headers_t h, inout meta_t m) { apply { } }

control SelbIngress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    register<bit<32>>(MAX_FLOWS) r_flows;           // bit 31 valid, 30 in flight, 29 epoch, 23:16 path, 15:0 since
    register<bit<16>>(1) r_lfsr;                    // the LFSR state (the control plane seeds it)
    register<bit<8>>(MAX_PATHS) r_cluster;          // path -> its published cluster
    register<bit<8>>(MAX_PATHS) r_congested;        // path -> its published congested flag
    register<bit<64>>(MAX_CLUSTERS) r_alt;          // cluster -> mask of its non-congested paths
    register<bit<8>>(1) r_shortest;                 // the published shortest-queue path

    action set_config(bit<8> n_paths, bit<16> flow_mask, bit<16> hold) {
        m.n_paths = n_paths; m.flow_mask = flow_mask; m.hold = hold;
    }
    table selb_config { actions = { set_config; } default_action = set_config(64, 1023, 32); }

    action set_port(bit<9> port) { sm.egress_spec = port; }
    table path_port { key = { m.path: exact; } actions = { set_port; } default_action = set_port(1); size = 64; }

    action w_cluster() { r_cluster.write((bit<32>)h.tick.ctl_index, h.tick.ctl_data[7:0]); }
    action w_congested() { r_congested.write((bit<32>)h.tick.ctl_index, h.tick.ctl_data[7:0]); }
    action w_alt() { r_alt.write((bit<32>)h.tick.ctl_index, h.tick.ctl_data); }
    action w_shortest() { r_shortest.write(0, h.tick.ctl_data[7:0]); }

// One path of the draw's search, in path order: the set bit of rank 0 is the candidate; every set bit counts the
// rank down (past 0 it wraps to 255 and stays above 0 for the rest of the 64).
#define PICK(P) if (m.alt[P:P] == 1) { if (m.rank == 0) { m.cand = P; } m.rank = m.rank - 1; }
#define PICK8(A, B, C, D, E, F, G, H) PICK(A) PICK(B) PICK(C) PICK(D) PICK(E) PICK(F) PICK(G) PICK(H)

    apply {
        selb_config.apply();
        m.path_mask = m.n_paths - 1;
        m.alt_mask = (bit<64>)(((bit<128>)1 << m.n_paths) - 1);
        if (h.tick.isValid() && h.tick.op != 0) {
            bit<32> index = (bit<32>)h.tick.ctl_index;
            bit<64> data = h.tick.ctl_data;
            if (h.tick.op == 2) {
                // The range rules: an index or value out of range, or another table, changes nothing.
                if (h.tick.ctl_table == 0 && index < (bit<32>)m.n_paths && data < MAX_CLUSTERS) {
                    w_cluster();
                } else if (h.tick.ctl_table == 1 && index < (bit<32>)m.n_paths && data < 2) {
                    w_congested();
                } else if (h.tick.ctl_table == 2 && index < MAX_CLUSTERS && (data & ~m.alt_mask) == 0) {
                    w_alt();
                } else if (h.tick.ctl_table == 3 && index == 0 && data < (bit<64>)m.n_paths) {
                    w_shortest();
                }
            }
            mark_to_drop(sm);                       // op 1 (the block's ctl: no tables) and op 2 leave nothing
        } else {
            m.ok = 0; m.is_new = 0; m.stale = 0; m.move = 0; m.flow = 0; m.path = 0; m.epoch = 0;
            m.cluster = 0; m.congested = 0; m.alt = 0; m.shortest = 0;
            if (h.ipv4.isValid()) {
                m.ok = 1;
                bit<16> sport = 0;
                bit<16> dport = 0;
                if (h.ports.isValid()) { sport = h.ports.sport; dport = h.ports.dport; }
                hash(m.flow, HashAlgorithm.crc16, (bit<16>)0, { h.ipv4.src, h.ipv4.dst, h.ipv4.protocol, sport, dport },
                     (bit<32>)65536);
                bit<16> crc = m.flow;
                m.flow = m.flow & m.flow_mask;
                bit<32> entry;
                r_flows.read(entry, (bit<32>)m.flow);
                if (h.tick.isValid()) {
                    m.now = h.tick.now[15:0];
                    m.path = h.tick.path & m.path_mask;
                } else {
                    m.now = (bit<16>)(sm.ingress_global_timestamp >> TICK_SHIFT);
                    if (entry[31:31] == 1) { m.path = entry[23:16]; } else { m.path = crc[7:0] & m.path_mask; }
                }
                // The cluster fields of the lookup path (selb-cluster's published view).
                r_cluster.read(m.cluster, (bit<32>)m.path);
                r_congested.read(m.congested, (bit<32>)m.path);
                r_alt.read(m.alt, (bit<32>)m.cluster);
                r_shortest.read(m.shortest, 0);
                // The draw: the LFSR's state, then one step (x^16 + x^14 + x^13 + x^11 + 1).
                r_lfsr.read(m.lfsr, 0);
                r_lfsr.write(0, m.lfsr[14:0] ++ (m.lfsr[15:15] ^ m.lfsr[13:13] ^ m.lfsr[12:12] ^ m.lfsr[10:10]));
                // Candidate: alt's set bits counted (m, by bit-parallel sums), the rank floor(state x m / 2^16),
                // the set bit of that rank; alt empty: the shortest path.
                m.ones = m.alt - ((m.alt >> 1) & 0x5555555555555555);
                m.ones = (m.ones & 0x3333333333333333) + ((m.ones >> 2) & 0x3333333333333333);
                m.ones = (m.ones + (m.ones >> 4)) & 0x0F0F0F0F0F0F0F0F;
                m.ones = m.ones + (m.ones >> 8);
                m.ones = m.ones + (m.ones >> 16);
                m.ones = (m.ones + (m.ones >> 32)) & 0x7F;
                m.rank = (bit<8>)((((bit<32>)m.lfsr) * (bit<32>)m.ones) >> 16);
                m.cand = m.shortest;
                if (m.alt != 0) {
                    PICK8(0, 1, 2, 3, 4, 5, 6, 7) PICK8(8, 9, 10, 11, 12, 13, 14, 15)
                    PICK8(16, 17, 18, 19, 20, 21, 22, 23) PICK8(24, 25, 26, 27, 28, 29, 30, 31)
                    PICK8(32, 33, 34, 35, 36, 37, 38, 39) PICK8(40, 41, 42, 43, 44, 45, 46, 47)
                    PICK8(48, 49, 50, 51, 52, 53, 54, 55) PICK8(56, 57, 58, 59, 60, 61, 62, 63)
                }
                // The entry: a new flow takes the lookup path; an existing one looked up on another path is stale.
                if (entry[31:31] == 0) {
                    m.is_new = 1;
                    m.cur = m.path; m.inflight = 0; m.epoch = 0; m.since = 0;
                } else {
                    m.cur = entry[23:16]; m.inflight = entry[30:30]; m.epoch = entry[29:29]; m.since = entry[15:0];
                    if (m.path != m.cur) { m.stale = 1; }
                    if (m.now - m.since >= m.hold) { m.inflight = 0; }
                }
                // Only a data packet moves (selb-reorder honours a tail on DATA only); without the harness header
                // every packet is data.
                bit<1> data = 1;
                if (h.tick.isValid() && h.tick.kind != 1) { data = 0; }
                if (data == 1 && m.stale == 0 && m.congested == 1 && m.inflight == 0 && m.cand != m.cur) {
                    m.move = 1;
                    r_flows.write((bit<32>)m.flow, 1w1 ++ 1w1 ++ ~m.epoch ++ 5w0 ++ m.cand ++ m.now);
                } else {
                    r_flows.write((bit<32>)m.flow, 1w1 ++ m.inflight ++ m.epoch ++ 5w0 ++ m.cur ++ m.since);
                }
                m.path = m.cur;                     // the packet leaves on the current path (the tail included)
            }
            if (m.ok == 1) { path_port.apply(); } else { sm.egress_spec = 1; }
            if (h.tick.isValid()) {
                h.tick.flow = m.flow; h.tick.out_path = m.path;
                h.tick.flags = 2w0 ++ m.is_new ++ m.congested[0:0] ++ m.stale ++ m.epoch ++ m.move ++ m.ok;
                h.tick.cluster = m.cluster; h.tick.shortest = m.shortest; h.tick.alt = m.alt;
            }
        }
    }
}

control SelbEgress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control SelbCompute(inout headers_t h, inout meta_t m) { apply { } }

control SelbDeparser(packet_out pk, in headers_t h) {
    apply { pk.emit(h.eth); pk.emit(h.tick); pk.emit(h.ipv4); pk.emit(h.ipv4_opts); pk.emit(h.ports); }
}

V1Switch(SelbParser(), SelbVerify(), SelbIngress(), SelbEgress(), SelbCompute(), SelbDeparser()) main;
