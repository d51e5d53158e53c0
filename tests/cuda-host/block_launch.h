// A CUDA grid on the host, for the emulation tests: one std::thread per CUDA thread of a
// block, created once per launch and run over the blocks in order, a std::barrier for
// __syncthreads and one between blocks (so no thread starts the next block while another
// still uses the shared arrays). threadIdx and blockIdx are per thread; gridDim, the block
// barrier and the kernels' shared memory are process-wide, so callers hold emu_mutex for a
// whole launch sequence (the Rust test harness calls in from several threads).
#pragma once

#include <barrier>
#include <mutex>
#include <thread>
#include <vector>

namespace {

struct EmuDim3 {
    unsigned x, y, z;
};
thread_local EmuDim3 threadIdx;
thread_local EmuDim3 blockIdx;
EmuDim3 gridDim;
std::barrier<>* emu_block_barrier = nullptr;
std::mutex emu_mutex;

[[maybe_unused]] void __syncthreads() { emu_block_barrier->arrive_and_wait(); }

// Runs `kernel` on a (gx, gy) grid of THREADS-thread blocks.
template <unsigned THREADS, class F>
void emu_launch(unsigned gx, unsigned gy, F kernel) {
    gridDim = {gx, gy, 1};
    std::barrier<> block(THREADS);
    emu_block_barrier = &block;
    std::vector<std::thread> threads;
    threads.reserve(THREADS);
    for (unsigned t = 0; t < THREADS; ++t) {
        threads.emplace_back([&, t] {
            threadIdx = {t, 0, 0};
            for (unsigned by = 0; by < gy; ++by) {
                for (unsigned bx = 0; bx < gx; ++bx) {
                    blockIdx = {bx, by, 0};
                    kernel();
                    block.arrive_and_wait();
                }
            }
        });
    }
    for (auto& t : threads) t.join();
    emu_block_barrier = nullptr;
}

}  // namespace
