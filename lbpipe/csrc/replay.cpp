// lbpipe fast replay engine: a Verilator C++ harness that streams a trace file through a wrapped block with no
// Python in the loop (lbpipe/fast.py builds and runs it; docs/simulation.md).
//
// Two tops, chosen at compile time:
//  * packet pipelines (boards/top.py FlatTop): frames on s_axis_* / m_axis_* (and the further AXI4-Stream outputs
//    the build's lbpipe_ports.h names), control commands over s_axil_* before the first frame, one action per frame
//    on the action stream of a block that takes them;
//  * metadata blocks (-DLBPIPE_META, boards/top.py AxiLiteTop, or StreamsTop for blocks with extra input streams):
//    items on in_* (and <stream>_*) / out_*, each control command written over s_axil_* after every earlier item
//    has left (the order the cocotb engine keeps); the items of a group (one clock of the cocotb engine's
//    GroupSource) are offered together, each stream holding valid until its item is taken.
//
// Files are little-endian binary (written by lbpipe/fast.py):
//  packet input:  "LBPF" u32 n_held, n_held x u64 (the held inputs' values), u32 n_cmds, n_cmds x (u32 table,
//                 u32 index, u64 data), u32 action bytes, u32 n_actions, the actions, then frames: u32 length, bytes
//  meta input:    "LBPM" u32 n_streams, n_streams x u32 bytes (in_*, then the extra streams), then records:
//                 u8 0 + (u32 table, u32 index, u64 data) | u8 1 + u8 streams (bit k: stream k) + their bytes
//  output:        packet: u8 stream (0 m_axis, then LBPIPE_AXIS_OUT's order), u32 length, bytes per frame;
//                 meta: out_bytes per item
// Arguments: IN OUT IDLE BACKPRESSURE SEED SETTLE_CYCLES. A JSON line of measurements goes to standard output.
//
// Pauses follow the cocotb harness's pause_pattern: runs of 1 to 8 cycles, each run paused with the given
// probability (input: valid low; output: ready low). A metadata input pauses only between groups: an item offered
// keeps valid until it is taken, as the stream rule asks. The random sequence is this file's own (xorshift64*), so a
// fast run pauses on other cycles than a cocotb run with the same seed; outputs do not depend on it.

#include "Vtop.h"
#include "verilated.h"

#ifndef LBPIPE_META
#include "lbpipe_ports.h"   // the packet top's further ports (below, before the packet harness)
#else
#define LBPIPE_AXIL 1       // every metadata top has the control bridge
#define LBPIPE_RST 1        // and a reset input
#endif
#ifndef LBPIPE_RESET_CYCLES
#define LBPIPE_RESET_CYCLES 4
#endif

#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

namespace {

// Copy bytes into / out of a port of any width: Verilator holds up to 64 bits in an integer, wider ports in a
// VlWide of 32-bit words; both are stored least significant byte first on the little-endian hosts we build on.
template <typename T>
void put_bytes(T& port, const uint8_t* src, size_t n) {
    T value = 0;
    std::memcpy(&value, src, n < sizeof(T) ? n : sizeof(T));
    port = value;
}
template <std::size_t N>
void put_bytes(VlWide<N>& port, const uint8_t* src, size_t n) {
    std::memset(port.data(), 0, N * sizeof(EData));
    std::memcpy(port.data(), src, n < N * sizeof(EData) ? n : N * sizeof(EData));
}
template <typename T>
void get_bytes(const T& port, uint8_t* dst, size_t n) {
    T value = port;
    std::memcpy(dst, &value, n < sizeof(T) ? n : sizeof(T));
}
template <std::size_t N>
void get_bytes(const VlWide<N>& port, uint8_t* dst, size_t n) {
    std::memcpy(dst, port.data(), n < N * sizeof(EData) ? n : N * sizeof(EData));
}

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "lbpipe-fast: %s\n", what);
    std::exit(2);
}

