// SELB at the destination ToR (paper 004, section III "Packet Reordering", ConWeave's method), P4_16 for v1model
// (bmv2 simple_switch): lbpipe's `selb-reorder` block (docs/selb_reorder.md; golden model sim/selb/reorder.py),
// decision for decision, with the packets really held and released.
//
// Per flow (CRC16 of the 5-tuple, its low log2 n_flows bits, as selb_tor.p4) the in-order epoch, 0 after reset.
// A DATA packet carries selb-reroute's epoch bit and tail mark (harness header: flags bits 2 and 1, as selb_tor.p4
// writes them; without the header, a RoCEv2 request's BTH reserved byte, bits 1 and 0). A packet of the other epoch
// with no tail arriving before the old path's tail opens the lowest free of n_buffers reorder buffers (none free:
// it passes, a fallback); the flow's next packets of that epoch join it. The tail leaves, then the buffer's packets
// in arrival order; a buffer also drains when it fills (the filling packet last), on a second reroute's tail (last),
// and when `timeout` ticks have passed since it opened (checked with every packet, against its own tick, before it).
//
// Holding (p4/README.md): a held packet circulates through the hold port's egress queue (HOLD_PORT, its rate set by
// the control plane, so that waiting packets do not starve the input: bmv2 serves recirculated packets first) and
// back through recirculation; each pass it reads its buffer generation's release record. Every DATA packet of a flow
// leaves with a number in its flow's release order (a pass: the next number at once; a release: the tail's, then
// the buffer's packets' in slot order), and leaves only when its flow's serving counter reaches it (else another
// pass). So each flow leaves in the golden model's order; flows may interleave otherwise.
//
// Test harness header (`selb_tick_t`, selb_tor.p4's, EtherType 0x88B5, between Ethernet and IPv4): op 0 a packet
// (kind, tag, now, flags bit 1 tail, bit 2 epoch in; flow and flags bit 6 `held` out); op 1 an lbpipe `ctl` command
// of the block (no tables) and op 2 (selb_tor.p4's register writes): dropped, nothing changes. Frames without the
// header take the tick from ingress_global_timestamp >> TICK_SHIFT.
// Without the header (behind selb-tx-wire), a RoCEv2 request is a DATA packet in any of the frame forms lbpipe's
// parser takes: Ethernet, 0 to 2 tags (outer 0x8100 or 0x88A8, inner 0x8100), IPv4 (not a fragment) or IPv6 (next
// header UDP, no extension headers), UDP port 4791; its flow the CRC16 of the two addresses (4 or 16 bytes each)
// and the BTH's destination QP. The frame leaves as it came, tags included.
//
// Control plane (lbpipe/p4.py selb_reorder_commands):
//   table_set_default reorder_config set_config FLOW_MASK N_BUFFERS DEPTH TIME_MASK TIMEOUT
//                                                                  (default 1023 8 32 65535 1024: the block's)
//   set_queue_rate RATE 2                                          (the hold port's pace, packets per second)
// Counters: register_read r_stats (0 items, 1 held, 2 reorders, 3 timeouts, 4 overflows, 5 second reroutes,
// 6 fallbacks, 7 stale tails: the block's; 8 passes of held packets, 9 passes of packets waiting their turn,
// 10 release records overwritten before their packets read them).

#include <core.p4>
#include <v1model.p4>

const bit<16> ETH_IPV4 = 0x0800;
const bit<16> ETH_IPV6 = 0x86DD;
const bit<16> TPID_C = 0x8100;      // a C-tag: the only inner tag, or an outer one
const bit<16> TPID_S = 0x88A8;      // an S-tag: outer only
const bit<16> ETH_SELB_TICK = 0x88B5;
const bit<8> IP_TCP = 6;
const bit<8> IP_UDP = 17;
const bit<16> ROCE_PORT = 4791;
const bit<8> DATA = 1;              // lbpipe's PacketKind.DATA
#define MAX_FLOWS 4096
#define MAX_BUFFERS 16
// Release records kept per buffer: a held packet must read its record before its buffer is opened GENS more times.
#define GENS 256
#define HOLD_PORT 2
#define TICK_SHIFT 0

