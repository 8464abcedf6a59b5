// The library called from several host threads at once on one GPU. Per-process CUDA state, such
// as a kernel's dynamic shared-memory attribute, is shared by every thread: a call must not
// change it in a way that breaks another thread's launch in flight.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/run_together.h"

namespace pagedattn::cudatest {
namespace {

// Two calls of one tiled-kernel instance (fp32 query and cache, head 128: the same template
// arguments) that need different amounts of shared memory, both above 48 KiB: forced tiles of
// 64 and 32 tokens. Before the fix each launch set the function's limit to its own size, so a
// thread that set 160 KB could find it lowered to 80 KB by the other thread before its launch
// (cudaErrorInvalidValue, reported as kInternal).
TEST(CudaConcurrency, TiledCallsWithDifferentSharedMemoryOnTwoThreads) {
  PA_SKIP_WITHOUT_GPU();
  std::vector<std::unique_ptr<Problem>> problems;
  std::vector<void*> streams;
  for (int tile : {64, 32}) {
    ProblemSpec s;
    s.num_heads = 8;
    s.num_kv_heads = 2;
    s.head_size = 128;
    s.dtype = s.kv_dtype = DType::kFloat32;
    s.seq_lens = {300, 77, 129};
    s.query_lens = {5, 1, 9};
    s.plan.tile_tokens = tile;
    s.seed = 40 + static_cast<std::uint64_t>(tile);
    auto p = Problem::make(s);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    PA_ASSERT_OK((*p)->plan());
    ASSERT_EQ((*p)->attention_plan().choice().kernel, KernelId::kCudaTiled);
    ASSERT_GT((*p)->attention_plan().choice().shared_memory_bytes, 48 * 1024);
    problems.push_back(std::move(p).value());
    auto st = cuda::testsupport::stream_create();
    ASSERT_TRUE(st.ok());
    streams.push_back(*st);
  }
  ASSERT_NE(problems[0]->attention_plan().choice().shared_memory_bytes,
            problems[1]->attention_plan().choice().shared_memory_bytes);

  constexpr int kIters = 2000;
  std::vector<std::string> errors(2);
  testutil::run_together(2, [&](int i) {
    for (int it = 0; it < kIters; ++it) {
      const Status st = problems[static_cast<std::size_t>(i)]->run(streams[static_cast<std::size_t>(i)]);
      if (!st.ok()) {
        errors[static_cast<std::size_t>(i)] = "iteration " + std::to_string(it) + ": " + st.to_string();
        return;
      }
    }
  });
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(errors[static_cast<std::size_t>(i)], "") << "thread " << i;
    PA_ASSERT_OK(cuda::testsupport::stream_synchronize(streams[static_cast<std::size_t>(i)]));
    EXPECT_EQ(problems[static_cast<std::size_t>(i)]->check_against_oracle(), "") << "thread " << i;
    cuda::testsupport::stream_destroy(streams[static_cast<std::size_t>(i)]);
  }
}

}  // namespace
}  // namespace pagedattn::cudatest
