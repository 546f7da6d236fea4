// Themis-D at the destination ToR (paper 001, sections 3.3 and 3.4), P4_16 for v1model (bmv2 simple_switch).
//
// The behaviour of lbpipe's `themis-d-wire` (sim/themis/wire.py: parser, QP classifier, Themis-D, compensator),
// frame for frame on traffic that does not overlap a NACK's scan (p4/README.md, "themis_d.p4"):
//  * a RoCEv2 data frame of a set-up QP pushes its PSN's low entry_bits bits to the QP's PSN queue (a ring in a
//    register array, its oldest entry overwritten when full) and may disarm or fire the QP's compensation;
//  * a NACK (RC ACKNOWLEDGE, syndrome 0x60) of a set-up QP scans the QP's queue for tPSN, then for ePSN or a later
//    PSN on ePSN's path: K entries per pass through the pipeline, the NACK *recirculated* between passes with its
//    scan state, the QP *busy* meanwhile: a QP's frames are served in arrival order by tickets (a per-QP ticket
//    counter and the ticket being served), and a frame whose turn has not come is recirculated behind;
//  * a blocked NACK is dropped and its frame (up to 128 bytes) kept per QP as the compensation template; a data
//    frame that fires compensation is cloned (egress to egress) and the clone rewritten into that template.
//
// Control plane (lbpipe/p4.py themis_d_inband writes it from lbpipe `ctl` commands):
//   table_set_default themis_d_config set_config N N_QPS DEPTH MASK HALF   (entry_bits as MASK = 2^b - 1,
//                                                                           HALF = 2^(b-1))
//   table_add qp_classifier set_key QPN DIR IPV6 LOCAL REMOTE => ID  (every key the classifier ever stores)
//   register_write r_key_qp ID WORD                                   (the key's lookup: bit 16 hit, the QP below)
//   register_write r_active QP 1                                      (QPs set up in Themis-D)
//   mirroring_add 1 1                                                 (the compensation clone's session: port 1)
// Commands between frames come in-band: a frame of EtherType 0x88B5 (ctl_t), applied in the data plane and
// dropped: op 1 a Themis-D set-up (table 16) or tear-down (17) of QP `index` below N_QPS, served in the QP's turn
// (after the QP's frames before it, a NACK's scan included); op 2 a classifier key's word. A deployment must
// accept this EtherType from trusted ports only (this program does not filter it).
// Frames from any port leave on port 1.

#include <core.p4>
#include <v1model.p4>

const bit<16> ETH_IPV4 = 0x0800;
const bit<16> ETH_IPV6 = 0x86DD;
const bit<16> TPID_C = 0x8100;
const bit<16> TPID_S = 0x88A8;
const bit<16> ROCE_PORT = 4791;
// The in-band control frame (p4/README.md): IEEE 802 local experimental EtherType, as flb_edge.p4's harness header.
const bit<16> ETH_CTL = 0x88B5;

// Sizes of the register arrays: QPs (flow-table entries) and PSN-queue entries per QP.
#define MAX_QPS 2048
#define MAX_DEPTH 128
// Classifier keys (qp_classifier entries) and their QP words in r_key_qp.
#define MAX_KEYS 4096
// Queue entries a NACK's scan reads per pass through the pipeline.
#define K 4
#define TEMPLATE_BYTES 128

const bit<8> V_NONE = 0;
const bit<8> V_VALID = 4;
const bit<8> V_BLOCKED = 5;
const bit<8> V_LATE = 6;
const bit<8> V_NO_TPSN = 7;