// Where a packet is (kept across passes).
const bit<2> S_NEW = 0;             // first pass: the decision
const bit<2> S_HELD = 1;            // in a reorder buffer: waits for its release record
const bit<2> S_WAIT = 2;            // has its number in its flow's order: waits for its turn

header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header selb_tick_t {
    bit<8> op; bit<8> kind; bit<16> tag; bit<32> now; bit<8> path;  // in: op 0 packet, 1 block ctl, 2 register
    bit<8> ctl_table; bit<24> ctl_index; bit<64> ctl_data;
    bit<16> flow; bit<8> out_path; bit<8> flags;                    // flags: 1 tail, 2 epoch (in); 6 held (out)
    bit<8> cluster; bit<8> shortest; bit<64> alt;
    bit<16> ether_type;
}
header vlan_t { bit<16> tci; bit<16> ether_type; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> total_len; bit<16> id;
    bit<3> flags; bit<13> frag; bit<8> ttl; bit<8> protocol; bit<16> checksum; bit<32> src; bit<32> dst;
}
header ipv4_opts_t { varbit<320> opts; }
header ipv6_t {
    bit<4> version; bit<8> tclass; bit<20> label; bit<16> payload_len; bit<8> next_hdr; bit<8> hop_limit;
    bit<128> src; bit<128> dst;
}
header ports_t { bit<16> sport; bit<16> dport; }
header udp_rest_t { bit<16> len; bit<16> checksum; }
header bth_t {
    bit<8> opcode; bit<4> flags; bit<4> tver; bit<16> pkey; bit<8> resv8a; bit<24> dqpn;
    bit<8> ackreq_resv; bit<24> psn;
}

struct headers_t {
    ethernet_t eth; selb_tick_t tick; vlan_t vlan_outer; vlan_t vlan_inner; ipv4_t ipv4; ipv4_opts_t ipv4_opts;
    ipv6_t ipv6; ports_t ports; udp_rest_t udp; bth_t bth;
}

struct meta_t {
    bit<16> flow_mask; bit<32> n_buffers; bit<16> depth; bit<32> tmask; bit<32> timeout;
    bit<32> now; bit<1> data; bit<1> epoch; bit<1> tail; bit<16> crc;
    bit<32> hit; bit<32> free;              // the flow's buffer, the lowest free one (MAX_BUFFERS: none)
    // Kept across passes:
    @field_list(1) bit<2> state;
    @field_list(1) bit<16> flow;
    @field_list(1) bit<32> buf;
    @field_list(1) bit<16> gen;
    @field_list(1) bit<16> slot;
    @field_list(1) bit<16> number;
    @field_list(1) bit<1> held;             // it was in a buffer (the output's `held`)
    @field_list(1) bit<1> again;            // another pass (set in ingress, done in egress)
}

parser ReorderParser(packet_in pk, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pk.extract(h.eth);
        transition select(h.eth.ether_type) {
            ETH_SELB_TICK: tick; ETH_IPV4: ipv4; ETH_IPV6: ipv6; TPID_C: vlan_outer; TPID_S: vlan_outer;
            default: accept;
        }
    }
    // Tags as lbpipe's parser takes them (docs/packet_io.md): an outer 0x8100 or 0x88A8, then an inner 0x8100; a
    // third tag, an inner 0x88A8 or another TPID ends the parse (the frame passes as another kind).
    state vlan_outer {
        pk.extract(h.vlan_outer);
        transition select(h.vlan_outer.ether_type) {
            ETH_IPV4: ipv4; ETH_IPV6: ipv6; TPID_C: vlan_inner; default: accept;
        }
    }
    state vlan_inner {
        pk.extract(h.vlan_inner);
        transition select(h.vlan_inner.ether_type) { ETH_IPV4: ipv4; ETH_IPV6: ipv6; default: accept; }
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
            (0, 0, IP_TCP): ports; (0, 0, IP_UDP): udp; default: accept;
        }
    }
    // IPv6: UDP as the next header, no extension headers (lbpipe's parser does not follow them either).
    state ipv6 {
        pk.extract(h.ipv6);
        transition select(h.ipv6.version, h.ipv6.next_hdr) { (6, IP_UDP): udp; default: accept; }
    }
    state ports { pk.extract(h.ports); transition accept; }
    state udp {
        pk.extract(h.ports);
        transition select(h.ports.dport) { ROCE_PORT: roce; default: accept; }
    }
    state roce {
        pk.extract(h.udp);
        pk.extract(h.bth);
        transition accept;
    }
}

