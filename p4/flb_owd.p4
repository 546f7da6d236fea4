// FLB at the destination edge switch (paper 002, section 3.1), P4_16 for v1model (bmv2 simple_switch): the
// one-way-delay measurement and its piggyback, lbpipe's `flb-owd` block (docs/flb_owd.md; golden model
// sim/flb/owd.py), packet for packet.
//
// A sampled packet from source edge E over path P carries its send stamp: owd = (now - stamp) mod 2^time_bits.
// With no base for (E, P), or (owd - base) mod 2^time_bits at or above 2^(time_bits-1) (owd below the base, a
// negative difference), the base becomes owd and the delay is 0; otherwise the delay is owd - base, saturated at
// 2^delay_bits - 1. The measurement (P, delay) replaces E's slot. A reverse packet toward edge E carries E's slot
// when it holds one and empties it. Both flags, or an edge or path out of range: rejected (ok 0), nothing written.
//
// Test harness header (`owd_tick_t`, EtherType 0x88B5, IEEE 802 local experimental, after Ethernet): the block's
// input item comes in the header (op 0: kind, tag, the flags sampled/reverse, edge, path, to_edge, stamp, now)
// and the result goes back out in it (ok, base_set, pb_valid, qdelay, pb_path, pb_delay); every frame leaves on
// port 1. Op 1 carries one lbpipe `ctl` command (table 0 FORGET `edge << 4 | path`, table 1 FORGET_ALL), applied
// in the data plane with the block's range rules, and dropped: commands land between the same packets as on the RTL.
//
// FORGET_ALL without a loop: every base and slot word holds the generation it was written in (plus one); the
// generation register counts FORGET_ALLs, and a word of another generation is empty. FORGET writes generation 0.
//
// Control plane (lbpipe/p4.py flb_owd_commands):
//   table_set_default owd_config set_config N_EDGES N_PATHS TIME_MASK DELAY_MAX   (default 16 8 65535 65535)

#include <core.p4>
#include <v1model.p4>

const bit<16> ETH_OWD_TICK = 0x88B5;
// The largest tables: 1,024 source edges (the block's largest n_edges), 16 paths each (index edge * 16 + path).
#define MAX_EDGES 1024
#define MAX_PATHS 16

header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header owd_tick_t {
    bit<8> op; bit<8> kind; bit<16> tag; bit<8> flags_in; bit<8> path;     // in: op 0 packet, 1 control command;
    bit<16> edge; bit<16> to_edge; bit<32> stamp; bit<32> now;             //     flags_in 0 sampled, 1 reverse
    bit<8> ctl_table; bit<24> ctl_index; bit<64> ctl_data;                 // in: op 1
    bit<8> flags_out; bit<8> pb_path; bit<32> qdelay; bit<32> pb_delay;    // out: flags 0 ok, 1 base_set, 2 pb_valid
    bit<16> ether_type;
}

struct headers_t { ethernet_t eth; owd_tick_t tick; }

struct meta_t {
    bit<16> n_edges; bit<8> n_paths; bit<32> tmask; bit<32> dmax;
    bit<32> gen1;                                   // the current generation plus one: the tag of a live word
    bit<1> ok; bit<1> base_set; bit<1> pb_valid; bit<8> pb_path; bit<32> qdelay; bit<32> pb_delay;
}

parser OwdParser(packet_in pk, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pk.extract(h.eth);
        transition select(h.eth.ether_type) { ETH_OWD_TICK: tick; default: accept; }
    }
    state tick { pk.extract(h.tick); transition accept; }
}

control OwdVerify(inout headers_t h, inout meta_t m) { apply { } }

