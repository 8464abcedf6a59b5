// Shared-memory mbarrier primitives (PTX ISA "Parallel Synchronization and Communication
// Instructions: mbarrier"), used by the decode cluster merge (decode_common.cuh) and the
// warp-specialised prefill pipeline (prefill_wgmma_ws.cu). Addresses are 32-bit shared-window
// addresses (smem_addr). try_wait / expect_tx need sm_90; a function is assembled only for
// the kernels that call it.
#pragma once

#include <cstdint>

namespace pagedattn::cuda {

/// Initialise the 8-byte barrier at `bar` for `count` arrivals per phase.
__device__ __forceinline__ void mbar_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
/// One arrival (release at CTA scope: this thread's earlier writes are ordered before it).
__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
/// One arrival that also expects `bytes` of asynchronous writes in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
/// `bytes` more asynchronous writes (TMA complete_tx) expected in the current phase, with no
/// arrival: several warps can each announce their own copies on one barrier.
__device__ __forceinline__ void mbar_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
/// Wait until phase `parity` of the barrier completed (acquire at CTA scope).
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
/// One arrival on the barrier once every cp.async this thread issued so far has landed (the
/// barrier's count must include it: .noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(std::uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

}  // namespace pagedattn::cuda