control ReorderVerify(inout headers_t h, inout meta_t m) { apply { } }

// The flow table, the buffers, the release records and the per-flow order (global: ingress and egress use them).
register<bit<1>>(MAX_FLOWS) r_epoch;            // flow -> its in-order epoch
register<bit<16>>(MAX_FLOWS) r_next;            // flow -> the next number in its release order
register<bit<16>>(MAX_FLOWS) r_serving;         // flow -> the number whose turn it is to leave
register<bit<1>>(MAX_BUFFERS) r_used;
register<bit<16>>(MAX_BUFFERS) r_bflow;
register<bit<1>>(MAX_BUFFERS) r_bepoch;
register<bit<32>>(MAX_BUFFERS) r_start;
register<bit<16>>(MAX_BUFFERS) r_count;
register<bit<16>>(MAX_BUFFERS) r_gen;           // the buffer's openings so far (its current generation)
register<bit<33>>(MAX_BUFFERS * GENS) r_release; // buffer * GENS + generation mod GENS: 32 released, 31:16 the
                                                // generation, 15:0 the number of its slot 0
register<bit<32>>(11) r_stats;

// A buffer's timeout, in buffer order (the golden model's lowest first).
#define EXPIRE(B) \
    if (B < m.n_buffers) { \
        r_used.read(used, B); \
        r_start.read(start, B); \
        if (used == 1 && ((m.now - start) & m.tmask) >= m.timeout) { \
            r_bflow.read(bflow, B); \
            r_bepoch.read(bepoch, B); \
            r_epoch.write((bit<32>)bflow, bepoch); \
            release(B); \
            bump(3); \
        } \
    }
// The flow's buffer and the lowest free one.
#define FIND(B) \
    if (B < m.n_buffers) { \
        r_used.read(used, B); \
        r_bflow.read(bflow, B); \
        if (used == 1 && bflow == m.flow && m.hit == MAX_BUFFERS) { m.hit = B; } \
        if (used == 0 && m.free == MAX_BUFFERS) { m.free = B; } \
    }