header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
// An in-band control command (EtherType 0x88B5): op 1, an lbpipe Themis-D command (table 16 set-up, 17 tear-down,
// index the QP); op 2, a classifier key's QP word (index the key's id, data bit 16 hit, bits 15..0 the QP).
header ctl_t { bit<8> op; bit<8> tbl; bit<24> index; bit<64> data; }
header vlan_t { bit<16> tci; bit<16> ether_type; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> total_len; bit<16> id;
    bit<16> flags_frag; bit<8> ttl; bit<8> protocol; bit<16> checksum; bit<32> src; bit<32> dst;
}
header ipv4_opts_t { varbit<320> opts; }
header ipv6_t {
    bit<4> version; bit<8> tclass; bit<20> flow; bit<16> payload_len; bit<8> next_hdr; bit<8> hop_limit;
    bit<128> src; bit<128> dst;
}
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> checksum; }
header bth_t {
    bit<8> opcode; bit<4> flags; bit<4> tver; bit<16> pkey; bit<8> resv8a; bit<24> dqpn;
    bit<8> ackreq_resv; bit<24> psn;
}
header aeth_t { bit<8> syndrome; bit<24> msn; }
// The compensation NACK as the clone's only header (truncated to the template's length).
header template_t { bit<1024> bytes; }

struct headers_t {
    template_t tmpl; ethernet_t eth; ctl_t ctl; vlan_t vlan0; vlan_t vlan1; ipv4_t ipv4; ipv4_opts_t ipv4_opts;
    ipv6_t ipv6;
    udp_t udp; bth_t bth; aeth_t aeth;
}

struct meta_t {
    bit<1024> raw;                       // the frame's bytes, left-aligned, for frames of at most 128 bytes
    bit<32> n_paths;
    bit<32> n_qps;
    bit<32> depth;
    bit<24> mask;
    bit<24> half;
    bit<1> hit;
    bit<16> key;
    // Kept across passes (recirculation) and into the compensation clone:
    @field_list(1) bit<16> qp;
    @field_list(1) bit<1> ticketed;      // the frame has its QP's ticket
    @field_list(1) bit<1> command;       // an in-band set-up or tear-down of QP `qp`
    @field_list(1) bit<16> ticket;
    @field_list(1) bit<1> scanning;      // a NACK in its scan (its ticket is the one served)
    @field_list(1) bit<1> again;         // recirculate this frame (set in ingress, done in egress)
    @field_list(1) bit<1> comp;          // clone this data frame into its QP's compensation NACK
    @field_list(1) bit<8> pos;           // next queue entry (from the head) the scan reads
    @field_list(1) bit<1> phase2;        // tPSN found: reading on for ePSN or a later PSN on its path
    @field_list(1) bit<8> n1;            // entries before tPSN (dequeued when the scan ends)
    @field_list(1) bit<8> passes;        // passes so far (diagnostics)
}

// Per-QP state (index: QP).
register<bit<1>>(MAX_QPS) r_valid;
register<bit<24>>(MAX_QPS) r_bepsn;
register<bit<32>>(MAX_QPS) r_bres;
register<bit<24>>(MAX_QPS) r_bmsn;
register<bit<8>>(MAX_QPS) r_head;
register<bit<8>>(MAX_QPS) r_count;
register<bit<24>>(MAX_QPS) r_hi;
register<bit<24>>(MAX_QPS) r_lo_cur;
register<bit<24>>(MAX_QPS) r_lo_prev;
register<bit<16>>(MAX_QPS) r_next;           // the QP's next ticket
register<bit<16>>(MAX_QPS) r_serving;        // the ticket whose turn it is
register<bit<1024>>(MAX_QPS) r_template;
register<bit<8>>(MAX_QPS) r_template_len;     // 0: no template
register<bit<1>>(MAX_QPS) r_active;           // set up in Themis-D (table 16), not torn down (17)
register<bit<17>>(MAX_KEYS) r_key_qp;         // a classifier key's lookup result: bit 16 hit, bits 15..0 the QP
// PSN queues (index: QP x MAX_DEPTH + slot).
register<bit<24>>(MAX_QPS * MAX_DEPTH) r_queue;
// Diagnostics: [0] NACK scans, [1] extra passes (recirculations) of NACKs, [2] recirculations of data and NACKs
// pushed behind while not their turn.
register<bit<32>>(4) r_stats;

