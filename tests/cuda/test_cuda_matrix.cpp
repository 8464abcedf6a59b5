// The GPU correctness matrix (DESIGN.md §4): every case of matrix_cases(cuda) through the shared
// harness (write_kv + plan/run on the GPU, compared with the oracle, writer compared bitwise
// with the writer oracle, guard regions checked). The `Sanitize*` instantiation runs the quick
// subset (every kernel instantiation and boundary class, small sizes) and is what
// scripts/gpu_check.sh runs under compute-sanitizer: `--gtest_filter='Sanitize*'`.
// Without a GPU every test skips.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "src/testing/harness.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagedattn::testing {
/// GoogleTest prints a parameter by its case name (found by ADL), not as raw bytes.
void PrintTo(const CaseConfig& config, std::ostream* os) { *os << config.name; }
}  // namespace pagedattn::testing

namespace pagedattn::cudatest {
namespace {

using testing::CaseConfig;
using testing::CaseResult;

void expect_case_passes(const CaseConfig& config) {
  const CaseResult result = testing::run_case(config);
  ASSERT_TRUE(result.status.ok()) << result.status.to_string();
  if (config.tag != "allzeroq") {
    EXPECT_GT(result.elements_checked, 0);
  }
  EXPECT_TRUE(result.writer_exact) << result.detail;
  EXPECT_TRUE(result.pass) << result.detail << "\n  kernel " << to_string(result.choice.kernel)
                           << ", tile " << result.choice.tile_tokens << ", splits "
                           << result.choice.num_splits << ", smem "
                           << result.choice.shared_memory_bytes << ", worst ratio "
                           << result.worst_ratio << "\n  " << result.choice.reason;
}

std::string case_param_name(const ::testing::TestParamInfo<CaseConfig>& info) {
  return info.param.name.empty() ? testing::case_name(info.param) : info.param.name;
}

class CudaMatrix : public ::testing::TestWithParam<CaseConfig> {};

TEST_P(CudaMatrix, MatchesOracle) {
  PA_SKIP_WITHOUT_GPU();
  expect_case_passes(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaMatrix, ::testing::ValuesIn(testing::matrix_cases(Device::cuda())),
                         case_param_name);

/// The compute-sanitizer subset (memcheck: all of it; racecheck/synccheck: a slice).
class SanitizeQuick : public ::testing::TestWithParam<CaseConfig> {};

TEST_P(SanitizeQuick, MatchesOracle) {
  PA_SKIP_WITHOUT_GPU();
  expect_case_passes(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Sanitize, SanitizeQuick,
                         ::testing::ValuesIn(testing::matrix_cases(Device::cuda(), /*quick=*/true)),
                         case_param_name);

}  // namespace
}  // namespace pagedattn::cudatest