control ReorderIngress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    bit<1> used = 0;
    bit<32> start = 0;
    bit<16> bflow = 0;
    bit<1> bepoch = 0;

    action set_config(bit<16> flow_mask, bit<32> n_buffers, bit<16> depth, bit<32> tmask, bit<32> timeout) {
        m.flow_mask = flow_mask; m.n_buffers = n_buffers; m.depth = depth; m.tmask = tmask; m.timeout = timeout;
    }
    table reorder_config { actions = { set_config; } default_action = set_config(1023, 8, 32, 65535, 1024); }

    action bump(bit<32> i) {
        bit<32> c;
        r_stats.read(c, i);
        r_stats.write(i, c + 1);
    }

    // Buffer b drains: its packets take the next numbers of its flow's order (slot 0 first); the buffer is free.
    action release(bit<32> b) {
        bit<16> f; bit<16> count; bit<16> gen; bit<16> next;
        r_bflow.read(f, b);
        r_count.read(count, b);
        r_gen.read(gen, b);
        r_next.read(next, (bit<32>)f);
        r_next.write((bit<32>)f, next + count);
        r_release.write(b * GENS + (bit<32>)gen[7:0], 1w1 ++ gen ++ next);
        r_used.write(b, 0);
    }

    // The packet takes the next number of its flow's order.
    action take_number() {
        bit<16> next;
        r_next.read(next, (bit<32>)m.flow);
        r_next.write((bit<32>)m.flow, next + 1);
        m.number = next;
        m.state = S_WAIT;
    }

    apply {
        reorder_config.apply();
        sm.egress_spec = 1;
        m.again = 0;
        if (h.tick.isValid() && h.tick.op != 0) {
            mark_to_drop(sm);                       // op 1 (the block's ctl: no tables), op 2: nothing changes
        } else if (m.state == S_NEW) {
            bump(0);
            // The item: its tick, kind, epoch and tail, and its flow.
            if (h.tick.isValid()) {
                m.now = h.tick.now & m.tmask;
                m.data = h.tick.kind == DATA ? 1w1 : 1w0;
                m.tail = h.tick.flags[1:1];
                m.epoch = h.tick.flags[2:2];
            } else {
                m.now = (bit<32>)(sm.ingress_global_timestamp >> TICK_SHIFT) & m.tmask;
                m.data = 0;
                if (h.bth.isValid() && h.bth.tver == 0 && (h.bth.opcode <= 0x0C || h.bth.opcode == 0x16 ||
                                                             h.bth.opcode == 0x17)) {
                    m.data = 1;
                    m.tail = h.bth.resv8a[0:0];
                    m.epoch = h.bth.resv8a[1:1];
                }
            }
            m.flow = 0;
            if (!h.tick.isValid() && h.bth.isValid() && h.ipv6.isValid()) {
                // An IPv6 RoCEv2 frame: the same key in full (both 128-bit addresses and the destination QP, 35
                // bytes); bmv2's crc16 takes a field list of any width, so no folding of the addresses is needed.
                hash(m.crc, HashAlgorithm.crc16, (bit<16>)0, { h.ipv6.src, h.ipv6.dst, h.bth.dqpn },
                     (bit<32>)65536);
                m.flow = m.crc & m.flow_mask;
            } else if (h.ipv4.isValid()) {
                bit<16> sport = 0;
                bit<16> dport = 0;
                if (h.ports.isValid()) { sport = h.ports.sport; dport = h.ports.dport; }
                if (!h.tick.isValid() && h.bth.isValid()) {
                    // A RoCEv2 frame as selb-tx-wire sends it: keyed by its addresses and destination QP, not its
                    // source port, which the source ToR rewrites to the path (the key survives a reroute).
                    hash(m.crc, HashAlgorithm.crc16, (bit<16>)0, { h.ipv4.src, h.ipv4.dst, h.bth.dqpn },
                         (bit<32>)65536);
                } else {
                    hash(m.crc, HashAlgorithm.crc16, (bit<16>)0,
                         { h.ipv4.src, h.ipv4.dst, h.ipv4.protocol, sport, dport }, (bit<32>)65536);
                }
                m.flow = m.crc & m.flow_mask;
            } else {
                m.data = 0;                         // not a flow: passes as an item of another kind
            }
            // 1. Timeouts, against this item's tick.
            EXPIRE(0) EXPIRE(1) EXPIRE(2) EXPIRE(3) EXPIRE(4) EXPIRE(5) EXPIRE(6) EXPIRE(7)
            EXPIRE(8) EXPIRE(9) EXPIRE(10) EXPIRE(11) EXPIRE(12) EXPIRE(13) EXPIRE(14) EXPIRE(15)
            // 2. The item.
            if (m.data == 1) {
                m.hit = MAX_BUFFERS;
                m.free = MAX_BUFFERS;
                FIND(0) FIND(1) FIND(2) FIND(3) FIND(4) FIND(5) FIND(6) FIND(7)
                FIND(8) FIND(9) FIND(10) FIND(11) FIND(12) FIND(13) FIND(14) FIND(15)
                bit<32> f = (bit<32>)m.flow;
                if (m.hit != MAX_BUFFERS) {
                    bit<32> b = m.hit;
                    r_bepoch.read(bepoch, b);
                    if (m.epoch != bepoch) {
                        take_number();              // an old-path packet, or the tail
                        if (m.tail == 1) {          // the tail: it leaves, then the buffer
                            r_epoch.write(f, bepoch);
                            release(b);
                            bump(2);
                        }
                    } else {
                        // A new-path packet joins the buffer.
                        bit<16> count;
                        r_count.read(count, b);
                        r_gen.read(m.gen, b);
                        m.buf = b;
                        m.slot = count;
                        m.held = 1;
                        m.state = S_HELD;
                        r_count.write(b, count + 1);
                        bump(1);
                        if (m.tail == 1) {          // a second reroute's tail: the buffer drains, this one last
                            r_epoch.write(f, ~bepoch);
                            release(b);
                            bump(5);
                        } else if (count + 1 == m.depth) {  // full: the buffer drains, this one last
                            r_epoch.write(f, bepoch);
                            release(b);
                            bump(4);
                        }
                    }
                } else {
                    bit<1> ep;
                    r_epoch.read(ep, f);
                    if (m.epoch == ep) {
                        r_epoch.write(f, m.epoch ^ m.tail);
                        take_number();
                    } else if (m.tail == 1) {
                        bump(7);                    // a stale tail
                        take_number();
                    } else if (m.free == MAX_BUFFERS) {
                        bump(6);                    // early, no buffer free: passes unordered
                        take_number();
                    } else {
                        // Early: the lowest free buffer opens (a new generation, its release record cleared).
                        bit<32> b = m.free;
                        bit<16> gen;
                        r_gen.read(gen, b);
                        gen = gen + 1;
                        r_gen.write(b, gen);
                        r_release.write(b * GENS + (bit<32>)gen[7:0], 0);
                        r_used.write(b, 1);
                        r_bflow.write(b, m.flow);
                        r_bepoch.write(b, m.epoch);
                        r_start.write(b, m.now);
                        r_count.write(b, 1);
                        m.buf = b; m.gen = gen; m.slot = 0; m.held = 1;
                        m.state = S_HELD;
                        bump(1);
                    }
                }
            }
        }
        // A held packet: released once its generation's record is written; its number is its slot's.
        if (m.state == S_HELD) {
            bit<33> rec;
            r_release.read(rec, m.buf * GENS + (bit<32>)m.gen[7:0]);
            bit<16> gen;
            r_gen.read(gen, m.buf);
            if (rec[32:32] == 1 && rec[31:16] == m.gen) {
                m.number = rec[15:0] + m.slot;
                m.state = S_WAIT;
            } else if (rec[31:16] != m.gen && gen != m.gen) {
                bump(10);                           // its record is gone: it leaves now, out of order
                m.state = S_NEW;
            } else {
                m.again = 1;
                bump(8);
            }
        }
        // A packet with its number: it leaves in its turn.
        if (m.state == S_WAIT) {
            bit<16> serving;
            r_serving.read(serving, (bit<32>)m.flow);
            if (serving == m.number) {
                r_serving.write((bit<32>)m.flow, serving + 1);
                m.state = S_NEW;
            } else {
                m.again = 1;
                bump(9);
            }
        }
        if (m.again == 1) {
            sm.egress_spec = HOLD_PORT;
        } else if (h.tick.isValid() && h.tick.op == 0) {
            h.tick.flow = m.flow;
            h.tick.flags[6:6] = m.held;
        }
    }
}

control ReorderEgress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        if (m.again == 1) { recirculate_preserving_field_list(1); }
    }
}

control ReorderCompute(inout headers_t h, inout meta_t m) { apply { } }

control ReorderDeparser(packet_out pk, in headers_t h) {
    apply {
        pk.emit(h.eth); pk.emit(h.tick); pk.emit(h.vlan_outer); pk.emit(h.vlan_inner); pk.emit(h.ipv4);
        pk.emit(h.ipv4_opts); pk.emit(h.ipv6); pk.emit(h.ports); pk.emit(h.udp); pk.emit(h.bth);
    }
}

V1Switch(ReorderParser(), ReorderVerify(), ReorderIngress(), ReorderEgress(), ReorderCompute(),
         ReorderDeparser()) main;