control OwdIngress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    register<bit<64>>(MAX_EDGES * MAX_PATHS) r_base;    // edge * 16 + path: 63:32 generation + 1, 31:0 base
    register<bit<72>>(MAX_EDGES) r_slot;                // edge: 71:40 generation + 1, 39:32 path, 31:0 delay
    register<bit<32>>(1) r_gen;                         // FORGET_ALLs so far

    action set_config(bit<16> n_edges, bit<8> n_paths, bit<32> tmask, bit<32> dmax) {
        m.n_edges = n_edges; m.n_paths = n_paths; m.tmask = tmask; m.dmax = dmax;
    }
    table owd_config { actions = { set_config; } default_action = set_config(16, 8, 65535, 65535); }

    apply {
        owd_config.apply();
        bit<32> gen;
        r_gen.read(gen, 0);
        m.gen1 = gen + 1;
        m.ok = 1; m.base_set = 0; m.pb_valid = 0; m.pb_path = 0; m.qdelay = 0; m.pb_delay = 0;
        if (!h.tick.isValid()) {
            sm.egress_spec = 1;                         // not a harness frame: passes unchanged
        } else if (h.tick.op == 1) {
            // The block's ctl rules: FORGET of an in-range (edge, path), FORGET_ALL; anything else changes nothing.
            bit<32> edge = (bit<32>)h.tick.ctl_index[23:4];
            bit<8> path = (bit<8>)h.tick.ctl_index[3:0];
            if (h.tick.ctl_table == 0 && edge < (bit<32>)m.n_edges && path < m.n_paths) {
                r_base.write(edge * MAX_PATHS + (bit<32>)path, 0);
            } else if (h.tick.ctl_table == 1) {
                r_gen.write(0, gen + 1);
            }
            mark_to_drop(sm);
        } else {
            bit<1> sampled = h.tick.flags_in[0:0];
            bit<1> reverse = h.tick.flags_in[1:1];
            if (sampled == 1 && reverse == 1) {
                m.ok = 0;
            } else if (sampled == 1) {
                if (h.tick.edge < m.n_edges && h.tick.path < m.n_paths) {
                    bit<32> idx = (bit<32>)h.tick.edge * MAX_PATHS + (bit<32>)h.tick.path;
                    bit<32> owd = (h.tick.now - h.tick.stamp) & m.tmask;
                    bit<64> word;
                    r_base.read(word, idx);
                    bit<32> d = (owd - word[31:0]) & m.tmask;
                    bit<32> half = m.tmask & ~(m.tmask >> 1);       // 2^(time_bits - 1)
                    if (word[63:32] != m.gen1 || (d & half) != 0) {
                        r_base.write(idx, m.gen1 ++ owd);           // the first base, or the base comes down
                        m.base_set = 1;
                    } else if (d > m.dmax) {
                        m.qdelay = m.dmax;                          // saturated
                    } else {
                        m.qdelay = d;
                    }
                    r_slot.write((bit<32>)h.tick.edge, m.gen1 ++ h.tick.path ++ m.qdelay);
                } else {
                    m.ok = 0;
                }
            } else if (reverse == 1) {
                if (h.tick.to_edge < m.n_edges) {
                    bit<72> slot;
                    r_slot.read(slot, (bit<32>)h.tick.to_edge);
                    if (slot[71:40] == m.gen1) {
                        m.pb_valid = 1; m.pb_path = slot[39:32]; m.pb_delay = slot[31:0];
                        r_slot.write((bit<32>)h.tick.to_edge, 0);   // sent once: the slot empties
                    }
                } else {
                    m.ok = 0;
                }
            }
            h.tick.flags_out = 5w0 ++ m.pb_valid ++ m.base_set ++ m.ok;
            h.tick.pb_path = m.pb_path; h.tick.qdelay = m.qdelay; h.tick.pb_delay = m.pb_delay;
            sm.egress_spec = 1;
        }
    }
}

control OwdEgress(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control OwdCompute(inout headers_t h, inout meta_t m) { apply { } }

control OwdDeparser(packet_out pk, in headers_t h) {
    apply { pk.emit(h.eth); pk.emit(h.tick); }
}

V1Switch(OwdParser(), OwdVerify(), OwdIngress(), OwdEgress(), OwdCompute(), OwdDeparser()) main;
