// scheduler.cpp: the execution engine of the CPU emulator of CUDA (header: emu.h). KLAUNCH calls
// launch_grid(); blocks are spread over a small pool of OS threads (the caller included), one block
// stays on one OS thread for its whole life; the threads of a block are fibers on their own stacks
// (hand-written x86-64 context switch), switched only at __syncthreads and warp collectives.
//
// How a block runs: the scheduler makes passes over the block's threads in the chosen order
// (forward, reverse or random) and runs each runnable thread until it blocks on a barrier or exits.
// A thread that never blocks gives its stack back at exit, so a barrier-free kernel runs all its
// threads back to back on one stack. A pass that can run nothing while threads are still waiting
// is a deadlock: the launch fails with a message that names kernel, block and where each thread
// waits. Barrier semantics follow PTX: exited threads do not hold up bar.sync; warp collectives
// wait for the non-exited lanes named in their mask; every thread of a block must reach the SAME
// __syncthreads (different call sites = divergent barrier = launch failure).
#include "emu.h"
#include "internal.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <map>
#include <link.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>  // fiber stacks are registered, so kernels can run under memcheck
#else
#define VALGRIND_STACK_REGISTER(start, end) 0u
#define VALGRIND_STACK_DEREGISTER(id) ((void)0)
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdarg.h>
#include <stdlib.h>
#include <thread>
#include <vector>

// ---- user-level context switch ----------------------------------------------------------------
// beagle_emu_switch(save, load): push the callee-saved registers, store rsp in *save, switch to the
// stack `load` and pop the registers saved there. A new fiber's stack is prepared so that the first
// switch "returns" into beagle_emu_fiber_start, which calls fn(arg) from r13/r12.
extern "C" void beagle_emu_switch(void** save_sp, void* load_sp);
extern "C" void beagle_emu_fiber_start();
asm(R"(
    .pushsection .text
    .globl beagle_emu_switch
    .type beagle_emu_switch, @function
beagle_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size beagle_emu_switch, .-beagle_emu_switch

    .globl beagle_emu_fiber_start
    .type beagle_emu_fiber_start, @function
beagle_emu_fiber_start:
    .cfi_startproc
    .cfi_undefined rip
    movq %r12, %rdi
    callq *%r13
    ud2
    .cfi_endproc
    .size beagle_emu_fiber_start, .-beagle_emu_fiber_start
    .popsection
)");

// Marks the start of this thread's static TLS block (see smem_symbols below).
extern "C" {
thread_local char beagle_emu_tls_marker = 1;
}

