// The decode fast path's head sizes between 64, 128 and 256 and head 512
// (decode_mma_h<HEAD>.cu: 80, 96, 112, 192 and 512 with 16-bit caches; 512 with 2 warps and
// 32-token tiles) against the oracle through the shared harness (cache written
// by write_kv into NaN-poisoned memory; a kernel that reads a chunk past the head, a tail token
// past seq_len or another block's padding gets NaN into its output): every layout, fp16 and
// bf16, GQA 1/3/4/8 (and 16 for heads up to 112), block sizes that do and do not divide the
// 64-token tile, boundary lengths (1, the 16-token warp rows, the 64-token tiles, split edges,
// long), the merge modes (one split, merge kernel, work list, cluster merge) and the score
// modifiers (window, softcap, ALiBi, sinks, LSE); a batch of more than 65535 sequences (the
// launches of at most 65535, decode_mma_run) for a new head and for head 128. Without a GPU
// every test skips.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "src/testing/harness.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagedattn::testing {
/// Defined in test_cuda_matrix.cpp: GoogleTest prints a case by its name.
void PrintTo(const CaseConfig& config, std::ostream* os);
}  // namespace pagedattn::testing

namespace pagedattn::cudatest {
namespace {

using testing::CaseConfig;
using testing::CaseResult;

std::vector<CaseConfig> head_cases() {
  std::vector<CaseConfig> out;
  int n = 0;
  for (int head : {80, 96, 112, 192, 512})
    for (DType q : {DType::kBFloat16, DType::kFloat16})
      for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kSplit}) {
        const std::vector<int> blocks = layout == KVLayout::kSplit ? std::vector<int>{1, 8, 16, 32}
                                                                   : std::vector<int>{1, 7, 16, 32};
        // GQA 16 needs two column tiles (heads up to 112; 192 takes at most 8).
        const std::vector<int> gqas = head > 128 ? std::vector<int>{1, 3, 4, 8}
                                                 : std::vector<int>{1, 3, 4, 8, 16};
        for (int i = 0; i < 3; ++i) {
          const int gqa = gqas[static_cast<std::size_t>(n + 2 * i) % gqas.size()];
          CaseConfig c;
          c.device = Device::cuda();
          c.layout = layout;
          c.num_kv_heads = 2;
          c.num_heads = 2 * gqa;
          c.head_size = head;
          c.block_size = blocks[static_cast<std::size_t>(n + i) % blocks.size()];
          c.dtype = q;
          c.kv_dtype = q;
          // Warp-row and tile edges, one skipped sequence (query_len 0), and long ones that
          // split (the merge kernel or a work list).
          c.seq_lens = {1, 15, 16, 17, 63, 64, 65, 128, 129, 700, 2500, 40};
          c.query_lens = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
          c.seed = 7000 + static_cast<std::uint64_t>(n);
          switch (n % 6) {
            case 1: c.plan.num_splits = 3; break;  // split edges inside the tiles
            case 2: c.sliding_window = 100; break;
            case 3: c.softcap = 30.0f; c.alibi = true; break;
            case 4: c.sinks = true; c.plan.num_splits = 2; break;
            case 5: c.sliding_window = 64; c.sinks = true; c.lse = false; break;
            default: break;
          }
          out.push_back(c);
          ++n;
        }
      }
  // One sequence alone: the latency-bound one-wave cut (cluster merge of 2-8 splits), and a
  // long one (many splits through the merge kernel).
  for (int head : {80, 96, 112, 192, 512})
    for (KVLayout layout : {KVLayout::kNHD, KVLayout::kSplit})
      for (int len : {3000, head == 512 ? 12000 : 40000}) {
        CaseConfig c;
        c.device = Device::cuda();
        c.layout = layout;
        c.num_heads = 32;
        c.num_kv_heads = 8;
        c.head_size = head;
        c.dtype = DType::kBFloat16;
        c.kv_dtype = DType::kBFloat16;
        c.seq_lens = {len};
        c.query_lens = {1};
        c.seed = 77 + static_cast<std::uint64_t>(head);
        out.push_back(c);
      }
  return out;
}

