// Tensors on the second GPU while the calling thread's current device is the first: every entry
// point must follow the tensors (allocate, launch, synchronise on their device) and leave the
// caller's current device as it found it. An engine serving one model per GPU from one process
// calls the library this way; kernels launched on the current device instead read another
// device's memory (an illegal address, or a silent wrong answer with peer access on). Every
// test here skips on a machine with fewer than two GPUs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/testing/harness.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagedattn::cudatest {
namespace {

bool have_two_gpus() { return have_gpu() && cuda::testsupport::device_count() >= 2; }

#define PA_SKIP_WITHOUT_TWO_GPUS()                                                  \
  do {                                                                              \
    if (!have_two_gpus()) GTEST_SKIP() << "needs two CUDA devices";                 \
  } while (0)

/// One spec per kernel family on an H200 (the plan decides; the names say what it takes).
std::vector<std::pair<std::string, ProblemSpec>> kernel_specs() {
  std::vector<std::pair<std::string, ProblemSpec>> v;
  ProblemSpec w7;  // one 1024-token decode: the small-call kernel (cluster merge)
  w7.num_heads = 32;
  w7.num_kv_heads = 8;
  w7.head_size = 128;
  w7.dtype = w7.kv_dtype = DType::kBFloat16;
  w7.seq_lens = {1024};
  w7.query_lens = {1};
  v.push_back({"small-call", w7});
  ProblemSpec merge = w7;  // the pipelined kernel with the merge kernel (workspace)
  merge.seq_lens = {5000, 17, 300};
  merge.query_lens = {1, 1, 1};
  merge.plan.num_splits = 12;
  merge.sinks = true;
  v.push_back({"merge-kernel", merge});
  ProblemSpec pairs;  // head 64, KV heads paired
  pairs.num_heads = 32;
  pairs.num_kv_heads = 8;
  pairs.head_size = 64;
  pairs.dtype = pairs.kv_dtype = DType::kBFloat16;
  pairs.seq_lens = {3000, 64, 700};
  pairs.query_lens = {1, 1, 1};
  v.push_back({"head64-pairs", pairs});
  ProblemSpec prefill;  // the prefill kernel beside decode rows
  prefill.num_heads = 16;
  prefill.num_kv_heads = 4;
  prefill.head_size = 128;
  prefill.seq_lens = {300, 50, 33};
  prefill.query_lens = {40, 50, 1};
  prefill.sliding_window = 100;
  v.push_back({"prefill", prefill});
  ProblemSpec tiled;  // fp32 queries, head 96: the tiled kernel and its split merge
  tiled.num_heads = 12;
  tiled.num_kv_heads = 4;
  tiled.head_size = 96;
  tiled.dtype = tiled.kv_dtype = DType::kFloat32;
  tiled.layout = KVLayout::kSplit;
  tiled.seq_lens = {400, 70};
  tiled.query_lens = {1, 9};
  tiled.plan.num_splits = 3;
  v.push_back({"tiled-split", tiled});
  return v;
}

// The same problem on device 1 (current device 0) gives the oracle's answer and the very bits
// it gives on device 0, through plan/run and through the one-call convenience path (which
// allocates its own workspace: on the tensors' device, not the current one).
TEST(CudaMultiDevice, EveryKernelFollowsTheTensorsDevice) {
  PA_SKIP_WITHOUT_TWO_GPUS();
  PA_ASSERT_OK(cuda::testsupport::set_device(0));
  for (const auto& [name, spec0] : kernel_specs()) {
    SCOPED_TRACE(name);
    auto on0 = Problem::make(spec0);
    ASSERT_TRUE(on0.ok()) << on0.status().to_string();
    ProblemSpec spec1 = spec0;
    spec1.device = 1;
    auto on1 = Problem::make(spec1);
    ASSERT_TRUE(on1.ok()) << on1.status().to_string();
    PA_ASSERT_OK((*on0)->plan());
    PA_ASSERT_OK((*on1)->plan());
    EXPECT_EQ(cuda::testsupport::current_device(), 0);
    PA_ASSERT_OK((*on0)->run());
    PA_ASSERT_OK((*on1)->run());
    EXPECT_EQ(cuda::testsupport::current_device(), 0) << "run_attention changed the device";
    PA_ASSERT_OK(cuda::device_synchronize(0));
    PA_ASSERT_OK(cuda::device_synchronize(1));
    EXPECT_EQ((*on1)->check_against_oracle(), "");
    const auto out1 = (*on1)->out_bytes();
    const auto lse1 = (*on1)->lse_bytes();
    EXPECT_TRUE(out1 == (*on0)->out_bytes()) << "device 1 and device 0 outputs differ";
    EXPECT_TRUE(lse1 == (*on0)->lse_bytes()) << "device 1 and device 0 LSEs differ";

    PA_ASSERT_OK((*on1)->poison_outputs());
    PA_ASSERT_OK((*on1)->run_convenience());
    EXPECT_EQ(cuda::testsupport::current_device(), 0) << "paged_attention changed the device";
    EXPECT_TRUE((*on1)->out_bytes() == out1) << "paged_attention differs from plan/run";
    EXPECT_TRUE((*on1)->lse_bytes() == lse1) << "paged_attention differs from plan/run";
  }
}

// The shared harness on device 1 (current device 0): write_kv into a NaN-poisoned cache, the
// plan and run, every guard region, determinism, for a slice of the matrix that touches every
// kernel family and fault class.
TEST(CudaMultiDevice, SharedCasesOnTheSecondDevice) {
  PA_SKIP_WITHOUT_TWO_GPUS();
  PA_ASSERT_OK(cuda::testsupport::set_device(0));
  const auto cases = testing::select_cases(
      testing::matrix_cases(Device::cuda(1), /*quick=*/true),
      "*dsmall1,*dsmall4,*dmma1,*dmma3,*dmmamany,*dpair1,*dpair6,*zeroq,*longprefill,*nan1,*nan7,"
      "*manyseqs,*win1");
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(c.device, Device::cuda(1));
    const testing::CaseResult r = testing::run_case(c);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_TRUE(r.writer_exact) << r.detail;
    EXPECT_TRUE(r.pass) << r.detail;
    EXPECT_EQ(cuda::testsupport::current_device(), 0);
  }
}

// A device index past the machine's devices is an error, not a launch on some other device.
TEST(CudaMultiDevice, DeviceIndexPastTheLastDeviceIsRejected) {
  PA_SKIP_WITHOUT_GPU();
  ProblemSpec spec;
  spec.device = cuda::testsupport::device_count();
  auto pr = Problem::make(spec);
  EXPECT_FALSE(pr.ok()) << "allocating on device " << spec.device << " succeeded";
  auto info = query_device(Device::cuda(cuda::testsupport::device_count()));
  EXPECT_FALSE(info.ok());
}

}  // namespace
}  // namespace pagedattn::cudatest