namespace beagle_emu {

static std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
static std::string fmt(const char* f, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

// ---- configuration (environment first, then the set_* calls) ----------------------------------
struct Config {
    std::atomic<int> schedule{0};
    std::atomic<uint64_t> seed{1};
    std::atomic<uint64_t> epoch{0};  // launch count at the last set_schedule()
    std::atomic<bool> poison{false}, abort_on_error{false}, quiet{false}, check_pointers{true};
    std::atomic<int> threads{1};
    size_t stack_bytes = 256 * 1024;
    Config() {
        unsigned hw = std::thread::hardware_concurrency();
        threads = hw ? (int)hw : 1;
        if (const char* s = getenv("BEAGLE_EMU_THREADS")) threads = atoi(s) > 0 ? atoi(s) : 1;
        if (const char* s = getenv("BEAGLE_EMU_SCHEDULE")) {
            if (!strncmp(s, "reverse", 7)) schedule = (int)Schedule::Reverse;
            if (!strncmp(s, "random", 6)) schedule = (int)Schedule::Random;
            if (const char* c = strchr(s, ':')) seed = strtoull(c + 1, nullptr, 10);
        }
        if (const char* s = getenv("BEAGLE_EMU_SEED")) seed = strtoull(s, nullptr, 10);
        if (const char* s = getenv("BEAGLE_EMU_POISON")) poison = atoi(s) != 0;
        if (const char* s = getenv("BEAGLE_EMU_ABORT")) abort_on_error = atoi(s) != 0;
        if (const char* s = getenv("BEAGLE_EMU_QUIET")) quiet = atoi(s) != 0;
        if (const char* s = getenv("BEAGLE_EMU_CHECK_POINTERS")) check_pointers = atoi(s) != 0;
        if (const char* s = getenv("BEAGLE_EMU_STACK_KB")) {
            long kb = atol(s);
            if (kb >= 16) stack_bytes = (size_t)kb * 1024;
        }
    }
};
static Config& config() {
    static Config* c = new Config();  // never destroyed: worker threads may outlive static dtors
    return *c;
}

static std::atomic<uint64_t> g_launches{0};
// Random order of a block = f(seed, launches since set_schedule, block index): reproducible.
void set_schedule(Schedule s, uint64_t seed) {
    config().schedule = (int)s;
    config().seed = seed;
    config().epoch = g_launches.load();
}
Schedule get_schedule() { return (Schedule)config().schedule.load(); }
void set_poison(bool on) { config().poison = on; }
bool poison_enabled() { return config().poison; }
void set_threads(int n) { config().threads = n > 0 ? n : 1; }
int get_threads() { return config().threads; }
void set_abort_on_error(bool on) { config().abort_on_error = on; }
void set_quiet(bool on) { config().quiet = on; }
void set_check_pointers(bool on) { config().check_pointers = on; }
bool check_pointers_enabled() { return config().check_pointers; }

static std::mutex g_detail_mu;
static std::string g_detail;
std::string last_error_detail() {
    std::lock_guard<std::mutex> lk(g_detail_mu);
    return g_detail;
}
void clear_error_detail() {
    std::lock_guard<std::mutex> lk(g_detail_mu);
    g_detail.clear();
}
uint64_t launch_count() { return g_launches; }

// ---- one launch --------------------------------------------------------------------------------
struct Job {
    const char* name;
    const void* func;
    dim3 grid, block;
    size_t smem;
    Thunk thunk;
    void* ctx;
    uint64_t nblocks, launch_id;
    Schedule schedule;
    uint64_t seed;
    bool poison;
    bool measure_static;        // block 0 measures the static __shared__ bytes the kernel writes
    size_t static_smem = 0;     // ... the result
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    // The failure of the lowest-numbered block that failed. Blocks are claimed in increasing
    // order and a claimed block always runs to its end, so every block below a failed one runs:
    // the message is the same whatever the number of OS threads.
    std::string error;
    uint64_t error_block = UINT64_MAX;
};

enum ThreadState : uint8_t { kNotStarted, kReady, kAtBarrier, kAtWarp, kDone, kFailed };

struct EmuThread {
    uint3 tid;
    uint8_t state;
    void* sp;       // saved stack pointer while switched out
    char* stack;    // top of its stack, nullptr when it has none
    WarpOp* op;     // pending warp collective (kAtWarp)
    Site bsite;     // pending __syncthreads (kAtBarrier)
    int bpred, bmode, bresult;
};

// Everything one OS thread needs to run blocks; the fibers of the running block live here.
struct Worker {
    std::vector<EmuThread> threads;
    std::vector<int> order;
    std::vector<char*> free_stacks;
    void* sched_sp = nullptr;
    unsigned char* dyn = nullptr;
    size_t dyn_cap = 0;
    char* tls_base = nullptr;
    void* altstack = nullptr;  // alternate signal stack (see install_overflow_handler)
    std::vector<unsigned> valgrind_ids;  // fiber stacks registered with valgrind
    // the running block
    Job* job = nullptr;
    uint3 bid{};
    int n = 0, nwarps = 0, nlive = 0, narrived = 0, ndone = 0;
    int cur = -1;  // running thread (linear index), -1 in the scheduler
    int pos = 0;   // position of the pass in `order`
    unsigned live[32] = {};     // lanes of each warp that exist and have not exited
    unsigned waiting[32] = {};  // lanes of each warp waiting in a warp collective (a bit per lane)
    bool failed = false;
    uint64_t rng = 0;
    Worker() : threads(kMaxThreadsPerBlock), order(kMaxThreadsPerBlock) {}
};
static thread_local Worker* t_worker = nullptr;
static void free_worker(Worker* w);
// Owns the Worker of an OS thread and releases it (stacks, buffers) when the thread exits.
struct WorkerOwner {
    ~WorkerOwner() {
        if (t_worker) free_worker(t_worker);
        t_worker = nullptr;
    }
};
static thread_local WorkerOwner t_worker_owner;
static Worker& this_worker() {
    if (!t_worker) {
        t_worker = new Worker();
        (void)&t_worker_owner;  // odr-use: constructs the owner, so its destructor runs at thread exit
    }
    return *t_worker;
}

// Guard regions below the fiber stacks, for the SIGSEGV handler (append-only, read in the handler).
// 64 KiB, so that a kernel frame with a few KiB of local arrays cannot step over it.
constexpr size_t kGuardBytes = 64 * 1024;
static char* g_guards[1 << 16];
static std::atomic<int> g_nguards{0};
static struct sigaction g_old_segv;

// A fault in a guard page is a fiber stack overflow: say so, then let the old handler (or the
// default action) deal with the signal. Runs on the alternate signal stack of the worker.
static void segv_handler(int sig, siginfo_t* info, void* ctx) {
    const char* addr = (const char*)info->si_addr;
    const int n = std::min(g_nguards.load(), (int)(sizeof g_guards / sizeof g_guards[0]));
    for (int i = 0; i < n; i++)
        if (g_guards[i] && addr >= g_guards[i] && addr < g_guards[i] + kGuardBytes) {
            static const char msg[] = "beagle-emu: a CUDA thread overflowed its fiber stack (large local arrays or deep "
                                      "recursion in a kernel?); raise BEAGLE_EMU_STACK_KB (default 256)\n";
            if (write(2, msg, sizeof msg - 1) < 0) {}
            break;
        }
    sigaction(SIGSEGV, &g_old_segv, nullptr);
    if (g_old_segv.sa_flags & SA_SIGINFO) {
        if (g_old_segv.sa_sigaction) g_old_segv.sa_sigaction(sig, info, ctx);
    } else if (g_old_segv.sa_handler != SIG_DFL && g_old_segv.sa_handler != SIG_IGN) {
        g_old_segv.sa_handler(sig);
    }
    // Returning re-executes the faulting access with the restored handler (default: core dump).
}

// Each OS thread that runs fibers gets an alternate signal stack, so the handler can run when a
// fiber stack is exhausted. The handler is installed once, unless the program already has one.
static void install_overflow_handler(Worker& w) {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction cur;
        if (sigaction(SIGSEGV, nullptr, &cur) != 0 || (cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) return;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = segv_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &g_old_segv);
    });
    stack_t old;
    if (w.altstack || (sigaltstack(nullptr, &old) == 0 && !(old.ss_flags & SS_DISABLE))) return;
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_size = 64 * 1024;
    ss.ss_sp = malloc(ss.ss_size);
    if (ss.ss_sp && sigaltstack(&ss, nullptr) == 0) w.altstack = ss.ss_sp;
    else free(ss.ss_sp);
}