/// Split layout at block size 1 (16-bit caches, every head size of the fast path): run as
/// nhd rows (decode_mma_split_as_rows), also with padded pages (which change the block
/// stride only) and the merge modes.
std::vector<CaseConfig> split_bs1_cases() {
  std::vector<CaseConfig> out;
  int n = 0;
  for (int head : {64, 80, 128, 192, 256, 512})
    for (DType q : {DType::kBFloat16, DType::kFloat16}) {
      CaseConfig c;
      c.device = Device::cuda();
      c.layout = KVLayout::kSplit;
      c.block_size = 1;
      c.num_kv_heads = 2;
      c.num_heads = 2 * (head > 128 ? 8 : n % 2 ? 16 : 4);
      c.head_size = head;
      c.dtype = q;
      c.kv_dtype = q;
      c.seq_lens = {1, 17, 64, 65, 700, 3000, 40};
      c.query_lens = {1, 1, 1, 1, 1, 1, 0};
      c.page_pad = n % 3 == 1 ? 8 : 0;
      c.seed = 9100 + static_cast<std::uint64_t>(n);
      if (n % 4 == 2) c.plan.num_splits = 3;
      if (n % 4 == 3) { c.sliding_window = 100; c.sinks = true; }
      out.push_back(c);
      ++n;
    }
  return out;
}

void expect_decode_path_matches(const CaseConfig& config, std::string* reason = nullptr) {
  CaseResult result;
  expect_on_decode_fast_path(config, &result);
  if (reason) *reason = result.choice.reason;
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_NE(result.choice.reason.find("head-" + std::to_string(config.head_size) + " instance"),
            std::string::npos)
      << result.choice.reason;
}

class CudaDecodeHeads : public ::testing::TestWithParam<CaseConfig> {};

TEST_P(CudaDecodeHeads, MatchesOracleOnTheDecodeFastPath) {
  PA_SKIP_WITHOUT_GPU();
  expect_decode_path_matches(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaDecodeHeads, ::testing::ValuesIn(head_cases()), indexed_case_name);

class CudaDecodeSplitBs1 : public ::testing::TestWithParam<CaseConfig> {};

TEST_P(CudaDecodeSplitBs1, RunsAsRowsAndMatchesTheOracle) {
  PA_SKIP_WITHOUT_GPU();
  std::string why;
  ASSERT_NO_FATAL_FAILURE(expect_decode_path_matches(GetParam(), &why));
  EXPECT_NE(why.find("split layout at block size 1 run by the nhd kernel"), std::string::npos)
      << why;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaDecodeSplitBs1, ::testing::ValuesIn(split_bs1_cases()),
                         indexed_case_name);

/// More than 65535 sequences: gridDim.z of the split kernel and gridDim.y of the merge kernel
/// stop at 65535, so decode_mma_run launches the batch in parts with offset metadata and
/// partial results. Most sequences are short (the oracle stays fast); every 997th is long
/// enough for two splits, so that parts past the first merge partial results too.
class CudaDecodeManySequences : public ::testing::TestWithParam<int> {};

TEST_P(CudaDecodeManySequences, MoreThan65535SequencesMatchTheOracle) {
  PA_SKIP_WITHOUT_GPU();
  CaseConfig c;
  c.device = Device::cuda();
  c.layout = GetParam() == 80 ? KVLayout::kNHD : KVLayout::kSplit;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_size = GetParam();
  c.block_size = 16;
  c.dtype = DType::kBFloat16;
  c.kv_dtype = DType::kBFloat16;
  c.plan.num_splits = 2;
  c.seed = 65536;
  c.tag = "many";
  const int n = 65535 + 1500;
  for (int s = 0; s < n; ++s) {
    c.seq_lens.push_back(s % 997 == 0 ? 200 : 1 + s % 5);
    c.query_lens.push_back(1);
  }
  c.seq_lens[n - 1] = 190;  // the last sequence of the last part splits
  ASSERT_NO_FATAL_FAILURE(expect_decode_path_matches(c));
}

INSTANTIATE_TEST_SUITE_P(Heads, CudaDecodeManySequences, ::testing::Values(80, 128),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "h" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace pagedattn::cudatest