#define RAW(L) state raw_##L { m.raw = pk.lookahead<bit<(8 * L)>>() ++ (bit<(1024 - 8 * L)>)0; transition eth; }
#define SEL(L) L: raw_##L;

parser ThemisDParser(packet_in pk, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        // A frame of at most 128 bytes is read whole first (it may be a NACK to keep as a template).
        transition select(sm.packet_length) {
            SEL(1) SEL(2) SEL(3) SEL(4) SEL(5) SEL(6) SEL(7) SEL(8) SEL(9) SEL(10)
            SEL(11) SEL(12) SEL(13) SEL(14) SEL(15) SEL(16) SEL(17) SEL(18) SEL(19) SEL(20)
            SEL(21) SEL(22) SEL(23) SEL(24) SEL(25) SEL(26) SEL(27) SEL(28) SEL(29) SEL(30)
            SEL(31) SEL(32) SEL(33) SEL(34) SEL(35) SEL(36) SEL(37) SEL(38) SEL(39) SEL(40)
            SEL(41) SEL(42) SEL(43) SEL(44) SEL(45) SEL(46) SEL(47) SEL(48) SEL(49) SEL(50)
            SEL(51) SEL(52) SEL(53) SEL(54) SEL(55) SEL(56) SEL(57) SEL(58) SEL(59) SEL(60)
            SEL(61) SEL(62) SEL(63) SEL(64) SEL(65) SEL(66) SEL(67) SEL(68) SEL(69) SEL(70)
            SEL(71) SEL(72) SEL(73) SEL(74) SEL(75) SEL(76) SEL(77) SEL(78) SEL(79) SEL(80)
            SEL(81) SEL(82) SEL(83) SEL(84) SEL(85) SEL(86) SEL(87) SEL(88) SEL(89) SEL(90)
            SEL(91) SEL(92) SEL(93) SEL(94) SEL(95) SEL(96) SEL(97) SEL(98) SEL(99) SEL(100)
            SEL(101) SEL(102) SEL(103) SEL(104) SEL(105) SEL(106) SEL(107) SEL(108) SEL(109) SEL(110)
            SEL(111) SEL(112) SEL(113) SEL(114) SEL(115) SEL(116) SEL(117) SEL(118) SEL(119) SEL(120)
            SEL(121) SEL(122) SEL(123) SEL(124) SEL(125) SEL(126) SEL(127) SEL(128)
            default: eth;
        }
    }
    RAW(1) RAW(2) RAW(3) RAW(4) RAW(5) RAW(6) RAW(7) RAW(8) RAW(9) RAW(10)
    RAW(11) RAW(12) RAW(13) RAW(14) RAW(15) RAW(16) RAW(17) RAW(18) RAW(19) RAW(20)
    RAW(21) RAW(22) RAW(23) RAW(24) RAW(25) RAW(26) RAW(27) RAW(28) RAW(29) RAW(30)
    RAW(31) RAW(32) RAW(33) RAW(34) RAW(35) RAW(36) RAW(37) RAW(38) RAW(39) RAW(40)
    RAW(41) RAW(42) RAW(43) RAW(44) RAW(45) RAW(46) RAW(47) RAW(48) RAW(49) RAW(50)
    RAW(51) RAW(52) RAW(53) RAW(54) RAW(55) RAW(56) RAW(57) RAW(58) RAW(59) RAW(60)
    RAW(61) RAW(62) RAW(63) RAW(64) RAW(65) RAW(66) RAW(67) RAW(68) RAW(69) RAW(70)
    RAW(71) RAW(72) RAW(73) RAW(74) RAW(75) RAW(76) RAW(77) RAW(78) RAW(79) RAW(80)
    RAW(81) RAW(82) RAW(83) RAW(84) RAW(85) RAW(86) RAW(87) RAW(88) RAW(89) RAW(90)
    RAW(91) RAW(92) RAW(93) RAW(94) RAW(95) RAW(96) RAW(97) RAW(98) RAW(99) RAW(100)
    RAW(101) RAW(102) RAW(103) RAW(104) RAW(105) RAW(106) RAW(107) RAW(108) RAW(109) RAW(110)
    RAW(111) RAW(112) RAW(113) RAW(114) RAW(115) RAW(116) RAW(117) RAW(118) RAW(119) RAW(120)
    RAW(121) RAW(122) RAW(123) RAW(124) RAW(125) RAW(126) RAW(127)
    state raw_128 { m.raw = pk.lookahead<bit<1024>>(); transition eth; }
    state eth {
        pk.extract(h.eth);
        transition select(h.eth.ether_type) {
            TPID_C: vlan0; TPID_S: vlan0; ETH_IPV4: ipv4; ETH_IPV6: ipv6; ETH_CTL: ctl; default: accept;
        }
    }
    state ctl {
        pk.extract(h.ctl);
        transition accept;
    }
    state vlan0 {
        pk.extract(h.vlan0);
        transition select(h.vlan0.ether_type) { TPID_C: vlan1; ETH_IPV4: ipv4; ETH_IPV6: ipv6; default: accept; }
    }
    state vlan1 {
        pk.extract(h.vlan1);
        transition select(h.vlan1.ether_type) { ETH_IPV4: ipv4; ETH_IPV6: ipv6; default: accept; }
    }
    state ipv4 {
        pk.extract(h.ipv4);
        transition select(h.ipv4.version, h.ipv4.ihl) {
            (4, 0 &&& 0xC): accept; (4, 4): accept; (4, 5): ipv4_l4; (4, _): ipv4_opts; default: accept;
        }
    }
    state ipv4_opts {
        pk.extract(h.ipv4_opts, ((bit<32>)h.ipv4.ihl - 5) * 32);
        transition ipv4_l4;
    }
    state ipv4_l4 {
        transition select(h.ipv4.flags_frag & 0x3FFF, h.ipv4.protocol) { (0, 17): udp; default: accept; }
    }
    state ipv6 {
        pk.extract(h.ipv6);
        transition select(h.ipv6.version, h.ipv6.next_hdr) { (6, 17): udp; default: accept; }
    }
    state udp {
        pk.extract(h.udp);
        transition select(h.udp.dport) { ROCE_PORT: roce_len; default: accept; }
    }
    state roce_len {
        transition select(h.udp.len) { 0 &&& 0xFFF0: accept; 16 &&& 0xFFF8: accept; default: bth; }
    }
    state bth {
        pk.extract(h.bth);
        // The AETH of an RC ACKNOWLEDGE when the UDP length holds it (24 to 27 bytes do not; under 24 never get here).
        // The rest of the frame is not parsed: it leaves as it came.
        transition select(h.bth.opcode, h.udp.len) {
            (0x11, 0x18 &&& 0xFFFC): accept; (0x11, _): aeth; default: accept;
        }
    }
    state aeth {
        pk.extract(h.aeth);
        transition accept;
    }
}