static char* new_stack(Worker& w) {
    const size_t guard = kGuardBytes, size = config().stack_bytes;
    char* base = (char*)mmap(nullptr, size + guard, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (base == MAP_FAILED) {
        fprintf(stderr, "beagle-emu: mmap of a %zu-byte fiber stack failed\n", size);
        abort();
    }
    mprotect(base, guard, PROT_NONE);  // an overflow faults instead of corrupting memory
    const int k = g_nguards.fetch_add(1);
    if (k < (int)(sizeof g_guards / sizeof g_guards[0])) g_guards[k] = base;
    install_overflow_handler(w);
    w.valgrind_ids.push_back(VALGRIND_STACK_REGISTER(base + guard, base + guard + size));
    return base + guard + size;
}

static void free_worker(Worker* w) {
    const size_t size = config().stack_bytes;
    for (char* top : w->free_stacks) {
        char* base = top - size - kGuardBytes;
        const int n = std::min(g_nguards.load(), (int)(sizeof g_guards / sizeof g_guards[0]));
        for (int i = 0; i < n; i++)
            if (g_guards[i] == base) g_guards[i] = nullptr;
        munmap(base, size + kGuardBytes);
    }
    for (unsigned id : w->valgrind_ids) VALGRIND_STACK_DEREGISTER(id);
    free(w->dyn);
    if (w->altstack) {
        stack_t ss;
        memset(&ss, 0, sizeof ss);
        ss.ss_flags = SS_DISABLE;
        sigaltstack(&ss, nullptr);
        free(w->altstack);
    }
    delete w;
}

// ---- static shared memory discovery (for NaN poisoning) ----------------------------------------
// __shared__ variables are thread_local with the ABI tag "beagle_smem", so their symbols carry
// "B11beagle_smem". The executable's symbol table gives their offsets in the TLS block; the marker
// variable above gives this thread's TLS block address. No symbol table (stripped binary): static
// shared memory is not poisoned (a warning says so).
struct SmemVar {
    size_t offset, size;
};
static std::vector<SmemVar> g_smem_vars;
static size_t g_marker_offset = 0;
static bool g_smem_ok = false;

// Calls fn(symbol, name) for every symbol of the executable's symbol table (.symtab); false if the
// file has none (stripped) or cannot be read.
template <class F>
static bool for_each_symbol(F fn) {
    int fd = open("/proc/self/exe", O_RDONLY);
    if (fd < 0) return false;
    bool found = false;
    Elf64_Ehdr eh;
    if (pread(fd, &eh, sizeof eh, 0) == (ssize_t)sizeof eh && !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
        eh.e_ident[EI_CLASS] == ELFCLASS64) {
        std::vector<Elf64_Shdr> sh(eh.e_shnum);
        const ssize_t shbytes = (ssize_t)(sh.size() * sizeof(Elf64_Shdr));
        if (pread(fd, sh.data(), shbytes, eh.e_shoff) == shbytes) {
            for (auto& s : sh) {
                if (s.sh_type != SHT_SYMTAB || s.sh_link >= sh.size()) continue;
                std::vector<Elf64_Sym> syms(s.sh_size / sizeof(Elf64_Sym));
                const Elf64_Shdr& st = sh[s.sh_link];
                std::vector<char> names(st.sh_size + 1, 0);
                const ssize_t symbytes = (ssize_t)(syms.size() * sizeof(Elf64_Sym));
                if (pread(fd, syms.data(), symbytes, s.sh_offset) != symbytes ||
                    pread(fd, names.data(), st.sh_size, st.sh_offset) != (ssize_t)st.sh_size)
                    continue;
                found = true;
                for (auto& y : syms)
                    if (y.st_name < st.sh_size) fn(y, (const char*)names.data() + y.st_name);
            }
        }
    }
    close(fd);
    return found;
}

static size_t tls_segment_size() {
    size_t memsz = 0;
    dl_iterate_phdr([](dl_phdr_info* info, size_t, void* out) {
        for (int i = 0; i < info->dlpi_phnum; i++)
            if (info->dlpi_phdr[i].p_type == PT_TLS) *(size_t*)out = info->dlpi_phdr[i].p_memsz;
        return 1;  // the first object is the executable
    }, &memsz);
    return memsz;
}

static void find_smem_symbols() {
    bool found_marker = false;
    std::vector<SmemVar> vars;
    for_each_symbol([&](const Elf64_Sym& y, const char* nm) {
        if (ELF64_ST_TYPE(y.st_info) != STT_TLS) return;
        if (!strcmp(nm, "beagle_emu_tls_marker")) {
            g_marker_offset = y.st_value;
            found_marker = true;
        } else if (strstr(nm, "B11beagle_smem") && strncmp(nm, "_ZGV", 4) != 0 && y.st_size > 0) {
            vars.push_back({(size_t)y.st_value, (size_t)y.st_size});  // not the guard variables
        }
    });
    const size_t tls_memsz = tls_segment_size();
    bool in_range = found_marker && tls_memsz > 0;
    for (auto& v : vars) in_range = in_range && v.offset + v.size <= tls_memsz;
    if (in_range) {
        g_smem_vars = vars;
        g_smem_ok = true;
    } else {
        fprintf(stderr, "beagle-emu: warning: no symbol table for static __shared__ variables; "
                        "only dynamic shared memory is poisoned\n");
    }
}

// The instantiated name of a kernel ("center_rows_kernel<false, true>") from its address, for
// failure messages; "" if unknown.
static std::string function_name(const void* func) {
    Dl_info info;
    if (!func || !dladdr(func, &info) || !info.dli_fbase) return "";
    const uintptr_t offset = (uintptr_t)func - (uintptr_t)info.dli_fbase;
    std::string mangled;
    for_each_symbol([&](const Elf64_Sym& y, const char* nm) {
        if (ELF64_ST_TYPE(y.st_info) == STT_FUNC && y.st_value == offset && mangled.empty()) mangled = nm;
    });
    if (mangled.empty()) return "";
    int status = 0;
    char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
    std::string name = status == 0 && d ? d : mangled;
    free(d);
    if (!name.compare(0, 5, "void ")) name.erase(0, 5);
    int depth = 0;  // drop the parameter list: the first '(' outside template brackets
    for (size_t i = 0; i < name.size(); i++) {
        if (name[i] == '<') depth++;
        else if (name[i] == '>') depth--;
        else if (name[i] == '(' && depth == 0) {
            name.resize(i);
            break;
        }
    }
    return name;
}

static void poison_shared(Worker& w, size_t dyn_bytes) {
    static std::once_flag once;
    std::call_once(once, find_smem_symbols);
    if (dyn_bytes) memset(w.dyn, 0xFF, dyn_bytes);
    if (!g_smem_ok) return;
    if (!w.tls_base) w.tls_base = &beagle_emu_tls_marker - g_marker_offset;
    for (auto& v : g_smem_vars) memset(w.tls_base + v.offset, 0xFF, v.size);
}

// Static shared memory of a kernel, measured once: before block 0 of its first launch every
// __shared__ variable of this OS thread is filled with a byte pattern; the variables whose bytes
// changed afterwards are the kernel's (a __shared__ array nobody writes is not counted). The real
// runtime knows the size from the compiler; the emulator learns it by running.
static const unsigned char kSmemFill = 0xA5;
static void measure_static_begin(Worker& w, bool poison) {
    static std::once_flag once;
    std::call_once(once, find_smem_symbols);
    if (!g_smem_ok) return;
    if (!w.tls_base) w.tls_base = &beagle_emu_tls_marker - g_marker_offset;
    for (auto& v : g_smem_vars) memset(w.tls_base + v.offset, poison ? 0xFF : kSmemFill, v.size);
}
static size_t measure_static_end(Worker& w, bool poison) {
    if (!g_smem_ok) return 0;
    const unsigned char fill = poison ? 0xFF : kSmemFill;
    size_t bytes = 0;
    for (auto& v : g_smem_vars) {
        const unsigned char* p = (const unsigned char*)w.tls_base + v.offset;
        for (size_t i = 0; i < v.size; i++)
            if (p[i] != fill) {
                bytes += v.size;
                break;
            }
    }
    return bytes;
}

// ---- failure reporting -----------------------------------------------------------------------
static std::string block_label(Worker& w) {
    Job& j = *w.job;
    const std::string inst = function_name(j.func);  // e.g. kernel<T> launched as kernel<float>
    const std::string also = !inst.empty() && inst != j.name ? " = " + inst : "";
    return fmt("kernel '%s'%s block (%u,%u,%u) [grid (%u,%u,%u), block (%u,%u,%u)]", j.name, also.c_str(), w.bid.x,
               w.bid.y, w.bid.z, j.grid.x, j.grid.y, j.grid.z, j.block.x, j.block.y, j.block.z);
}

static void block_fail(Worker& w, const std::string& what) {
    if (w.failed) return;
    w.failed = true;
    Job& j = *w.job;
    const uint64_t b = w.bid.x + (uint64_t)j.grid.x * (w.bid.y + (uint64_t)j.grid.y * w.bid.z);
    std::lock_guard<std::mutex> lk(j.mu);
    if (b < j.error_block) {
        j.error = "beagle-emu: " + block_label(w) + ": " + what;
        j.error_block = b;
    }
    j.failed = true;
}

static std::string site_str(const Site& s) { return fmt("%s (%s:%d)", s.what, s.file, s.line); }

static std::string thread_str(Worker& w, int i) {
    const uint3 t = w.threads[i].tid;
    if (w.job->block.y == 1 && w.job->block.z == 1) return fmt("%u", t.x);
    return fmt("(%u,%u,%u)", t.x, t.y, t.z);
}

// "threads 0-15 <what>; threads 16-31 <what>" from one description per thread.
static std::string describe_runs(Worker& w, const std::vector<std::string>& desc) {
    std::string out;
    int runs = 0;
    for (int i = 0; i < w.n;) {
        int k = i;
        while (k + 1 < w.n && desc[k + 1] == desc[i]) k++;
        if (!desc[i].empty()) {
            if (runs++ == 16) {
                out += "; ...";
                break;
            }
            if (!out.empty()) out += "; ";
            out += (i == k ? "thread " + thread_str(w, i) : "threads " + thread_str(w, i) + "-" + thread_str(w, k)) +
                   " " + desc[i];
        }
        i = k + 1;
    }
    return out;
}

static void report_deadlock(Worker& w) {
    std::vector<std::string> desc(w.n);
    for (int i = 0; i < w.n; i++) {
        EmuThread& t = w.threads[i];
        if (t.state == kAtBarrier) desc[i] = "wait at " + site_str(t.bsite);
        else if (t.state == kAtWarp)
            desc[i] = fmt("(warp %d) wait at ", i / 32) + site_str(t.op->site) + fmt(" with mask 0x%08x", t.op->mask);
        else if (t.state == kDone) desc[i] = "exited";
    }
    block_fail(w, "deadlock: no thread can make progress: " + describe_runs(w, desc));
}

// ---- fibers ------------------------------------------------------------------------------------
static inline void switch_to_scheduler(Worker& w, EmuThread& t) { beagle_emu_switch(&t.sp, w.sched_sp); }

static void thread_exit(Worker& w, EmuThread& t);

// The body of every fiber. After its thread exits, the fiber starts the next not-yet-started thread
// of the current pass on the same stack (the fast path: a barrier-free kernel runs all its threads
// back to back without a single context switch); otherwise it returns to the scheduler.
static void fiber_main(EmuThread* first) {
    Worker& w = *t_worker;
    EmuThread* t = first;
    for (;;) {
        bool threw = false;
        try {
            w.job->thunk(w.job->ctx);
        } catch (const std::exception& e) {
            block_fail(w, fmt("thread %s threw an exception: %s", thread_str(w, w.cur).c_str(), e.what()));
            threw = true;
        } catch (...) {
            block_fail(w, fmt("thread %s threw an exception", thread_str(w, w.cur).c_str()));
            threw = true;
        }
        if (threw) {
            t->state = kFailed;
            switch_to_scheduler(w, *t);
            abort();  // a failed thread is never resumed
        }
        thread_exit(w, *t);
        const int next = w.pos + 1;
        if (w.failed || next >= w.n || w.threads[w.order[next]].state != kNotStarted) {
            switch_to_scheduler(w, *t);
            abort();  // an exited thread is never resumed
        }
        w.pos = next;
        EmuThread* u = &w.threads[w.order[next]];
        u->stack = t->stack;
        t->stack = nullptr;
        u->state = kReady;
        w.cur = w.order[next];
        threadIdx = u->tid;
        t = u;
    }
}

static void run_thread(Worker& w, int i) {
    EmuThread& t = w.threads[i];
    if (t.state == kNotStarted) {
        if (w.free_stacks.empty()) w.free_stacks.push_back(new_stack(w));
        t.stack = w.free_stacks.back();
        w.free_stacks.pop_back();
        // Initial frame, popped by beagle_emu_switch: r15 r14 r13=fn r12=arg rbx rbp, then the return
        // address. sp = top - 72 makes rsp 16-byte aligned at the `call` in beagle_emu_fiber_start.
        void** sp = (void**)(t.stack - 72);
        sp[0] = nullptr;
        sp[1] = nullptr;
        sp[2] = (void*)&fiber_main;
        sp[3] = (void*)&t;
        sp[4] = nullptr;
        sp[5] = nullptr;
        sp[6] = (void*)&beagle_emu_fiber_start;
        t.sp = sp;
    }
    t.state = kReady;
    w.cur = i;
    threadIdx = t.tid;
    beagle_emu_switch(&w.sched_sp, t.sp);
    // The fiber may have run further threads of the pass; w.cur is the one that switched back.
    EmuThread& last = w.threads[w.cur];
    if ((last.state == kDone || last.state == kFailed) && last.stack) {
        w.free_stacks.push_back(last.stack);
        last.stack = nullptr;
    }
    w.cur = -1;
}

// ---- barriers ----------------------------------------------------------------------------------
static inline Worker& current(const char* what) {
    Worker* w = t_worker;
    if (!w || w->cur < 0) {
        fprintf(stderr, "beagle-emu: %s called outside a kernel launch\n", what);
        abort();
    }
    return *w;
}

static void complete_block_barrier(Worker& w) {
    int first = -1, count = 0;
    bool same_site = true;
    for (int i = 0; i < w.n; i++) {
        EmuThread& t = w.threads[i];
        if (t.state != kAtBarrier) continue;
        if (first < 0) first = i;
        const EmuThread& f = w.threads[first];
        if (t.bsite.line != f.bsite.line || t.bmode != f.bmode ||
            (t.bsite.file != f.bsite.file && strcmp(t.bsite.file, f.bsite.file) != 0))
            same_site = false;
        count += t.bpred;
    }
    if (!same_site) {
        std::vector<std::string> desc(w.n);
        for (int i = 0; i < w.n; i++)
            if (w.threads[i].state == kAtBarrier) desc[i] = "at " + site_str(w.threads[i].bsite);
            else if (w.threads[i].state == kDone) desc[i] = "exited";
        block_fail(w, "divergent barrier: the threads of a block reached different __syncthreads: " +
                          describe_runs(w, desc));
        return;
    }
    for (int i = 0; i < w.n; i++) {
        EmuThread& t = w.threads[i];
        if (t.state != kAtBarrier) continue;
        t.bresult = t.bmode == kBarCount ? count
                  : t.bmode == kBarAnd   ? (count == w.narrived)
                  : t.bmode == kBarOr    ? (count > 0)
                                         : 0;
        t.state = kReady;
    }
    w.narrived = 0;
}

int block_barrier(Site site, int pred, int mode) {
    Worker& w = current("__syncthreads");
    EmuThread& t = w.threads[w.cur];
    t.state = kAtBarrier;
    t.bsite = site;
    t.bpred = pred;
    t.bmode = mode;
    if (++w.narrived == w.nlive) complete_block_barrier(w);
    switch_to_scheduler(w, t);
    return t.bresult;
}

[[noreturn]] void kernel_fail(Site site, const char* message) {
    Worker& w = current(site.what);
    EmuThread& t = w.threads[w.cur];
    block_fail(w, fmt("thread %s: %s at %s:%d", thread_str(w, w.cur).c_str(), message, site.file, site.line));
    t.state = kFailed;
    switch_to_scheduler(w, t);
    abort();  // a failed thread is never resumed
}

unsigned warp_live_mask() {
    Worker& w = current("__activemask");
    return w.live[w.cur >> 5];
}

static bool is_shfl(int kind) { return kind >= kOpShflIdx && kind <= kOpShflXor; }

// Lane j that lane `l` reads in a shuffle: the PTX shfl.sync pseudo-code, with the c operand that
// CUDA's __shfl*_sync build from `width`. Returns l itself when the source is out of the segment.
static int shfl_source(int kind, int l, int b, int width) {
    const int c = ((32 - width) << 8) | (kind == kOpShflUp ? 0 : 0x1f);
    const int segmask = (c >> 8) & 31, cval = c & 31;
    const int max_lane = (l & segmask) | (cval & ~segmask), min_lane = l & segmask;
    const int bval = b & 31;
    int j;
    bool ok;
    switch (kind) {
    case kOpShflUp: j = l - bval; ok = j >= max_lane; break;
    case kOpShflDown: j = l + bval; ok = j <= max_lane; break;
    case kOpShflXor: j = l ^ bval; ok = j <= max_lane; break;
    default: j = min_lane | (bval & ~segmask); ok = j <= max_lane; break;
    }
    return ok ? j : l;
}

// Runs a warp collective once every non-exited lane of its mask has arrived with the same kind
// and mask. Called when a lane arrives and when a lane of the warp exits.
static void try_complete_warp(Worker& w, int warp, const WarpOp& ref) {
    const unsigned group = ref.mask & w.live[warp];
    WarpOp* ops[32] = {};
    int lanes[32], n = 0;
    for (int l = 0; l < 32; l++) {
        if (!(group >> l & 1)) continue;
        EmuThread& u = w.threads[warp * 32 + l];
        if (u.state != kAtWarp || u.op->kind != ref.kind || u.op->mask != ref.mask || u.op->size != ref.size) return;
        ops[l] = u.op;
        lanes[n++] = l;
    }
    const int kind = ref.kind;
    if (is_shfl(kind)) {
        const bool poison = w.job->poison;
        for (int k = 0; k < n; k++) {
            const int l = lanes[k];
            const int j = shfl_source(kind, l, ops[l]->arg, ops[l]->width);
            if (group >> j & 1) memcpy(ops[l]->out, ops[j]->in, ref.size);
            else if (poison) memset(ops[l]->out, 0xFF, ref.size);  // source lane exited/not in mask: undefined
            else memcpy(ops[l]->out, ops[l]->in, ref.size);
        }
    } else if (kind == kOpBallot || kind == kOpAny || kind == kOpAll || kind == kOpUni) {
        unsigned ballot = 0;
        for (int k = 0; k < n; k++) ballot |= (*(const int*)ops[lanes[k]]->in ? 1u : 0u) << lanes[k];
        const unsigned r = kind == kOpBallot ? ballot
                         : kind == kOpAny    ? (ballot != 0)
                         : kind == kOpAll    ? (ballot == group)
                                             : (ballot == 0 || ballot == group);
        for (int k = 0; k < n; k++) *(unsigned*)ops[lanes[k]]->out = r;
    } else if (kind == kOpMatchAny || kind == kOpMatchAll) {
        bool all_equal = true;
        for (int k = 0; k < n; k++) {
            unsigned m = 0;
            for (int q = 0; q < n; q++)
                if (!memcmp(ops[lanes[k]]->in, ops[lanes[q]]->in, ref.size)) m |= 1u << lanes[q];
            if (m != group) all_equal = false;
            *(unsigned*)ops[lanes[k]]->out = m;
        }
        if (kind == kOpMatchAll)
            for (int k = 0; k < n; k++) *(unsigned*)ops[lanes[k]]->out = all_equal ? group : 0;
    } else if (kind >= kOpReduceAddU && kind <= kOpReduceXor) {
        uint32_t ru = 0;
        int32_t ri = 0;
        for (int k = 0; k < n; k++) {
            uint32_t u;
            int32_t s;
            memcpy(&u, ops[lanes[k]]->in, 4);
            memcpy(&s, ops[lanes[k]]->in, 4);
            if (k == 0) { ru = u; ri = s; continue; }
            switch (kind) {
            case kOpReduceAddU: ru += u; break;
            case kOpReduceMinU: ru = u < ru ? u : ru; break;
            case kOpReduceMaxU: ru = u > ru ? u : ru; break;
            case kOpReduceAddI: ri = (int32_t)((uint32_t)ri + (uint32_t)s); break;
            case kOpReduceMinI: ri = s < ri ? s : ri; break;
            case kOpReduceMaxI: ri = s > ri ? s : ri; break;
            case kOpReduceAnd: ru &= u; break;
            case kOpReduceOr: ru |= u; break;
            case kOpReduceXor: ru ^= u; break;
            }
        }
        const bool is_signed = kind == kOpReduceAddI || kind == kOpReduceMinI || kind == kOpReduceMaxI;
        for (int k = 0; k < n; k++) memcpy(ops[lanes[k]]->out, is_signed ? (const void*)&ri : (const void*)&ru, 4);
    } else if (ref.action) {
        WarpOp* list[32] = {};
        for (int k = 0; k < n; k++) list[k] = ops[lanes[k]];
        ref.action(list, n);
    }
    for (int k = 0; k < n; k++) {
        EmuThread& u = w.threads[warp * 32 + lanes[k]];
        u.state = kReady;
        u.op = nullptr;
    }
    w.waiting[warp] &= ~group;
}

void warp_collective(WarpOp& op) {
    Worker& w = current(op.site.what);
    EmuThread& t = w.threads[w.cur];
    const int warp = w.cur >> 5, lane = w.cur & 31;
    char msg[256];  // (not std::string: a failed thread's stack is abandoned without unwinding)
    if (!(op.mask >> lane & 1)) {
        snprintf(msg, sizeof msg, "%s with mask 0x%08x that does not contain the calling lane %d (warp %d)",
                 op.site.what, op.mask, lane, warp);
        kernel_fail(op.site, msg);
    }
    if (is_shfl(op.kind) && (op.width < 1 || op.width > 32 || (op.width & (op.width - 1)))) {
        snprintf(msg, sizeof msg, "%s width %d is not a power of two in 1..32", op.site.what, op.width);
        kernel_fail(op.site, msg);
    }
    t.op = &op;
    t.state = kAtWarp;
    w.waiting[warp] |= 1u << lane;
    // The group can complete only once all its live lanes wait; checking that first keeps a warp's 32
    // arrivals at 32 steps instead of 32 scans of the arrived lanes.
    if (!(op.mask & w.live[warp] & ~w.waiting[warp])) try_complete_warp(w, warp, op);
    switch_to_scheduler(w, t);
}

// Bookkeeping of an exiting thread (the caller then runs the next thread or switches away).
static void thread_exit(Worker& w, EmuThread& t) {
    const int i = (int)(&t - w.threads.data());
    const int warp = i >> 5;
    t.state = kDone;
    w.ndone++;
    w.nlive--;
    w.live[warp] &= ~(1u << (i & 31));
    // Lanes waiting for this one in a warp collective, or threads waiting at __syncthreads, may now go.
    for (int l = 0; l < 32 && w.waiting[warp] && warp * 32 + l < w.n; l++) {
        EmuThread& u = w.threads[warp * 32 + l];
        if (u.state == kAtWarp) try_complete_warp(w, warp, *u.op);
    }
    if (w.nlive > 0 && w.narrived == w.nlive) complete_block_barrier(w);
}

// ---- blocks ------------------------------------------------------------------------------------
static uint64_t splitmix(uint64_t& s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void run_block(Worker& w, Job& j, uint64_t b) {
    w.job = &j;
    w.bid = uint3{(unsigned)(b % j.grid.x), (unsigned)((b / j.grid.x) % j.grid.y), (unsigned)(b / ((uint64_t)j.grid.x * j.grid.y))};
    w.n = (int)(j.block.x * j.block.y * j.block.z);
    w.nwarps = (w.n + 31) / 32;
    w.nlive = w.n;
    w.narrived = w.ndone = 0;
    w.failed = false;
    w.cur = -1;
    uint3 tid{0, 0, 0};
    for (int i = 0; i < w.n; i++) {
        EmuThread& t = w.threads[i];
        t.tid = tid;
        t.state = kNotStarted;
        t.stack = nullptr;
        t.op = nullptr;
        w.order[i] = j.schedule == Schedule::Reverse ? w.n - 1 - i : i;
        if (++tid.x == j.block.x) {
            tid.x = 0;
            if (++tid.y == j.block.y) tid.y = 0, tid.z++;
        }
    }
    for (int q = 0; q < 32; q++) {
        const int lanes = w.n - q * 32;
        w.live[q] = lanes >= 32 ? 0xffffffffu : lanes > 0 ? (1u << lanes) - 1 : 0u;
        w.waiting[q] = 0;
    }
    blockIdx = w.bid;
    blockDim = j.block;
    gridDim = j.grid;
    if (j.smem > w.dyn_cap) {
        free(w.dyn);
        w.dyn_cap = (j.smem + 4095) & ~(size_t)4095;
        w.dyn = (unsigned char*)aligned_alloc(256, w.dyn_cap);
    }
    t_dyn_smem = w.dyn;
    if (j.poison) poison_shared(w, j.smem);
    const bool measure = j.measure_static && b == 0;
    if (measure) measure_static_begin(w, j.poison);
    w.rng = j.seed * 0x2545F4914F6CDD1Dull ^ (j.launch_id << 32) ^ b;

    for (;;) {
        if (j.schedule == Schedule::Random)
            for (int i = w.n - 1; i > 0; i--) std::swap(w.order[i], w.order[splitmix(w.rng) % (uint64_t)(i + 1)]);
        bool ran = false;
        for (w.pos = 0; w.pos < w.n && !w.failed; w.pos++) {
            const int i = w.order[w.pos];
            const uint8_t s = w.threads[i].state;
            if (s == kNotStarted || s == kReady) {
                run_thread(w, i);
                ran = true;
            }
        }
        if (w.failed || w.ndone == w.n) break;
        if (!ran) {
            report_deadlock(w);
            break;
        }
    }
    if (measure) j.static_smem = measure_static_end(w, j.poison);
    // Threads left suspended by a failure are abandoned; their stacks are reused.
    for (int i = 0; i < w.n; i++)
        if (w.threads[i].stack) {
            w.free_stacks.push_back(w.threads[i].stack);
            w.threads[i].stack = nullptr;
        }
    w.job = nullptr;
}

static void run_blocks(Job* j) {
    Worker& w = this_worker();
    for (;;) {
        if (j->failed) return;
        const uint64_t b = j->next.fetch_add(1);
        if (b >= j->nblocks) return;
        run_block(w, *j, b);
    }
}

// ---- the pool of OS threads --------------------------------------------------------------------
struct Pool {
    std::mutex mu;
    std::condition_variable wake, done;
    Job* job = nullptr;
    uint64_t generation = 0;
    int busy = 0;
    int participants = 0;
    std::vector<std::thread> workers;

    void worker_loop(int index) {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lk(mu);
        for (;;) {
            wake.wait(lk, [&] { return generation != seen; });
            seen = generation;
            Job* j = job;
            const bool join = index < participants;
            lk.unlock();
            if (join && j) run_blocks(j);
            lk.lock();
            if (--busy == 0) done.notify_all();
        }
    }
};
// Never destroyed (its threads sleep until the process exits). A forked child has none of the
// parent's worker threads, so it starts with a fresh, empty pool.
static Pool* g_pool = nullptr;
static Pool& pool() {
    static std::once_flag once;
    std::call_once(once, [] {
        g_pool = new Pool();
        pthread_atfork(nullptr, nullptr, [] { g_pool = new Pool(); });
    });
    return *g_pool;
}
static std::mutex g_launch_mu;  // one launch at a time

static void run_job(Job& j) {
    Pool& p = pool();
    const uint64_t helpers = std::min<uint64_t>((uint64_t)(config().threads - 1), j.nblocks - 1);
    if (helpers == 0) {
        run_blocks(&j);
        return;
    }
    {
        std::unique_lock<std::mutex> lk(p.mu);
        while (p.workers.size() < helpers) {
            const int index = (int)p.workers.size();
            p.workers.emplace_back([index] { pool().worker_loop(index); });
            p.workers.back().detach();
        }
        p.job = &j;
        p.participants = (int)helpers;
        p.busy = (int)p.workers.size();
        p.generation++;
    }
    p.wake.notify_all();
    run_blocks(&j);
    std::unique_lock<std::mutex> lk(p.mu);
    p.done.wait(lk, [&] { return p.busy == 0; });
    p.job = nullptr;
}

static cudaError_t validate(const void* func, dim3 grid, dim3 block, size_t smem, cudaStream_t stream) {
    if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > (unsigned)kMaxBlockDimX ||
        block.y > (unsigned)kMaxBlockDimY || block.z > (unsigned)kMaxBlockDimZ ||
        (uint64_t)block.x * block.y * block.z > (uint64_t)kMaxThreadsPerBlock)
        return cudaErrorInvalidConfiguration;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > kMaxGridDimX || grid.y > kMaxGridDimY ||
        grid.z > kMaxGridDimZ)
        return cudaErrorInvalidConfiguration;
    if (smem > func_max_dynamic_smem(func)) return cudaErrorInvalidValue;
    if (!stream_is_valid(stream)) return cudaErrorInvalidResourceHandle;
    return cudaSuccess;
}

