// run_forked (side_stream.h): the per-thread second stream and its fork/join events.
#include <cuda_runtime.h>

#include <cstdint>
#include <unordered_map>

#include "src/cuda/backend/side_stream.h"
#include "src/cuda/common/cuda_common.cuh"

namespace pagedattn::cuda {

namespace {

struct SideStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr;
  cudaEvent_t join = nullptr;
  bool ok = false;
};

// Runs `f` under the relaxed capture mode and restores the thread's mode after: creating or
// destroying a stream or an event is not stream-ordered work, but the global mode counts it
// as unsafe while any capture is open (also another thread's).
template <class F>
void relaxed(F&& f) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const bool exchanged = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  f();
  if (exchanged) (void)cudaThreadExchangeStreamCaptureMode(&mode);
  else (void)cudaGetLastError();
}

// One per thread and device: a stream shared between threads would order one thread's side
// work after another's, and an event re-recorded by another thread between our record and
// wait would make us wait for its work too.
struct SideStreams {
  std::unordered_map<int, SideStream> by_device;
  std::int64_t forks = 0;
  // At thread exit (the main thread's before static destructors and atexit handlers, while
  // the runtime is still up). A thread must not exit while a capture its second stream joined
  // is still open: destroying that stream would invalidate the capture.
  ~SideStreams() {
    relaxed([&] {
      for (auto& [device, s] : by_device) {
        if (s.fork) (void)cudaEventDestroy(s.fork);
        if (s.join) (void)cudaEventDestroy(s.join);
        if (s.stream) (void)cudaStreamDestroy(s.stream);
      }
      (void)cudaGetLastError();
    });
  }
};

SideStreams& side_streams() {
  thread_local SideStreams streams;
  return streams;
}

const SideStream& side_stream_for(int device) {
  auto [it, inserted] = side_streams().by_device.try_emplace(device);
  SideStream& s = it->second;
  if (!inserted) return s;
  relaxed([&] {
    s.ok = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking) == cudaSuccess &&
           cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming) == cudaSuccess &&
           cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming) == cudaSuccess;
  });
  // A failed creation leaves its error for the next cudaGetLastError, which the launches
  // check: clear it (the caller falls back to one stream).
  if (!s.ok) (void)cudaGetLastError();
  return s;
}

// A stream that joined a capture through an event wait stays in it until the capture ends.
// So the second stream may still belong to a capture this thread has open on another stream:
// forking from any stream but one of that same capture would pull our work into that graph
// (or fail). True when forking is safe: the second stream captures nothing, or the same
// capture as the caller's stream.
bool same_capture(cudaStream_t caller, cudaStream_t side) {
  cudaStreamCaptureStatus side_status = cudaStreamCaptureStatusNone;
  unsigned long long side_id = 0;
  if (cudaStreamGetCaptureInfo(side, &side_status, &side_id) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (side_status == cudaStreamCaptureStatusNone) return true;
  cudaStreamCaptureStatus caller_status = cudaStreamCaptureStatusNone;
  unsigned long long caller_id = 0;
  if (cudaStreamGetCaptureInfo(caller, &caller_status, &caller_id) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return side_status == cudaStreamCaptureStatusActive &&
         caller_status == cudaStreamCaptureStatusActive && caller_id == side_id;
}

}  // namespace

Status run_forked(void* stream, int device, const StreamWork& side, const StreamWork& main) {
  const SideStream& s = side_stream_for(device);
  cudaStream_t caller = static_cast<cudaStream_t>(stream);
  if (!s.ok || !same_capture(caller, s.stream)) {
    PAGEDATTN_RETURN_IF_ERROR(side(stream));
    return main(stream);
  }
  // A failed event call leaves its error for the launches' cudaGetLastError checks: clear it,
  // so that nothing later reports it as its own.
  auto failed = [](cudaError_t err, const char* what) {
    (void)cudaGetLastError();
    return cuda_error(err, what);
  };
  cudaError_t err = cudaEventRecord(s.fork, caller);
  if (err != cudaSuccess) return failed(err, "run_forked: cudaEventRecord(fork)");
  err = cudaStreamWaitEvent(s.stream, s.fork, 0);
  if (err != cudaSuccess) return failed(err, "run_forked: cudaStreamWaitEvent(fork)");
  ++side_streams().forks;
  Status first = side(static_cast<void*>(s.stream));
  // As the serial order: nothing after a failure of `side`, whose error is the call's (a
  // cleared last error, so no later launch check reports it as its own).
  if (!first.ok()) (void)cudaGetLastError();
  const Status second = first.ok() ? main(stream) : Status::Ok();
  // The join, whatever happened above: a capture must not end with the second stream forked.
  const cudaError_t rec = cudaEventRecord(s.join, s.stream);
  const cudaError_t wait = rec == cudaSuccess ? cudaStreamWaitEvent(caller, s.join, 0) : rec;
  if (!first.ok()) return first;
  if (!second.ok()) return second;
  if (rec != cudaSuccess) return failed(rec, "run_forked: cudaEventRecord(join)");
  if (wait != cudaSuccess) return failed(wait, "run_forked: cudaStreamWaitEvent(join)");
  return Status::Ok();
}

std::int64_t forks_on_this_thread() { return side_streams().forks; }

}  // namespace pagedattn::cuda
