// Fork/join of one call's work over the caller's stream and a second stream, so that two
// kernels with disjoint outputs (a mixed batch's decode rows and prefill rows) can share the
// GPU instead of running one after the other. Host code of the CUDA backend (CUDA builds only).
#pragma once

#include <cstdint>
#include <functional>

#include "pagedattn/status.h"

namespace pagedattn::cuda {

/// Work enqueued on the stream it is given (a cudaStream_t passed as void*).
using StreamWork = std::function<Status(void* stream)>;

/// Runs `side` on a second stream of the calling thread and `main` on `stream`, concurrently:
/// an event recorded on `stream` orders the second stream after the caller's earlier work, and
/// an event recorded on the second stream after `side` makes `stream`'s later work wait for it.
/// So everything enqueued on `stream` after this call sees both; nothing waits on the host. In
/// stream capture the second stream joins the capture and the graph holds a fork and a join
/// (CUDA Programming Guide, "Cross-stream dependencies and events").
///
/// `side` is enqueued first, so that its CTAs tend to be dispatched before `main`'s (CUDA
/// promises no order between streams: a performance hope, not a guarantee). `device` is the
/// current device (the caller's DeviceGuard); the second stream and the two events are created
/// once per thread and device (cudaStreamNonBlocking, cudaEventDisableTiming), under the
/// relaxed capture mode, so a first call inside a capture does not invalidate it. When they
/// cannot be created, or the second stream still belongs to another capture of this thread
/// (a stream that joined a capture stays in it until the capture ends), both run on `stream`,
/// `side` first (the same results, serially).
///
/// Errors: the first failure of the event calls, `side` or `main`; after a failure of `side`,
/// `main` is not run (as in the serial order). The join is enqueued even when `side` or
/// `main` failed, so that a capture in progress is never left forked. A thread must not exit
/// while a capture that its second stream joined is open.
Status run_forked(void* stream, int device, const StreamWork& side, const StreamWork& main);

/// How many calls of this thread forked (tests: the concurrent path ran, not the fallback).
std::int64_t forks_on_this_thread();

/// How a mixed batch (decode rows on the decode fast path, chunks on a tensor-core prefill
/// kernel) orders its two kernels, from PAGEDATTN_MIXED_CONCURRENT (read once): 0 = serially
/// on the call's stream, decode first; 1 = concurrently (run_forked), the prefill rows on the
/// second stream and enqueued first; 2 (unset or any other value) = concurrently, the decode
/// rows on the second stream and enqueued first: the default since the same-run A/B on an
/// H200 (T-conv-mixed 1.10x over serial, 1.03x over mode 1; docs/performance_prefill.md).
int mixed_concurrent_mode();

/// Plans made after it see `mode` (0, 1 or 2, as above) instead of the environment variable;
/// -1 restores the variable. Tests only (GPU tests compare the modes in one process).
void set_mixed_concurrent_for_testing(int mode);

}  // namespace pagedattn::cuda