struct Pauses {
    double p;
    uint64_t state;
    int left = 0;
    bool paused = false;
    Pauses(double p_, uint64_t seed) : p(p_), state(seed * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL) {
        if (!state) state = 1;
    }
    uint64_t next_u64() {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        return state * 0x2545F4914F6CDD1DULL;
    }
    bool next() {
        if (p <= 0.0) return false;
        if (!left) {
            paused = (next_u64() >> 11) * (1.0 / 9007199254740992.0) < p;
            left = 1 + static_cast<int>(next_u64() % 8);
        }
        --left;
        return paused;
    }
};

// A file opened with a 1 MiB buffer of its own (one reader and one writer per run).
template <int Which> FILE* open_buffered(const char* path, const char* mode, const char* failure) {
    FILE* f = std::fopen(path, mode);
    if (!f) fail(failure);
    static char buffer[1 << 20];
    std::setvbuf(f, buffer, _IOFBF, sizeof buffer);
    return f;
}

struct Reader {
    FILE* f;
    explicit Reader(const char* path) : f(open_buffered<0>(path, "rb", "cannot open the input file")) {}
    bool read(void* dst, size_t n) { return n == 0 || std::fread(dst, 1, n, f) == n; }
    template <typename T> T get() {
        T v;
        if (!read(&v, sizeof v)) fail("the input file is cut");
        return v;
    }
};

struct Writer {
    FILE* f;
    explicit Writer(const char* path) : f(open_buffered<1>(path, "wb", "cannot open the output file")) {}
    void write(const void* src, size_t n) {
        if (n && std::fwrite(src, 1, n, f) != n) fail("cannot write the output file");
    }
    ~Writer() { std::fclose(f); }
};

struct Harness {
    std::unique_ptr<VerilatedContext> context{new VerilatedContext};
    std::unique_ptr<Vtop> top{new Vtop{context.get()}};
    uint64_t cycles = 0;

    // Inputs are set while the clock is low; the falling-edge evaluation settles the combinational outputs for
    // them (sample() reads handshakes there) and the rising edge commits the transfers.
    void settle() {
        top->clk = 0;
        top->eval();
    }
    void rise() {
        top->clk = 1;
        top->eval();
        ++cycles;
    }
    void tick() {
        settle();
        rise();
    }

    void reset(uint32_t settle_cycles) {
#if LBPIPE_RST
        top->rst = 1;
        for (int i = 0; i < 4; ++i) tick();
        top->rst = 0;
#else
        // the top's own power-on reset (boards/top.py PowerOnReset, as many clocks as lbpipe/fast.py built it with)
        for (int i = 0; i < LBPIPE_RESET_CYCLES; ++i) tick();
#endif
        tick();
        for (uint32_t i = 0; i < settle_cycles; ++i) tick();
    }

#if LBPIPE_AXIL
    void axil_write(uint32_t addr, uint32_t data) {
        top->s_axil_awaddr = addr;
        top->s_axil_awprot = 0;
        top->s_axil_awvalid = 1;
        top->s_axil_wdata = data;
        top->s_axil_wstrb = 0xF;
        top->s_axil_wvalid = 1;
        top->s_axil_bready = 1;
        for (uint64_t guard = 0;; ++guard) {
            if (guard > 100000000ULL) fail("an AXI4-Lite write never completed");
            settle();
            const bool aw = top->s_axil_awvalid && top->s_axil_awready;
            const bool w = top->s_axil_wvalid && top->s_axil_wready;
            const bool b = top->s_axil_bvalid;
            rise();
            if (aw) top->s_axil_awvalid = 0;
            if (w) top->s_axil_wvalid = 0;
            if (b) {
                top->s_axil_bready = 0;
                return;
            }
        }
    }

    // hdl/lib/axil.py ControlBridge: TABLE, INDEX, DATA_LO, DATA_HI, then COMMIT, whose response waits until the
    // block has accepted the command.
    void command(uint32_t table, uint32_t index, uint64_t data) {
        axil_write(0x08, table);
        axil_write(0x0C, index);
        axil_write(0x10, static_cast<uint32_t>(data));
        axil_write(0x14, static_cast<uint32_t>(data >> 32));
        axil_write(0x18, 1);
    }
#endif
};

