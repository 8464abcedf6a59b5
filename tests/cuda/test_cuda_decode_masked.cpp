// The decode fast path's masked heads (decode_mma_instance_head, decode_mma_maskable): a head
// without an instance of its own runs on the next larger maskable one, in a masked instance
// of its own that leaves the dims past it out (16-bit 144, 160, 176 on head 192 and 208, 224, 240 on head 256; fp8
// 80, 96, 112 on head 128 and 144-240 on head 256), against the oracle through the shared
// harness (cache written by write_kv into NaN-poisoned memory: a kernel that copies a chunk
// past the head reads the next head's values or NaN padding, and one that lets a stale key
// chunk into the scores gets NaN or a wrong score): every layout, both query dtypes, GQA 1-16
// (1-8 on the instances above 128), block sizes that do and do not divide the 64-token tile,
// boundary lengths, the merge modes (one split, merge kernel at the head's own partial
// stride, work list, cluster merge) and the score modifiers. The plan's explanation must name
// the instance and the masking. Without a GPU every test skips.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "src/cuda/decode/decode_mma.h"
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

std::vector<CaseConfig> masked_cases() {
  std::vector<CaseConfig> out;
  int n = 0;
  struct HeadKv {
    int head;
    DType kv;  // kBFloat16: the query's own dtype (16-bit cache)
  };
  std::vector<HeadKv> heads;
  for (int head : {144, 160, 176, 208, 224, 240}) heads.push_back({head, DType::kBFloat16});
  for (int head : {80, 96, 112, 144, 192, 240})
    for (DType kv : {DType::kFloat8E4M3, DType::kFloat8E5M2}) heads.push_back({head, kv});
  for (const HeadKv& hk : heads)
    for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kSplit}) {
      const bool f8 = is_fp8(hk.kv);
      const std::vector<int> blocks = layout == KVLayout::kSplit
                                          ? (f8 ? std::vector<int>{16, 32} : std::vector<int>{1, 8, 16, 32})
                                          : std::vector<int>{1, 7, 16, 32};
      const int inst = cuda::decode_mma_instance_head(hk.head, f8 ? 1 : 2);
      const std::vector<int> gqas = inst > 128 ? std::vector<int>{1, 3, 4, 8}
                                               : std::vector<int>{1, 3, 4, 8, 16};
      for (int i = 0; i < (f8 ? 1 : 2); ++i) {
        const int gqa = gqas[static_cast<std::size_t>(n + 2 * i) % gqas.size()];
        CaseConfig c;
        c.device = Device::cuda();
        c.layout = layout;
        c.num_kv_heads = 2;
        c.num_heads = 2 * gqa;
        c.head_size = hk.head;
        c.block_size = blocks[static_cast<std::size_t>(n + i) % blocks.size()];
        c.dtype = (n + i) % 2 ? DType::kFloat16 : DType::kBFloat16;
        c.kv_dtype = f8 ? hk.kv : c.dtype;
        if (f8) {  // powers of two other than 1: a scale applied twice or not at all fails
          c.k_scale = 0.125f;
          c.v_scale = 0.03125f;
        }
        c.seq_lens = {1, 15, 16, 17, 63, 64, 65, 128, 129, 700, 2500, 40};
        c.query_lens = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
        c.seed = 8800 + static_cast<std::uint64_t>(n);
        switch (n % 6) {
          case 1: c.plan.num_splits = 3; break;  // the merge kernel at the head's stride
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
  // One sequence alone (the one-wave cut: cluster merge, whose shares follow the head's own
  // outputs) and a long one (many splits, a work list).
  for (const HeadKv& hk : {HeadKv{80, DType::kFloat8E4M3}, HeadKv{192, DType::kFloat8E5M2},
                           HeadKv{160, DType::kBFloat16}, HeadKv{224, DType::kBFloat16}})
    for (KVLayout layout : {KVLayout::kNHD, KVLayout::kSplit})
      for (int len : {3000, 40000}) {
        CaseConfig c;
        c.device = Device::cuda();
        c.layout = layout;
        c.num_heads = 32;
        c.num_kv_heads = 8;
        c.head_size = hk.head;
        c.dtype = DType::kBFloat16;
        c.kv_dtype = hk.kv;
        if (is_fp8(hk.kv)) {
          c.k_scale = 0.25f;
          c.v_scale = 0.5f;
        }
        c.seq_lens = {len};
        c.query_lens = {1};
        c.seed = 91 + static_cast<std::uint64_t>(hk.head);
        out.push_back(c);
      }
  return out;
}

class CudaDecodeMasked : public ::testing::TestWithParam<CaseConfig> {};

TEST_P(CudaDecodeMasked, MatchesOracleOnTheNextLargerInstance) {
  PA_SKIP_WITHOUT_GPU();
  const CaseConfig& c = GetParam();
  CaseResult result;
  ASSERT_NO_FATAL_FAILURE(expect_on_decode_fast_path(c, &result));
  const int inst = cuda::decode_mma_instance_head(c.head_size, is_fp8(c.kv_dtype) ? 1 : 2);
  ASSERT_GT(inst, c.head_size);
  const std::string& why = result.choice.reason;
  EXPECT_NE(why.find("head-" + std::to_string(inst) + " instance"), std::string::npos) << why;
  EXPECT_NE(why.find("head " + std::to_string(c.head_size) + " masked on it"), std::string::npos)
      << why;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaDecodeMasked, ::testing::ValuesIn(masked_cases()),
                         indexed_case_name);

}  // namespace
}  // namespace pagedattn::cudatest