control ThemisDVerify(inout headers_t h, inout meta_t m) { apply { } }

// x mod N by restoring subtraction (24 steps for a 24-bit x); r holds x on entry, the remainder on exit.
#define MOD_STEP(k) if (r >= n << k) { r = r - (n << k); }
#define MOD_N(r) MOD_STEP(23) MOD_STEP(22) MOD_STEP(21) MOD_STEP(20) MOD_STEP(19) MOD_STEP(18) MOD_STEP(17) \
    MOD_STEP(16) MOD_STEP(15) MOD_STEP(14) MOD_STEP(13) MOD_STEP(12) MOD_STEP(11) MOD_STEP(10) MOD_STEP(9) \
    MOD_STEP(8) MOD_STEP(7) MOD_STEP(6) MOD_STEP(5) MOD_STEP(4) MOD_STEP(3) MOD_STEP(2) MOD_STEP(1) MOD_STEP(0)

// One queue entry of a NACK's scan (the golden model's phase 1 and phase 2 rules on entry `pos`).
#define SCAN_ENTRY \
    if (verdict == V_NONE && (bit<32>)m.pos < cnt) { \
        bit<32> slot = (bit<32>)head + (bit<32>)m.pos; \
        if (slot >= m.depth) { slot = slot - m.depth; } \
        bit<24> x; \
        r_queue.read(x, (bit<32>)m.qp * MAX_DEPTH + slot); \
        bit<24> d = (x - et) & m.mask; \
        bool after = d != 0 && d < m.half; \
        r = (bit<32>)(e + d); \
        MOD_N(r) \
        bool same = after && r == eres; \
        if (m.phase2 == 0) { \
            if (after) { if (same) { verdict = V_VALID; } else { m.phase2 = 1; } } else { m.n1 = m.n1 + 1; } \
        } else if (x == et) { verdict = V_LATE; } \
        else if (same) { verdict = V_VALID; } \
        m.pos = m.pos + 1; \
    }