#ifndef LBPIPE_META

// The packet top's ports beside s_axis and m_axis, written by lbpipe/fast.py into the build directory:
//   LBPIPE_AXIS_OUT(X)  X(m_ack) ...   more AXI4-Stream outputs: file streams 1, 2, ... (m_axis is stream 0)
//   LBPIPE_SINKS(X)     X(upd) ...     metadata outputs: always ready, their items counted and dropped
//   LBPIPE_IDLE_IN(X)   X(tmo) ...     metadata inputs: never valid
//   LBPIPE_HELD(X)      X(now) ...     plain inputs: held at the file's values, in this order
//   LBPIPE_ACT(f)       act_##f        (only if defined) the per-frame action stream's port f: one action per frame
//   LBPIPE_AXIL         1 or 0         the AXI4-Lite control bridge is there (commands) or not

using TData = std::remove_reference_t<decltype(Vtop::s_axis_tdata)>;
constexpr size_t BEAT = sizeof(TData);
static_assert(sizeof(std::remove_reference_t<decltype(Vtop::s_axis_tkeep)>) * 8 >= BEAT, "tkeep narrower than tdata");

//: Cycles without an output beat, after the last input beat, that end the run (as the cocotb replay: 2,000).
constexpr uint64_t QUIET_CYCLES = 2000;
//: Cycles without any input or output beat, input still waiting, that count as a stalled pipeline.
constexpr uint64_t STALL_CYCLES = 1000000;

