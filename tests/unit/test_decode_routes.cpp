// Which kernel the named verify/test cases reach on an H200 (host selection rules only, on a
// synthetic device): a case meant for a kernel path that silently lands on another tests
// nothing. Split from test_decode_select.cpp (the decode fast path's split choice).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/cuda/decode/decode_mma.h"
#include "src/cuda/prefill/prefill_mma.h"
#include "src/testing/harness.h"
#include "tests/unit/synthetic_device.h"

namespace pagedattn::cuda {
namespace {

constexpr std::int64_t kH200Smem = testing::kH200SharedMemoryPerBlock;

DeviceInfo synthetic_h200() {
  return testing::synthetic_cuda_device(kH200Smem, testing::kH200Units, 9);
}
/// The kernel a named case reaches on a synthetic H200 (host rules only; the case's tensors
/// are dense and 16-byte aligned unless it pads them): "dmma <mode> <splits>" for the decode
/// fast path (mode small, cluster, worklist, merge or single; " pair" for head-64 pairs),
/// "prefill" with "+dmma <mode> <splits>" when the decode rows take the fast path, else
/// "tiled <tile> <splits>".
std::string h200_route(const testing::CaseConfig& c) {
  ProblemDesc p;
  p.device = Device::cuda(0);
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_size = c.head_size;
  p.q_dtype = c.dtype;
  p.cache_dtype = c.kv_dtype;
  p.layout = c.layout;
  p.block_size = c.block_size;
  p.num_blocks = 1 << 20;
  p.access = c.page_pad != 0 ? CacheAccess::kStrided : CacheAccess::kNative;
  p.softcap = c.softcap;
  p.sliding_window = c.sliding_window;
  p.alibi = c.alibi;
  p.sinks = c.sinks;
  BatchSummary& b = p.batch;
  b.num_seqs = static_cast<int>(c.seq_lens.size());
  for (std::size_t i = 0; i < c.seq_lens.size(); ++i) {
    const int q = c.query_lens[i];
    b.num_tokens += q;
    b.num_decode_seqs += q == 1;
    b.num_prefill_seqs += q > 1;
    b.num_empty_seqs += q == 0;
    if (q > 0) b.total_kv_tokens += c.seq_lens[i];
    b.max_seq_len = std::max(b.max_seq_len, c.seq_lens[i]);
    b.max_query_len = std::max(b.max_query_len, q);
  }
  const DeviceInfo h200 = synthetic_h200();
  const bool aligned = c.page_pad % (is_fp8(c.kv_dtype) ? 16 : 8) == 0;
  const bool adjacent = c.layout == KVLayout::kNHD;
  auto dmma = [&](int forced) {
    const DecodeMmaConfig d = decode_mma_config(p, h200, forced, adjacent);
    const char* mode = decode_mma_work_list(d.num_splits, b.num_seqs) ? "worklist"
                       : d.small_kernel                                ? "small"
                       : d.cluster_merge                               ? "cluster"
                       : d.num_splits > 1                              ? "merge"
                                                                       : "single";
    return "dmma " + std::string(mode) + " " + std::to_string(d.num_splits) +
           (d.pair_heads ? " pair" : "");
  };
  const bool forced = c.plan.num_splits > 0 || c.plan.tile_tokens > 0;
  if (aligned && c.plan.tile_tokens == 0 && decode_mma_supported(p, nullptr))
    return dmma(c.plan.num_splits);
  if (aligned && !forced && prefill_mma_supported(p, kH200Smem, nullptr))
    return decode_mma_rows_supported(p, nullptr) ? "prefill +" + dmma(0) : "prefill";
  auto t = tiled_choose(p, h200, c.plan);
  if (!t.ok()) return t.status().message();
  return "tiled " + std::to_string(t->tile_tokens) + " " + std::to_string(t->num_splits);
}

// The fp8 and head-256 decode cases (dfp8*, dh256_*) run on the pipelined decode kernel on an
// H200 (never the small-call kernel or head pairs, which read 16-bit caches of head 64/128
// only), in more than one merge mode.
TEST(MatrixCases, Fp8DecodeCasesTakeThePipelinedDecodeKernel) {
  int n = 0;
  std::map<std::string, int> modes;
  for (const auto& c : testing::matrix_cases(Device::cuda(0))) {
    if (c.tag.rfind("dfp8", 0) != 0 && c.tag.rfind("dh256_", 0) != 0) continue;
    ++n;
    const std::string route = h200_route(c);
    EXPECT_EQ(route.rfind("dmma ", 0), 0u) << c.name << ": " << route;
    EXPECT_EQ(route.find("small"), std::string::npos) << c.name;
    EXPECT_EQ(route.find("pair"), std::string::npos) << c.name;
    modes[route.substr(0, route.rfind(' '))]++;
  }
  EXPECT_EQ(n, 15);
  EXPECT_GE(modes.size(), 2u);
}

// The decode cases of the heads between and head 512 (dhmid_*) run on the pipelined decode kernel of their
// own head size on an H200, in more than one merge mode.
TEST(MatrixCases, MidHeadDecodeCasesTakeTheirInstance) {
  int n = 0;
  std::map<std::string, int> modes;
  std::map<int, int> heads;
  for (const auto& c : testing::matrix_cases(Device::cuda(0))) {
    if (c.tag.rfind("dhmid_", 0) != 0) continue;
    ++n;
    const std::string route = h200_route(c);
    EXPECT_EQ(route.rfind("dmma ", 0), 0u) << c.name << ": " << route;
    EXPECT_EQ(route.find("small"), std::string::npos) << c.name;
    EXPECT_EQ(route.find("pair"), std::string::npos) << c.name;
    modes[route.substr(0, route.rfind(' '))]++;
    heads[c.head_size]++;
  }
  EXPECT_EQ(n, 13);
  EXPECT_EQ(heads.size(), 6u);  // and head 128 in the split layout at block size 1
  EXPECT_GE(modes.size(), 2u);
}

// The edge cases of src/testing/cases.cpp (kernel boundaries the CPU cannot show) reach, on an
// H200, the kernel and mode each was written for: a change of the selection rules that moves
// one elsewhere must move the case too.
TEST(MatrixCases, EdgeCasesReachTheirKernelsOnAnH200) {
  const std::pair<const char*, const char*> expected[] = {
      {"edgepf1", "prefill +dmma small 5"},
      {"edgepf2", "prefill +dmma small 2"},
      {"edgepf3", "prefill"},  // GQA 48: the decode row runs on the prefill kernel too
      {"edgepf4", "prefill"},  // GQA 80
      {"edgepf5", "prefill +dmma small 2"},
      {"edgepf6", "prefill +dmma cluster 2"},
      {"edgepf7", "prefill +dmma single 1"},
      {"edgepf8", "prefill +dmma worklist 17"},
      {"edgedec1", "dmma worklist 11"},
      {"edgedec2", "dmma worklist 16"},
      {"edgedec3", "dmma cluster 2"},
      {"edgedec4", "dmma cluster 3"},
      {"edgedec5", "dmma small 2"},
      {"edgedec6", "dmma small 7"},
      {"edgedec7", "dmma small 5"},
      {"edgedec8", "dmma cluster 7"},
      {"edgedec9", "dmma cluster 2"},
      {"edgedec10", "dmma cluster 4"},
      {"edgedec11", "dmma single 1"},
      {"edgetl1", "tiled 40 1"},
      {"edgetl2", "tiled 64 1"},
      {"edgetl3", "tiled 64 3"},
      {"edgetl4", "tiled 5 3"},
      {"edgetl5", "tiled 33 1"},
      {"edgetl6", "tiled 64 1"},
  };
  const auto cases = testing::matrix_cases(Device::cuda(0));
  for (const auto& [tag, route] : expected) {
    const auto it = std::find_if(cases.begin(), cases.end(),
                                 [&](const testing::CaseConfig& c) { return c.tag == tag; });
    ASSERT_NE(it, cases.end()) << tag;
    EXPECT_EQ(h200_route(*it), route) << it->name;
    if (std::string(tag).rfind("edgepf", 0) == 0 && std::string(tag) != "edgepf7") {
      // Row tiles that start inside a token's head group (edgepf7 is about block 8).
      const int gqa = it->num_heads / it->num_kv_heads;
      EXPECT_NE(64 % gqa, 0) << it->name;
    }
  }
  // edgedec8: 7 splits of one head-64 row (GQA 1): the cluster's last CTA combines no output
  // element, only the LSEs.
  EXPECT_GE(6 * decode_cluster_share(64, 1, 7), 64);
}

}  // namespace
}  // namespace pagedattn::cuda


