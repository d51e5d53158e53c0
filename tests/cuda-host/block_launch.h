// A CUDA grid on the host, for the emulation tests: each CUDA thread of a block is a fiber
// (a ucontext with its own stack) and the fibers of a launch take turns on the calling
// thread, switching only where a CUDA thread would wait for others: at __syncthreads, at
// the warp-collective instructions (warp_emulation.h) and between blocks (so no thread
// starts the next block while another still uses the shared arrays). All blocks run in
// order on one set of fibers; blockIdx, threadIdx, gridDim and the kernels' shared memory
// are process-wide, so callers hold emu_mutex for a whole launch sequence (the Rust test
// harness calls in from several threads).
//
// Why fibers and not one std::thread per CUDA thread (the first version): a barrier among
// 128 OS threads on a 2-core machine costs futex wake-ups and context switches on every
// warp collective, which made these tests the longest of the test command. Fibers switch
// in user space, and their order is chosen by the emulator, not by the OS scheduler: at
// every round of turns the waiting fibers resume in a fresh pseudo-random order (a fixed
// seed, so a failure replays), so a thread that reads what another wrote without a barrier
// in between sees the write in some rounds and misses it in others, as on a GPU. A missing
// or extra barrier makes every fiber wait with no way on: the emulator reports the deadlock
// and aborts instead of hanging.
#pragma once

#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace {

struct EmuDim3 {
    unsigned x, y, z;
};
EmuDim3 threadIdx;  // the running fiber's
EmuDim3 blockIdx;   // the running fiber's
EmuDim3 gridDim;
std::mutex emu_mutex;

// One CUDA thread: its context, stack and indices.
struct EmuFiber {
    ucontext_t ctx;
    std::unique_ptr<unsigned char[]> stack;
    EmuDim3 tid, bid;
    bool done;
};

// The fibers of the running launch and the context that schedules them.
struct EmuScheduler {
    std::vector<EmuFiber> fibers;
    ucontext_t main;
    unsigned current = 0;
    unsigned long progress = 0;  // arrivals at barriers and finished fibers, ever
    unsigned long long seed = 0x9E3779B97F4A7C15ull;
    void (*body)(void*) = nullptr;
    void* body_arg = nullptr;
};
EmuScheduler* emu_sched = nullptr;

// Stack per fiber: the kernels keep register tiles of up to a few KiB per thread; the
// host's unoptimised helpers need more. 256 KiB is far above what they use.
constexpr std::size_t EMU_STACK_BYTES = 256 * 1024;

// Gives the turn back to the scheduler; returns when this fiber is resumed.
void emu_yield() {
    EmuFiber& me = emu_sched->fibers[emu_sched->current];
    swapcontext(&me.ctx, &emu_sched->main);
}

// A barrier of `expected` fibers; reusable phase after phase.
struct EmuBarrier {
    unsigned expected;
    unsigned arrived = 0;
    unsigned long phase = 0;
    explicit EmuBarrier(unsigned n) : expected(n) {}
    void arrive_and_wait() {
        const unsigned long mine = phase;
        ++emu_sched->progress;
        if (++arrived == expected) {
            arrived = 0;
            ++phase;
        }
        // Every fiber, the last to arrive included, waits for its next turn, so the threads
        // leave the barrier in the next round's shuffled order.
        do {
            emu_yield();
        } while (phase == mine);
    }
};
EmuBarrier* emu_block_barrier = nullptr;

[[maybe_unused]] void __syncthreads() { emu_block_barrier->arrive_and_wait(); }

void emu_fiber_entry() {
    EmuScheduler& s = *emu_sched;
    s.body(s.body_arg);
    s.fibers[s.current].done = true;
    ++s.progress;
    // Returning resumes uc_link, the scheduler.
}

// Fiber `t`, ready to start at emu_fiber_entry and to resume `link` when it ends. (Its own
// function: getcontext returns like setjmp, which must not share a frame with a loop.)
[[gnu::noinline]] void emu_make_fiber(EmuFiber& f, unsigned t, ucontext_t* link) {
    f.stack.reset(new unsigned char[EMU_STACK_BYTES]);
    f.tid = {t, 0, 0};
    f.bid = {0, 0, 0};
    f.done = false;
    if (getcontext(&f.ctx) != 0) std::abort();
    f.ctx.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc_stack.ss_size = EMU_STACK_BYTES;
    f.ctx.uc_link = link;
    makecontext(&f.ctx, emu_fiber_entry, 0);
}

// Runs `kernel` on a (gx, gy) grid of THREADS-thread blocks.
template <unsigned THREADS, class F>
void emu_launch(unsigned gx, unsigned gy, F kernel) {
    gridDim = {gx, gy, 1};
    EmuBarrier block(THREADS);
    emu_block_barrier = &block;
    EmuScheduler s;
    emu_sched = &s;
    auto run_blocks = [&] {
        EmuFiber& me = s.fibers[s.current];
        for (unsigned by = 0; by < gy; ++by) {
            for (unsigned bx = 0; bx < gx; ++bx) {
                me.bid = {bx, by, 0};
                blockIdx = me.bid;
                kernel();
                block.arrive_and_wait();
            }
        }
    };
    s.body = [](void* f) { (*static_cast<decltype(run_blocks)*>(f))(); };
    s.body_arg = &run_blocks;
    s.fibers.resize(THREADS);
    for (unsigned t = 0; t < THREADS; ++t) emu_make_fiber(s.fibers[t], t, &s.main);
    std::vector<unsigned> order(THREADS);
    for (unsigned t = 0; t < THREADS; ++t) order[t] = t;
    for (unsigned live = THREADS; live > 0;) {
        // A fresh order for every round of turns (Fisher–Yates on a 64-bit LCG).
        for (unsigned i = THREADS - 1; i > 0; --i) {
            s.seed = s.seed * 6364136223846793005ull + 1442695040888963407ull;
            const unsigned j = (unsigned)((s.seed >> 33) % (i + 1));
            const unsigned tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }
        const unsigned long before = s.progress;
        for (unsigned t : order) {
            EmuFiber& f = s.fibers[t];
            if (f.done) continue;
            s.current = t;
            threadIdx = f.tid;
            blockIdx = f.bid;
            swapcontext(&s.main, &f.ctx);
            if (f.done) --live;
        }
        if (live > 0 && s.progress == before) {
            std::fprintf(stderr,
                         "emu_launch: deadlock: %u CUDA threads wait at barriers that can "
                         "never complete (a missing or extra __syncthreads or warp "
                         "collective)\n",
                         live);
            std::abort();
        }
    }
    emu_block_barrier = nullptr;
    emu_sched = nullptr;
}

}  // namespace