// A launch the hardware would fault on or refuse, found before or while it ran: the message goes to
// last_error_detail() (and stderr unless quiet), the error to cudaGetLastError() and the next sync.
cudaError_t reject_launch(const std::string& msg, cudaError_t e) {
    {
        std::lock_guard<std::mutex> lk(g_detail_mu);
        g_detail = msg;
    }
    Config& c = config();
    if (!c.quiet || c.abort_on_error) fprintf(stderr, "%s\n", msg.c_str());
    if (c.abort_on_error) abort();
    set_last_error(e);
    set_pending_launch_error(e);
    return e;
}

// Static shared memory per kernel function (measured on its first launch) and the limit on static +
// dynamic: 48 KiB, or the opt-in maximum once cudaFuncSetAttribute raised the dynamic limit above it.
static std::mutex g_static_mu;
static std::map<const void*, size_t> g_static_smem;
static std::string smem_over_limit(const char* name, const void* func, size_t st, size_t dyn) {
    const size_t limit = func_max_dynamic_smem(func) > kSmemPerBlock ? kSmemPerBlockOptin : kSmemPerBlock;
    if (st + dyn <= limit) return "";
    return fmt("beagle-emu: launch of kernel '%s': %zu bytes of static + %zu bytes of dynamic shared memory exceed "
               "the %zu-byte limit per block%s (the hardware refuses the launch: too many resources requested)",
               name, st, dyn, limit,
               limit == kSmemPerBlock ? " without cudaFuncSetAttribute(MaxDynamicSharedMemorySize)" : "");
}

