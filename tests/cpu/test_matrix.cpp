// The CPU correctness matrix (DESIGN.md §4): every case of matrix_cases(cpu) — pairwise
// coverage of all axes plus the named fault-class cases — run through write_kv + plan/run on
// the CPU backend and compared with the oracle. Test names are the case names, so
// `--gtest_filter='*nhd_bs544*'` selects cases the way `pagedattn verify --cases` does.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "src/testing/harness.h"

namespace pagedattn::testing {

/// GoogleTest prints a parameter by its case name (found by ADL), not as raw bytes.
void PrintTo(const CaseConfig& config, std::ostream* os) { *os << config.name; }

namespace {

class CpuMatrix : public ::testing::TestWithParam<CaseConfig> {};

TEST_P(CpuMatrix, MatchesOracle) {
  const CaseConfig& config = GetParam();
  const CaseResult result = run_case(config);
  ASSERT_TRUE(result.status.ok()) << result.status.to_string();
  // The comparison really looked at data: every case has at least one output row, except the
  // all-skipped batch.
  if (config.tag != "allzeroq") {
    EXPECT_GT(result.elements_checked, 0);
  }
  EXPECT_TRUE(result.writer_exact) << result.detail;
  EXPECT_TRUE(result.pass) << result.detail << "\n  kernel " << to_string(result.choice.kernel)
                           << ", tile " << result.choice.tile_tokens << ", splits "
                           << result.choice.num_splits << ", worst ratio " << result.worst_ratio;
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuMatrix, ::testing::ValuesIn(matrix_cases(Device::cpu())),
                         [](const ::testing::TestParamInfo<CaseConfig>& param_info) {
                           return param_info.param.name;
                         });

// The quick (sanitizer) subset must run too, and its names must not collide with each other.
class CpuQuick : public ::testing::TestWithParam<CaseConfig> {};

TEST_P(CpuQuick, MatchesOracle) {
  const CaseResult result = run_case(GetParam());
  ASSERT_TRUE(result.status.ok()) << result.status.to_string();
  EXPECT_TRUE(result.pass) << result.detail;
}

INSTANTIATE_TEST_SUITE_P(Quick, CpuQuick,
                         ::testing::ValuesIn(matrix_cases(Device::cpu(), /*quick=*/true)),
                         [](const ::testing::TestParamInfo<CaseConfig>& param_info) {
                           return param_info.param.name;
                         });

}  // namespace
}  // namespace pagedattn::testing
