// The caller's workspace (run_attention): a serving engine carves it out of a larger buffer.
// An address off kWorkspaceAlignment is an argument error, never a misaligned-address fault
// (which would poison the CUDA context for every later call of the process); an aligned offset
// into a larger allocation works.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace pagedattn::cudatest {
namespace {

TEST(CudaWorkspace, MisalignedWorkspaceIsAnErrorAndAlignedOffsetsWork) {
  PA_SKIP_WITHOUT_GPU();
  std::vector<std::pair<std::string, ProblemSpec>> specs;
  ProblemSpec tiled;  // the tiled kernel with forced splits: float2 stores into the partials
  tiled.num_heads = 8;
  tiled.num_kv_heads = 2;
  tiled.head_size = 96;
  tiled.dtype = tiled.kv_dtype = DType::kFloat32;
  tiled.seq_lens = {700, 33};
  tiled.query_lens = {3, 1};
  tiled.plan.num_splits = 4;
  specs.push_back({"tiled-splits", tiled});
  ProblemSpec decode;  // the decode fast path's merge: float4 loads of the partials
  decode.num_heads = 32;
  decode.num_kv_heads = 8;
  decode.head_size = 128;
  decode.dtype = decode.kv_dtype = DType::kBFloat16;
  decode.seq_lens = {5000, 17, 300};
  decode.query_lens = {1, 1, 1};
  decode.plan.num_splits = 12;
  specs.push_back({"decode-splits", decode});
  for (const auto& [name, spec] : specs) {
    auto p = Problem::make(spec);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().to_string();
    Problem& pr = **p;
    PA_ASSERT_OK(pr.plan());
    const std::size_t need = pr.attention_plan().workspace_bytes();
    ASSERT_GT(need, 0u) << name;
    DeviceMem big;
    PA_ASSERT_OK(big.alloc(need + 256, spec.device));
    for (std::size_t off : {std::size_t{4}, std::size_t{8}, std::size_t{12}}) {
      const Status st = pr.run_with_workspace(big.at(off), need);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << name << " offset " << off << ": "
                                                         << st.to_string();
      EXPECT_NE(st.message().find("multiple of 16"), std::string::npos) << st.message();
    }
    PA_ASSERT_OK(pr.poison_outputs());
    PA_ASSERT_OK(pr.run_with_workspace(big.at(kWorkspaceAlignment), need));
    PA_ASSERT_OK(cuda::device_synchronize(spec.device));
    EXPECT_EQ(pr.check_against_oracle(), "") << name;
  }
}

}  // namespace
}  // namespace pagedattn::cudatest