namespace pagedattn::cuda {
namespace {

// The million-token cases (src/testing/cases_long.cpp) reach, on an H200, each kernel whose
// fp32 running state walks 2^20 keys: the tiled kernel in one split, the decode fast path in
// one and two splits, the tensor-core prefill kernel (which never splits the keys).
TEST(MatrixCases, LongContextCasesReachEveryKernelOnAnH200) {
  const std::map<std::string, std::string> expected = {
      {"nhd_bs16_h32_q2kv1_fp32_len1m", "tiled 64 128"},
      {"nhd_bs16_h64_q4kv1_fp16_len1m", "dmma merge 512"},
      {"hnd_bs16_h64_q2kv1_bf16_len1m", "dmma merge 512"},
      {"nhd_bs16_h32_q1kv1_fp32_len1mprefill", "tiled 64 128"},
      {"nhd_bs16_h64_q1kv1_fp16_len1mprefill", "prefill"},
      {"hnd_bs16_h64_q1kv1_bf16_len1mprefill", "prefill"},
      {"nhd_bs16_h32_q2kv1_fp32_splits1_len1m", "tiled 64 1"},
      {"nhd_bs16_h64_q4kv1_fp16_splits1_len1m", "dmma single 1"},
      {"hnd_bs16_h64_q2kv1_bf16_splits2_len1m", "dmma cluster 2"},
      {"nhd_bs16_h32_q1kv1_fp32_splits1_len1mprefill", "tiled 64 1"},
      {"nhd_bs16_h64_q4kv1_fp32_len1m", "tiled 64 128"},
      {"nhd_bs16_h64_q4kv1_fp32_splits1_len1m", "tiled 64 1"},
  };
  std::map<std::string, std::string> routes;
  for (const auto& c : testing::matrix_cases(Device::cuda(0))) {
    if (c.tag != "len1m" && c.tag != "len1mprefill") continue;
    EXPECT_EQ(testing::longest_row_keys(c), 1 << 20) << c.name;
    routes[c.name] = h200_route(c);
  }
  EXPECT_EQ(routes, expected);
  // The CPU gets the same cases less the forced splits, which its backend ignores.
  int cpu = 0;
  for (const auto& c : testing::matrix_cases(Device::cpu()))
    if (c.tag == "len1m" || c.tag == "len1mprefill") {
      EXPECT_EQ(c.plan.num_splits, 0) << c.name;
      EXPECT_EQ(routes.count(c.name), 1u) << c.name;
      ++cpu;
    }
  EXPECT_EQ(cpu, 6);
  // None in the compute-sanitizer subset.
  for (const auto& c : testing::matrix_cases(Device::cuda(0), /*quick=*/true))
    EXPECT_EQ(c.tag.rfind("len1m", 0), std::string::npos) << c.name;
}

}  // namespace
}  // namespace pagedattn::cuda
