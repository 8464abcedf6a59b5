// run_forked (src/cuda/backend/side_stream.h) on its own, with host functions as the work so
// that the ordering is observable: the second stream's work starts only after the caller's
// earlier work (the fork), and the caller's stream waits for it (the join), eagerly and in a
// captured graph, also when the second stream is created while the capture is open (a fresh
// thread); a failing `side` skips `main` and still joins.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "src/cuda/backend/side_stream.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagedattn::cudatest {
namespace {

struct Order {
  std::atomic<int> caller_done{0};      // the caller's work enqueued before the fork
  std::atomic<int> side_saw_caller{-1};  // caller_done as the side work found it
  std::atomic<int> side_done{0};
  void reset() {
    caller_done = 0;
    side_saw_caller = -1;
    side_done = 0;
  }
};

// Host functions run on a driver thread in stream order; they sleep so that a missing fork or
// join would be seen (the other stream's function would have run, or not, meanwhile).
void CUDART_CB caller_work(void* p) {
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  static_cast<Order*>(p)->caller_done = 1;
}
void CUDART_CB side_work(void* p) {
  auto* o = static_cast<Order*>(p);
  o->side_saw_caller = o->caller_done.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  o->side_done = 1;
}

Status host_fn(void* stream, cudaHostFn_t fn, void* data) {
  const cudaError_t e = cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), fn, data);
  return e == cudaSuccess ? Status::Ok()
                          : Status(StatusCode::kInternal, cudaGetErrorString(e));
}

// caller_work, then run_forked(side_work, nothing) on `stream`; true when it forked.
Status enqueue_forked(cudaStream_t stream, Order* o, bool* forked) {
  PAGEDATTN_RETURN_IF_ERROR(host_fn(stream, caller_work, o));
  const std::int64_t before = cuda::forks_on_this_thread();
  int device = 0;
  (void)cudaGetDevice(&device);
  void* main_stream = nullptr;
  PAGEDATTN_RETURN_IF_ERROR(cuda::run_forked(
      stream, device, [&](void* s) { return host_fn(s, side_work, o); },
      [&](void* s) {
        main_stream = s;
        return Status::Ok();
      }));
  if (main_stream != stream) return Status(StatusCode::kInternal, "main ran on another stream");
  *forked = cuda::forks_on_this_thread() == before + 1;
  return Status::Ok();
}

TEST(CudaSideStream, ForkAfterTheCallersWorkJoinBeforeItsNext) {
  PA_SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Order o;
  bool forked = false;
  PA_ASSERT_OK(enqueue_forked(stream, &o, &forked));
  EXPECT_TRUE(forked) << "run_forked fell back to one stream";
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // the caller's stream only
  EXPECT_EQ(o.side_saw_caller.load(), 1) << "the side work started before the caller's work";
  EXPECT_EQ(o.side_done.load(), 1) << "the caller's stream did not wait for the side work";
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// Captured and replayed; the capture runs on a new thread, so the second stream and its
// events are created while the (global-mode) capture is open.
TEST(CudaSideStream, CapturedForkAndJoinAlsoWhenCreatedInsideTheCapture) {
  PA_SKIP_WITHOUT_GPU();
  std::thread t([] {
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    Order o;
    bool forked = false;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status st = enqueue_forked(stream, &o, &forked);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    PA_ASSERT_OK(st);
    ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
    EXPECT_TRUE(forked);
    EXPECT_EQ(o.side_done.load(), 0) << "captured work ran during the capture";
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int replay = 0; replay < 2; ++replay) {
      o.reset();
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_EQ(o.side_saw_caller.load(), 1) << "replay " << replay << ": no fork edge";
      EXPECT_EQ(o.side_done.load(), 1) << "replay " << replay << ": no join edge";
    }
    // After the capture the second stream is usable eagerly again.
    o.reset();
    PA_ASSERT_OK(enqueue_forked(stream, &o, &forked));
    EXPECT_TRUE(forked);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(o.side_done.load(), 1);
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
    (void)cudaStreamDestroy(stream);
  });
  t.join();
}

TEST(CudaSideStream, FailingSideSkipsMainAndStillJoinsTheCapture) {
  PA_SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Order o;
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  bool main_ran = false;
  const Status st = cuda::run_forked(
      stream, device,
      [&](void* s) {
        PAGEDATTN_RETURN_IF_ERROR(host_fn(s, side_work, &o));
        return Status(StatusCode::kInternal, "side failed on purpose");
      },
      [&](void*) {
        main_ran = true;
        return Status::Ok();
      });
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("side failed on purpose"), std::string::npos) << st.to_string();
  EXPECT_FALSE(main_ran);
  EXPECT_EQ(end, cudaSuccess) << "the capture was left forked: " << cudaGetErrorString(end);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  if (graph) (void)cudaGraphDestroy(graph);
  (void)cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace pagedattn::cudatest