control ThemisDIngress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    bit<1> dir = 0;
    bit<1> is6 = 0;
    bit<128> local = 0;
    bit<128> remote = 0;

    action set_config(bit<32> n_paths, bit<32> n_qps, bit<32> depth, bit<24> mask, bit<24> half) {
        m.n_paths = n_paths; m.n_qps = n_qps; m.depth = depth; m.mask = mask; m.half = half;
    }
    // N, n_qps, the queue depth and entry_bits: the block's parameters (a default action the control plane sets).
    table themis_d_config { key = { } actions = { set_config; }
                            default_action = set_config(256, 8, 40, 0x3FF, 0x200); }

    action set_key(bit<16> key) { m.hit = 1; m.key = key; }
    // The QP classifier's keys (lbpipe sim/packet/qp_classifier.py): data (dqpn, 0, ipv6, dst, 0), NACK (dqpn, 1,
    // ipv6, src, dst). Each key the classifier ever stores has an id; its lookup result (hit, QP) is the register
    // word r_key_qp[id], so that in-band commands can change it between frames. The cuckoo table's placement is
    // the FPGA's business; a lookup hits the same keys.
    table qp_classifier {
        key = { h.bth.dqpn : exact @name("qpn"); dir : exact @name("dir"); is6 : exact @name("ipv6");
                local : exact @name("local"); remote : exact @name("remote"); }
        actions = { set_key; NoAction; }
        default_action = NoAction();
        size = MAX_KEYS;
    }

    action bump(bit<32> i) {
        bit<32> c;
        r_stats.read(c, i);
        r_stats.write(i, c + 1);
    }

    apply {
        sm.egress_spec = 1;
        m.again = 0;
        themis_d_config.apply();
        // The parser's RoCEv2 rules (docs/packet_io.md): the frame holds the IP packet, the IP packet the UDP
        // datagram, the UDP length BTH, the opcode's extension headers and ICRC; TVer 0.
        bool data = false;
        bool nack = false;
        if (h.bth.isValid()) {
            bit<32> l3 = 14;
            if (h.vlan0.isValid()) { l3 = l3 + 4; }
            if (h.vlan1.isValid()) { l3 = l3 + 4; }
            bit<32> ip_payload = 0;
            bit<32> ip_end = 0;
            bool ip_ok = false;
            if (h.ipv4.isValid()) {
                bit<32> ihl_bytes = (bit<32>)h.ipv4.ihl * 4;
                ip_ok = (bit<32>)h.ipv4.total_len >= ihl_bytes + 8;
                ip_payload = (bit<32>)h.ipv4.total_len - ihl_bytes;
                ip_end = l3 + (bit<32>)h.ipv4.total_len;
            } else {
                ip_ok = h.ipv6.payload_len >= 8;
                ip_payload = (bit<32>)h.ipv6.payload_len;
                ip_end = l3 + 40 + (bit<32>)h.ipv6.payload_len;
            }
            bit<8> op = h.bth.opcode;
            bit<32> ext = 0;
            bool dop = false;
            if (op <= 0x02 || op == 0x04 || op == 0x07 || op == 0x08) { dop = true; }
            else if (op == 0x03 || op == 0x05 || op == 0x09 || op == 0x16 || op == 0x17) { dop = true; ext = 4; }
            else if (op == 0x06 || op == 0x0A || op == 0x0C) { dop = true; ext = 16; }
            else if (op == 0x0B) { dop = true; ext = 20; }
            else if (op == 0x11) { ext = 4; }
            bit<32> ulen = (bit<32>)h.udp.len;
            if (ip_ok && sm.packet_length >= ip_end && h.bth.tver == 0 && ulen <= ip_payload && ulen >= 24 + ext) {
                data = dop;
                nack = op == 0x11 && h.aeth.isValid() && h.aeth.syndrome == 0x60;
            }
        }
        // Which QP's order the frame joins (`queued`): decided on its first pass only, so that an in-band command
        // changes the frames after it, not those already in the switch.
        bool queued = m.ticketed == 1;
        if (m.ticketed == 0 && h.ctl.isValid()) {
            // An in-band command, applied in the data plane and dropped (a set-up or tear-down in its QP's turn).
            if (h.ctl.op == 2) {
                if (h.ctl.index < MAX_KEYS) { r_key_qp.write((bit<32>)h.ctl.index, h.ctl.data[16:0]); }
            } else if (h.ctl.op == 1 && (h.ctl.tbl == 16 || h.ctl.tbl == 17) &&
                       (bit<32>)h.ctl.index < m.n_qps) {
                m.qp = (bit<16>)h.ctl.index;
                m.command = 1;
                queued = true;
            }
            if (!queued) { mark_to_drop(sm); }
        } else if (m.ticketed == 0 && (data || nack)) {
            if (h.ipv6.isValid()) { is6 = 1; }
            if (data) {
                local = h.ipv6.isValid() ? h.ipv6.dst : (bit<128>)h.ipv4.dst;
            } else {
                dir = 1;
                local = h.ipv6.isValid() ? h.ipv6.src : (bit<128>)h.ipv4.src;
                remote = h.ipv6.isValid() ? h.ipv6.dst : (bit<128>)h.ipv4.dst;
            }
            qp_classifier.apply();
            if (m.hit == 1) {
                bit<17> word = 0;
                r_key_qp.read(word, (bit<32>)m.key);
                if (word[16:16] == 1 && (bit<32>)word[15:0] < m.n_qps) {
                    m.qp = word[15:0];
                    queued = true;
                }
            }
        }
        bit<32> q = (bit<32>)m.qp;
        bit<16> serving = 0;
        bit<1> active = 0;
        if (queued) {
            // The QP's frames (and its in-band commands) are served in arrival order: each takes a ticket on its
            // first pass, and a frame whose turn has not come (its QP busy with a NACK's scan or a compensation
            // clone, or frames ahead of it still waiting) is pushed behind: another pass.
            if (m.ticketed == 0) {
                bit<16> next = 0;
                r_next.read(next, q);
                r_next.write(q, next + 1);
                m.ticket = next;
                m.ticketed = 1;
            }
            r_serving.read(serving, q);
            r_active.read(active, q);
            if (m.ticket != serving) {
                m.again = 1;
                bump(2);
            } else if (m.command == 1) {
                // Set-up (table 16) or tear-down (17): an empty queue, no compensation armed, as the golden model.
                r_active.write(q, h.ctl.tbl == 16 ? (bit<1>)1 : (bit<1>)0);
                r_valid.write(q, 0); r_bepsn.write(q, 0); r_bres.write(q, 0); r_bmsn.write(q, 0);
                r_head.write(q, 0); r_count.write(q, 0);
                r_hi.write(q, 0); r_lo_cur.write(q, 0); r_lo_prev.write(q, 0);
                r_serving.write(q, serving + 1);
                mark_to_drop(sm);
            } else if (active == 0) {
                // A QP not set up in Themis-D: the frame passes, the QP's next frame is served.
                r_serving.write(q, serving + 1);
            } else if (data) {
                bit<32> n = m.n_paths;
                bit<32> r = 0;
                bit<1> valid = 0; bit<24> bepsn = 0; bit<8> head8 = 0; bit<8> count8 = 0; bit<32> bres = 0;
                bit<24> hi = 0; bit<24> lo_cur = 0; bit<24> lo_prev = 0;
                r_valid.read(valid, q); r_bepsn.read(bepsn, q); r_bres.read(bres, q);
                r_head.read(head8, q); r_count.read(count8, q);
                r_hi.read(hi, q); r_lo_cur.read(lo_cur, q); r_lo_prev.read(lo_prev, q);
                bit<32> head = (bit<32>)head8;
                bit<32> cnt = (bit<32>)count8;
                bit<24> psn = h.bth.psn;
                r = (bit<32>)psn;
                MOD_N(r)
                if (valid == 1) {
                    bit<24> d = psn - bepsn;
                    if (psn == bepsn) { valid = 0; }
                    else if (d != 0 && d < 0x800000 && r == bres) { valid = 0; m.comp = 1; }
                }
                bit<32> tail = head + cnt;
                if (tail >= m.depth) { tail = tail - m.depth; }
                // The QP's PSN bound (hi, lo_cur, lo_prev), before the push.
                if (cnt == 0) { hi = psn; lo_cur = psn; lo_prev = psn; }
                else {
                    if (psn - hi < 0x800000) { hi = psn; }
                    if (tail == 0) { lo_prev = lo_cur; lo_cur = psn; }
                    else if (psn - lo_cur >= 0x800000) { lo_cur = psn; }
                }
                r_queue.write(q * MAX_DEPTH + tail, psn & m.mask);
                if (cnt == m.depth) {
                    head = head + 1;
                    if (head == m.depth) { head = 0; }
                } else { cnt = cnt + 1; }
                // The QP's next frame is served now, or (a data frame that fires compensation) once the clone, the
                // compensation NACK, has left, so that the QP's later frames leave after it.
                if (m.comp == 0) { r_serving.write(q, serving + 1); }
                r_valid.write(q, valid);
                r_head.write(q, (bit<8>)head); r_count.write(q, (bit<8>)cnt);
                r_hi.write(q, hi); r_lo_cur.write(q, lo_cur); r_lo_prev.write(q, lo_prev);
            } else {
                // A NACK: ePSN e.
                bit<32> n = m.n_paths;
                bit<32> r = 0;
                bit<1> valid = 0; bit<24> bepsn = 0; bit<8> head8 = 0; bit<8> count8 = 0;
                bit<24> hi = 0; bit<24> lo_cur = 0; bit<24> lo_prev = 0;
                r_valid.read(valid, q); r_bepsn.read(bepsn, q);
                r_head.read(head8, q); r_count.read(count8, q);
                r_hi.read(hi, q); r_lo_cur.read(lo_cur, q); r_lo_prev.read(lo_prev, q);
                bit<32> head = (bit<32>)head8;
                bit<32> cnt = (bit<32>)count8;
                bit<24> e = h.bth.psn;
                bit<24> et = e & m.mask;
                r = (bit<32>)e;
                MOD_N(r)
                bit<32> eres = r;
                bit<8> verdict = V_NONE;
                if (m.scanning == 0) {
                    bump(0);
                    // Out of range: some PSN the queue may hold lies 2^(entry_bits-1) or more from ePSN.
                    bool far = false;
                    if (cnt != 0 && m.mask != 0xFFFFFF) {
                        bit<24> lim = 0 - m.half;
                        bit<24> d1 = hi - e; bit<24> d2 = lo_cur - e; bit<24> d3 = lo_prev - e;
                        far = !(d1 < m.half || d1 > lim) || !(d2 < m.half || d2 > lim) || !(d3 < m.half || d3 > lim);
                    }
                    if (far) {
                        verdict = V_NO_TPSN;
                        m.n1 = (bit<8>)cnt;
                    } else if (cnt == 0) {
                        verdict = V_NO_TPSN;
                        m.n1 = 0;
                    } else {
                        m.scanning = 1;
                        m.pos = 0;
                        m.phase2 = 0;
                        m.n1 = 0;
                        m.passes = 0;
                    }
                }
                if (verdict == V_NONE) {
                    SCAN_ENTRY
                    SCAN_ENTRY
                    SCAN_ENTRY
                    SCAN_ENTRY
                    if (verdict == V_NONE && (bit<32>)m.pos == cnt) {
                        if (m.phase2 == 1) { verdict = V_BLOCKED; } else { verdict = V_NO_TPSN; }
                    }
                }
                if (verdict == V_NONE) {
                    // K entries read, no decision: another pass.
                    m.passes = m.passes + 1;
                    m.again = 1;
                    bump(1);
                } else {
                    // The scan's end: dequeue the entries before tPSN, update (BePSN, Valid), keep a blocked NACK.
                    head = head + (bit<32>)m.n1;
                    if (head >= m.depth) { head = head - m.depth; }
                    r_head.write(q, (bit<8>)head);
                    r_count.write(q, (bit<8>)(cnt - (bit<32>)m.n1));
                    bit<24> db = bepsn - e;
                    if (valid == 0 || !(db != 0 && db < 0x800000)) {
                        if (verdict == V_BLOCKED) {
                            r_valid.write(q, 1); r_bepsn.write(q, e); r_bres.write(q, eres);
                            r_bmsn.write(q, h.aeth.msn);
                            r_template.write(q, m.raw);
                            r_template_len.write(q, sm.packet_length <= TEMPLATE_BYTES ? (bit<8>)sm.packet_length : 0);
                        } else {
                            r_valid.write(q, 0);
                        }
                    }
                    r_serving.write(q, serving + 1);
                    m.scanning = 0;
                    if (verdict == V_BLOCKED || verdict == V_LATE) { mark_to_drop(sm); }
                }
            }
        }
    }
}

