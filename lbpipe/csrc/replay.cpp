// lbpipe fast replay engine: a Verilator C++ harness that streams a trace file through a wrapped block with no
// Python in the loop (lbpipe/fast.py builds and runs it; docs/simulation.md).
//
// Two tops, chosen at compile time:
//  * packet pipelines (boards/top.py FlatTop): frames on s_axis_* / m_axis_*, control commands over s_axil_*
//    before the first frame;
//  * metadata blocks (-DLBPIPE_META, boards/top.py AxiLiteTop, or StreamsTop for blocks with extra input streams):
//    items on in_* (and <stream>_*) / out_*, each control command written over s_axil_* after every earlier item
//    has left (the order the cocotb engine keeps); the items of a group (one clock of the cocotb engine's
//    GroupSource) are offered together, each stream holding valid until its item is taken.
//
// Files are little-endian binary (written by lbpipe/fast.py):
//  packet input:  "LBPF" u32 n_cmds, n_cmds x (u32 table, u32 index, u64 data), then frames: u32 length, bytes
//  meta input:    "LBPM" u32 n_streams, n_streams x u32 bytes (in_*, then the extra streams), then records:
//                 u8 0 + (u32 table, u32 index, u64 data) | u8 1 + u8 streams (bit k: stream k) + their bytes
//  output:        packet: u32 length, bytes per frame; meta: out_bytes per item
// Arguments: IN OUT IDLE BACKPRESSURE SEED SETTLE_CYCLES. A JSON line of measurements goes to standard output.
//
// Pauses follow the cocotb harness's pause_pattern: runs of 1 to 8 cycles, each run paused with the given
// probability (input: valid low; output: ready low). A metadata input pauses only between groups: an item offered
// keeps valid until it is taken, as the stream rule asks. The random sequence is this file's own (xorshift64*), so a
// fast run pauses on other cycles than a cocotb run with the same seed; outputs do not depend on it.

#include "Vtop.h"
#include "verilated.h"

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
        top->rst = 1;
        for (int i = 0; i < 4; ++i) tick();
        top->rst = 0;
        tick();
        for (uint32_t i = 0; i < settle_cycles; ++i) tick();
    }

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
};

#ifndef LBPIPE_META

using TData = std::remove_reference_t<decltype(Vtop::s_axis_tdata)>;
constexpr size_t BEAT = sizeof(TData);
static_assert(sizeof(std::remove_reference_t<decltype(Vtop::s_axis_tkeep)>) * 8 >= BEAT, "tkeep narrower than tdata");

//: Cycles without an output beat, after the last input beat, that end the run (as the cocotb replay: 2,000).
constexpr uint64_t QUIET_CYCLES = 2000;
//: Cycles without any input or output beat, input still waiting, that count as a stalled pipeline.
constexpr uint64_t STALL_CYCLES = 1000000;

int run(int argc, char** argv) {
    Reader in(argv[1]);
    Writer out(argv[2]);
    Pauses idle(std::atof(argv[3]), std::strtoull(argv[5], nullptr, 10) * 2 + 1);
    Pauses backpressure(std::atof(argv[4]), std::strtoull(argv[5], nullptr, 10) * 2 + 2);
    char magic[4];
    if (!in.read(magic, 4) || std::memcmp(magic, "LBPF", 4)) fail("not a packet replay file");
    Harness h;
    h.reset(static_cast<uint32_t>(std::strtoul(argv[6], nullptr, 10)));
    const uint32_t n_cmds = in.get<uint32_t>();
    for (uint32_t i = 0; i < n_cmds; ++i) {
        const uint32_t table = in.get<uint32_t>(), index = in.get<uint32_t>();
        h.command(table, index, in.get<uint64_t>());
    }
    Vtop* top = h.top.get();
    top->s_axis_tuser = 0;
    top->s_axis_tvalid = 0;

    std::vector<uint8_t> frame, got;
    size_t offset = 0;
    bool have = false, more = true;
    uint64_t frames_in = 0, frames_out = 0, beats_in = 0, beats_out = 0, quiet = 0, stalled = 0;
    auto next_frame = [&]() {
        uint32_t length;
        if (!in.read(&length, 4)) {
            more = have = false;
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
    while (have || quiet < QUIET_CYCLES) {
        const bool offer = have && !idle.next();
        const bool ready = !backpressure.next();
        top->s_axis_tvalid = offer;
        top->m_axis_tready = ready;
        h.settle();
        const bool in_fire = offer && top->s_axis_tready;
        const bool out_fire = ready && top->m_axis_tvalid;
        if (out_fire) {
            uint8_t data[BEAT];
            get_bytes(top->m_axis_tdata, data, BEAT);
            const uint64_t keep = top->m_axis_tkeep;
            for (size_t k = 0; k < BEAT; ++k)
                if (keep >> k & 1) got.push_back(data[k]);
            ++beats_out;
            if (top->m_axis_tlast) {
                const uint32_t length = static_cast<uint32_t>(got.size());
                out.write(&length, 4);
                out.write(got.data(), got.size());
                got.clear();
                ++frames_out;
            }
        }
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
        quiet = out_fire ? 0 : quiet + 1;
        stalled = (in_fire || out_fire) ? 0 : stalled + 1;
        if (have && stalled > STALL_CYCLES) fail("the pipeline stopped taking input (1,000,000 cycles)");
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_seconds = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    if (!got.empty()) fail("the last output frame has no tlast");
    std::printf("{\"cycles\": %llu, \"stream_cycles\": %llu, \"seconds\": %.6f, \"cpu_seconds\": %.6f, \"frames_in\": %llu, "
                "\"frames_out\": %llu, \"beats_in\": %llu, \"beats_out\": %llu}\n",
                (unsigned long long)h.cycles, (unsigned long long)(h.cycles - start_cycles), seconds, cpu_seconds,
                (unsigned long long)frames_in, (unsigned long long)frames_out, (unsigned long long)beats_in,
                (unsigned long long)beats_out);
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
    std::printf("{\"cycles\": %llu, \"seconds\": %.6f, \"cpu_seconds\": %.6f, \"items_in\": %llu, \"items_out\": %llu, "
                "\"extras_in\": %llu}\n",
                (unsigned long long)h.cycles, seconds, cpu_seconds, (unsigned long long)items_in,
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
