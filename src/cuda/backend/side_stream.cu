// run_forked (side_stream.h): the per-thread second stream and its fork/join events.
#include <cuda_runtime.h>

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

// One per thread and device: a stream shared between threads would order one thread's side
// work after another's, and an event re-recorded by another thread between our record and
// wait would make us wait for its work too.
struct SideStreams {
  std::unordered_map<int, SideStream> by_device;
  ~SideStreams() {
    // At process exit the runtime may already be gone: these then fail, harmlessly.
    for (auto& [device, s] : by_device) {
      if (s.fork) (void)cudaEventDestroy(s.fork);
      if (s.join) (void)cudaEventDestroy(s.join);
      if (s.stream) (void)cudaStreamDestroy(s.stream);
    }
  }
};

const SideStream& side_stream_for(int device) {
  thread_local SideStreams streams;
  auto [it, inserted] = streams.by_device.try_emplace(device);
  SideStream& s = it->second;
  if (!inserted) return s;
  // Creating a stream or an event is not stream-ordered work, but the global capture mode
  // counts it as unsafe; relaxed for these calls only, restored after.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  s.ok = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking) == cudaSuccess &&
         cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming) == cudaSuccess &&
         cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming) == cudaSuccess;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
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
  PA_CUDA_RETURN(cudaEventRecord(s.fork, caller), "run_forked: cudaEventRecord(fork)");
  PA_CUDA_RETURN(cudaStreamWaitEvent(s.stream, s.fork, 0), "run_forked: cudaStreamWaitEvent(fork)");
  Status first = side(static_cast<void*>(s.stream));
  Status second = main(stream);
  // The join, whatever happened above: a capture must not end with the second stream forked.
  const cudaError_t rec = cudaEventRecord(s.join, s.stream);
  const cudaError_t wait = rec == cudaSuccess ? cudaStreamWaitEvent(caller, s.join, 0) : rec;
  if (!first.ok()) return first;
  if (!second.ok()) return second;
  if (rec != cudaSuccess) return cuda_error(rec, "run_forked: cudaEventRecord(join)");
  if (wait != cudaSuccess) return cuda_error(wait, "run_forked: cudaStreamWaitEvent(join)");
  return Status::Ok();
}

}  // namespace pagedattn::cuda