control ThemisDEgress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        if (sm.instance_type == 2) {
            // The compensation clone: its QP's template, or nothing. The QP's next frame is served.
            bit<16> serving;
            r_serving.read(serving, (bit<32>)m.qp);
            r_serving.write((bit<32>)m.qp, serving + 1);
            bit<8> len;
            r_template_len.read(len, (bit<32>)m.qp);
            if (len == 0) {
                mark_to_drop(sm);
            } else {
                bit<1024> t;
                r_template.read(t, (bit<32>)m.qp);
                h.eth.setInvalid(); h.vlan0.setInvalid(); h.vlan1.setInvalid(); h.ipv4.setInvalid();
                h.ipv4_opts.setInvalid(); h.ipv6.setInvalid(); h.udp.setInvalid(); h.bth.setInvalid();
                h.aeth.setInvalid();
                h.tmpl.setValid();
                h.tmpl.bytes = t;
                truncate((bit<32>)len);
            }
        } else if (m.again == 1) {
            recirculate_preserving_field_list(1);
        } else if (m.comp == 1) {
            clone_preserving_field_list(CloneType.E2E, 1, 1);
        }
    }
}

control ThemisDCompute(inout headers_t h, inout meta_t m) { apply { } }

control ThemisDDeparser(packet_out pk, in headers_t h) {
    apply {
        pk.emit(h.tmpl); pk.emit(h.eth); pk.emit(h.ctl); pk.emit(h.vlan0); pk.emit(h.vlan1); pk.emit(h.ipv4);
        pk.emit(h.ipv4_opts);
        pk.emit(h.ipv6); pk.emit(h.udp); pk.emit(h.bth); pk.emit(h.aeth);
    }
}

V1Switch(ThemisDParser(), ThemisDVerify(), ThemisDIngress(), ThemisDEgress(), ThemisDCompute(),
         ThemisDDeparser()) main;