void set_error_detail(const char* message) {
    std::lock_guard<std::mutex> lk(g_detail_mu);
    g_detail = message;
}

cudaError_t launch_grid(const char* name, const void* func, dim3 grid, dim3 block, size_t smem,
                        cudaStream_t stream, Thunk thunk, void* ctx, CloneCtx clone, FreeCtx free_ctx) {
    if (t_worker && t_worker->cur >= 0) {
        fprintf(stderr, "beagle-emu: kernel '%s' launched from inside kernel '%s': dynamic parallelism is not "
                        "emulated\n", name, t_worker->job ? t_worker->job->name : "?");
        abort();
    }
    const cudaError_t bad = validate(func, grid, block, smem, stream);
    if (bad != cudaSuccess) {
        std::string msg = fmt("beagle-emu: launch of kernel '%s' with grid (%u,%u,%u), block (%u,%u,%u), "
                              "%zu bytes dynamic shared memory rejected: %s", name, grid.x, grid.y, grid.z,
                              block.x, block.y, block.z, smem, cudaGetErrorString(bad));
        {
            std::lock_guard<std::mutex> lk(g_detail_mu);
            g_detail = msg;
        }
        set_last_error(bad);
        if (bad != cudaErrorInvalidResourceHandle) capture_invalidate(stream);  // a graph must not miss the node
        return bad;
    }
    // Stream capture: the launch becomes a node of the graph (its closure copied: the caller's copy
    // lives on its stack), checked again and run by each cudaGraphLaunch.
    bool capturing = false;
    const cudaError_t cap = capture_check(stream, "kernel launch", &capturing);
    if (cap != cudaSuccess) {
        set_error_detail(fmt("beagle-emu: launch of kernel '%s' on the legacy stream while a blocking stream is "
                             "capturing: %s (the capture is invalidated)", name, cudaGetErrorName(cap)).c_str());
        set_last_error(cap);
        return cap;
    }
    if (capturing) {
        if (!clone) {  // a graph's node replayed into a capturing stream (cudaGraphLaunch refuses that first)
            capture_invalidate(stream);
            set_last_error(cudaErrorNotSupported);
            return cudaErrorNotSupported;
        }
        capture_kernel(stream, KernelNode{name, func, grid, block, smem, thunk,
                                          std::shared_ptr<void>(clone(ctx), free_ctx)});
        return cudaSuccess;
    }
    size_t static_smem = 0;
    bool known = false;
    {
        std::lock_guard<std::mutex> lk(g_static_mu);
        auto it = g_static_smem.find(func);
        if (it != g_static_smem.end()) static_smem = it->second, known = true;
    }
    if (known) {
        const std::string over = smem_over_limit(name, func, static_smem, smem);
        if (!over.empty()) return reject_launch(over, cudaErrorInvalidValue);
    }
    std::lock_guard<std::mutex> launch_lock(g_launch_mu);
    Config& c = config();
    Job j;
    j.name = name;
    j.func = func;
    j.grid = grid;
    j.block = block;
    j.smem = smem;
    j.thunk = thunk;
    j.ctx = ctx;
    j.nblocks = (uint64_t)grid.x * grid.y * grid.z;
    j.launch_id = ++g_launches - c.epoch;
    j.schedule = (Schedule)c.schedule.load();
    j.seed = c.seed;
    j.poison = c.poison;
    j.measure_static = !known;
    run_job(j);
    if (!known) {
        {
            std::lock_guard<std::mutex> lk(g_static_mu);
            g_static_smem[func] = j.static_smem;
        }
        const std::string over = smem_over_limit(name, func, j.static_smem, smem);
        if (!over.empty()) return reject_launch(over, cudaErrorInvalidValue);
    }
    if (!j.failed) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lk(g_detail_mu);
        g_detail = j.error;
    }
    if (!c.quiet || c.abort_on_error) fprintf(stderr, "%s\n", j.error.c_str());
    if (c.abort_on_error) abort();
    set_last_error(cudaErrorLaunchFailure);
    set_pending_launch_error(cudaErrorLaunchFailure);
    return cudaErrorLaunchFailure;
}

}  // namespace beagle_emu