// One AXI4-Stream output: its handshake, its beat's bytes and its own back-pressure; a frame is gathered in `got`
// and written as (u8 stream, u32 length, bytes) once its tlast beat is taken.
struct AxisOut {
    CData* valid;
    CData* ready;
    CData* last;
    void (*data)(Vtop*, uint8_t*);
    uint64_t (*keep)(Vtop*);
    std::vector<uint8_t> got{};
};
#define LBPIPE_AXIS(name)                                                                  \
    static_assert(sizeof(top->name##_tdata) == BEAT, #name " is not as wide as s_axis");   \
    outs.push_back(AxisOut{&top->name##_tvalid, &top->name##_tready, &top->name##_tlast,   \
                           [](Vtop* t, uint8_t* d) { get_bytes(t->name##_tdata, d, BEAT); }, \
                           [](Vtop* t) -> uint64_t { return static_cast<uint64_t>(t->name##_tkeep); }});
#define LBPIPE_SINK(name) std::pair<CData*, CData*>{&top->name##_valid, &top->name##_ready},
#define LBPIPE_IDLE(name) top->name##_valid = 0;
#define LBPIPE_COUNT(name) +1
#define LBPIPE_HOLD(name)                                                           \
    {                                                                               \
        const uint64_t value = in.get<uint64_t>();                                  \
        put_bytes(top->name, reinterpret_cast<const uint8_t*>(&value), sizeof value); \
    }

int run(int argc, char** argv) {
    Reader in(argv[1]);
    Writer out(argv[2]);
    const uint64_t seed = std::strtoull(argv[5], nullptr, 10);
    Pauses idle(std::atof(argv[3]), seed * 2 + 1);
    char magic[4];
    if (!in.read(magic, 4) || std::memcmp(magic, "LBPF", 4)) fail("not a packet replay file");
    Harness h;
    Vtop* top = h.top.get();
    std::vector<AxisOut> outs;
    LBPIPE_AXIS(m_axis)
    LBPIPE_AXIS_OUT(LBPIPE_AXIS)
    // Stream 0 keeps the seed's second sequence; each further output pauses on a sequence of its own.
    std::vector<Pauses> backpressure;
    for (size_t k = 0; k < outs.size(); ++k) backpressure.emplace_back(std::atof(argv[4]), seed * 2 + 2 + 1000 * k);
    const std::vector<std::pair<CData*, CData*>> sinks{LBPIPE_SINKS(LBPIPE_SINK)};
    if (in.get<uint32_t>() != 0 LBPIPE_HELD(LBPIPE_COUNT)) fail("another number of held inputs than the block's");
    LBPIPE_HELD(LBPIPE_HOLD)
    LBPIPE_IDLE_IN(LBPIPE_IDLE)
    h.reset(static_cast<uint32_t>(std::strtoul(argv[6], nullptr, 10)));
    const uint32_t n_cmds = in.get<uint32_t>();
    for (uint32_t i = 0; i < n_cmds; ++i) {
        const uint32_t table = in.get<uint32_t>(), index = in.get<uint32_t>();
        const uint64_t data = in.get<uint64_t>();
#if LBPIPE_AXIL
        h.command(table, index, data);
#else
        (void)table, (void)index, (void)data;
        fail("this block takes no control commands");
#endif
    }
    // Actions (one per frame, offered as fast as the block takes them, ahead of the frames if it wants).
    const uint32_t act_bytes = in.get<uint32_t>(), n_acts = in.get<uint32_t>();
    std::vector<uint8_t> acts(static_cast<size_t>(act_bytes) * n_acts);
    if (!in.read(acts.data(), acts.size())) fail("the actions of the input file are cut");
    uint64_t acts_taken = 0;
#ifdef LBPIPE_ACT
    if (act_bytes != sizeof(top->LBPIPE_ACT(payload)) && n_acts) fail("actions of another width than the block's");
    auto load_act = [&]() {
        if (acts_taken < n_acts) put_bytes(top->LBPIPE_ACT(payload), &acts[acts_taken * act_bytes], act_bytes);
    };
    load_act();
#else
    if (n_acts) fail("this block takes no actions");
#endif
    top->s_axis_tuser = 0;
    top->s_axis_tvalid = 0;

    std::vector<uint8_t> frame;
    size_t offset = 0;
    bool have = false;
    uint64_t frames_in = 0, frames_out = 0, beats_in = 0, beats_out = 0, sink_items = 0, quiet = 0, stalled = 0;
    auto next_frame = [&]() {
        uint32_t length;
        if (!in.read(&length, 4)) {
            have = false;
            return;
        }
        frame.resize(length);
        if (!in.read(frame.data(), length)) fail("a frame of the input file is cut");
        offset = 0;
        have = true;
    };
    uint8_t beat[BEAT];
    auto load_beat = [&]() {
        const size_t n = frame.size() - offset < BEAT ? frame.size() - offset : BEAT;
        std::memset(beat, 0, BEAT);
        std::memcpy(beat, frame.data() + offset, n);
        put_bytes(top->s_axis_tdata, beat, BEAT);
        top->s_axis_tkeep = n >= 64 ? ~0ULL : ((1ULL << n) - 1);
        top->s_axis_tlast = offset + n >= frame.size();
    };
    next_frame();
    if (have) load_beat();
    const uint64_t start_cycles = h.cycles;
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    std::vector<char> ready(outs.size());
    while (have || quiet < QUIET_CYCLES) {
        const bool offer = have && !idle.next();
        top->s_axis_tvalid = offer;
        for (size_t k = 0; k < outs.size(); ++k) *outs[k].ready = ready[k] = !backpressure[k].next();
        for (const auto& sink : sinks) *sink.second = 1;
#ifdef LBPIPE_ACT
        top->LBPIPE_ACT(valid) = acts_taken < n_acts;
#endif
        h.settle();
        const bool in_fire = offer && top->s_axis_tready;
        bool out_fire = false;
        for (size_t k = 0; k < outs.size(); ++k) {
            AxisOut& o = outs[k];
            if (!(ready[k] && *o.valid)) continue;
            out_fire = true;
            uint8_t data[BEAT];
            o.data(top, data);
            const uint64_t keep = o.keep(top);
            for (size_t b = 0; b < BEAT; ++b)
                if (keep >> b & 1) o.got.push_back(data[b]);
            ++beats_out;
            if (*o.last) {
                const uint8_t stream = static_cast<uint8_t>(k);
                const uint32_t length = static_cast<uint32_t>(o.got.size());
                out.write(&stream, 1);
                out.write(&length, 4);
                out.write(o.got.data(), o.got.size());
                o.got.clear();
                ++frames_out;
            }
        }
        for (const auto& sink : sinks) sink_items += *sink.first;
#ifdef LBPIPE_ACT
        const bool act_fire = acts_taken < n_acts && top->LBPIPE_ACT(ready);
#else
        const bool act_fire = false;
#endif
        h.rise();
        if (in_fire) {
            ++beats_in;
            offset += BEAT;
            if (offset >= frame.size()) {
                ++frames_in;
                next_frame();
            }
            if (have) load_beat();
        }
        if (act_fire) {
            ++acts_taken;
#ifdef LBPIPE_ACT
            load_act();
#endif
        }
        quiet = out_fire ? 0 : quiet + 1;
        stalled = (in_fire || out_fire) ? 0 : stalled + 1;
        if (have && stalled > STALL_CYCLES) fail("the pipeline stopped taking input (1,000,000 cycles)");
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_seconds = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    for (const AxisOut& o : outs)
        if (!o.got.empty()) fail("the last output frame has no tlast");
    std::printf("{\"cycles\": %llu, \"stream_cycles\": %llu, \"seconds\": %.6f, \"cpu_seconds\": %.6f, "
                "\"frames_in\": %llu, \"frames_out\": %llu, \"beats_in\": %llu, \"beats_out\": %llu, "
                "\"sink_items\": %llu, \"actions_in\": %llu}\n",
                (unsigned long long)h.cycles, (unsigned long long)(h.cycles - start_cycles), seconds, cpu_seconds,
                (unsigned long long)frames_in, (unsigned long long)frames_out, (unsigned long long)beats_in,
                (unsigned long long)beats_out, (unsigned long long)sink_items, (unsigned long long)acts_taken);
    (void)argc;
    return 0;
}

#else  // LBPIPE_META

// The block's extra input streams (boards/top.py StreamsTop: <name>_valid, <name>_ready, <name>_payload), written
// by lbpipe/fast.py into the build directory as "#define LBPIPE_STREAMS(X) X(upd)" (empty for one input stream).
#include "lbpipe_streams.h"

// One input stream of the top: its handshake and a setter of its payload from the file's bytes.
struct Port {
    CData* valid;
    CData* ready;
    void (*put)(Vtop*, const uint8_t*);
    size_t bytes;
};
#define LBPIPE_PORT(name)                                                                                   \
    Port{&top->name##_valid, &top->name##_ready,                                                            \
         [](Vtop* t, const uint8_t* src) { put_bytes(t->name##_payload, src, sizeof(t->name##_payload)); }, \
         sizeof(top->name##_payload)},

using Result = std::remove_reference_t<decltype(Vtop::out_payload)>;

int run(int argc, char** argv) {
    Reader in(argv[1]);
    Writer out(argv[2]);
    Pauses idle(std::atof(argv[3]), std::strtoull(argv[5], nullptr, 10) * 2 + 1);
    Pauses backpressure(std::atof(argv[4]), std::strtoull(argv[5], nullptr, 10) * 2 + 2);
    char magic[4];
    if (!in.read(magic, 4) || std::memcmp(magic, "LBPM", 4)) fail("not a metadata replay file");
    Harness h;
    Vtop* top = h.top.get();
    // Port 0 is the item stream (in_*), then the extra streams in the order of the block's registry entry.
    const std::vector<Port> ports{LBPIPE_PORT(in) LBPIPE_STREAMS(LBPIPE_PORT)};
    if (in.get<uint32_t>() != ports.size()) fail("another number of input streams than the block's");
    for (const Port& port : ports)
        if (in.get<uint32_t>() != port.bytes) fail("items of another width than the block's input stream");
    std::vector<std::vector<uint8_t>> words;
    for (const Port& port : ports) words.emplace_back(port.bytes, 0);
    const size_t out_bytes = sizeof(Result);
    h.reset(static_cast<uint32_t>(std::strtoul(argv[6], nullptr, 10)));
    for (const Port& port : ports) *port.valid = 0;
    std::vector<uint8_t> result(sizeof(Result), 0);
    uint64_t items_in = 0, items_out = 0, extras_in = 0, stalled = 0;
    // A group (lbpipe.tb.lib.harness.trace_groups: at most one item per stream, offered in the same clock) is
    // loaded (`group`, its streams' bits) by next(), offered (`pending`) after any idle cycles, and each stream
    // drops valid once its item is taken; the next group waits until the whole group is taken.
    uint32_t group = 0, pending = 0;
    bool more = true, pending_cmd = false;
    uint32_t table = 0, index = 0;
    uint64_t data = 0;
    auto next = [&]() {
        uint8_t kind;
        if (!in.read(&kind, 1)) {
            more = false;
            return;
        }
        if (kind == 0) {
            table = in.get<uint32_t>();
            index = in.get<uint32_t>();
            data = in.get<uint64_t>();
            pending_cmd = true;
        } else if (kind == 1) {
            group = in.get<uint8_t>();
            if (!group || group >> ports.size()) fail("a group of the input file names no stream or an unknown one");
            for (size_t k = 0; k < ports.size(); ++k)
                if (group >> k & 1) {
                    if (!in.read(words[k].data(), ports[k].bytes)) fail("an item of the input file is cut");
                    ports[k].put(top, words[k].data());
                }
        } else {
            fail("an unknown record in the input file");
        }
    };
    next();
    const uint64_t start_cycles = h.cycles;
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    while (more || group || pending || pending_cmd || items_out < items_in) {
        if (pending_cmd && items_out == items_in) {
            h.command(table, index, data);
            pending_cmd = false;
            next();
            continue;
        }
        if (group && !pending && !idle.next()) {
            pending = group;
            group = 0;
        }
        for (size_t k = 0; k < ports.size(); ++k) *ports[k].valid = pending >> k & 1;
        const bool ready = !backpressure.next();
        top->out_ready = ready;
        h.settle();
        uint32_t taken = 0;
        for (size_t k = 0; k < ports.size(); ++k)
            if ((pending >> k & 1) && *ports[k].ready) taken |= 1u << k;
        const bool out_fire = ready && top->out_valid;
        if (out_fire) {
            get_bytes(top->out_payload, result.data(), result.size());
            out.write(result.data(), out_bytes);
            ++items_out;
        }
        h.rise();
        if (taken) {
            if ((taken & 1) && (pending & ~taken)) fail("the block took an item before the extra streams of its group");
            items_in += taken & 1;
            for (size_t k = 1; k < ports.size(); ++k) extras_in += taken >> k & 1;
            pending &= ~taken;
            if (!pending) next();
        }
        stalled = (taken || out_fire) ? 0 : stalled + 1;
        if (stalled > 1000000) fail("the block stopped moving items (1,000,000 cycles)");
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_seconds = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    std::printf("{\"cycles\": %llu, \"stream_cycles\": %llu, \"seconds\": %.6f, \"cpu_seconds\": %.6f, "
                "\"items_in\": %llu, \"items_out\": %llu, \"extras_in\": %llu}\n",
                (unsigned long long)h.cycles, (unsigned long long)(h.cycles - start_cycles), seconds, cpu_seconds,
                (unsigned long long)items_in,
                (unsigned long long)items_out, (unsigned long long)extras_in);
    (void)argc;
    return 0;
}

#endif

}  // namespace

int main(int argc, char** argv) {
    if (argc != 7) {
        std::fprintf(stderr, "usage: %s IN OUT IDLE BACKPRESSURE SEED SETTLE_CYCLES\n", argv[0]);
        return 2;
    }
    return run(argc, argv);
}
