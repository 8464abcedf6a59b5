// GPU tests of the tensor-core prefill kernel (src/cuda/prefill/prefill_mma.h). Every case asserts that
// the plan routes the prefill rows to that kernel (KernelChoice::prefill_rows_mma), then checks
// it against the oracle through the shared harness: NaN-poisoned cache memory (block tails,
// unused blocks, page padding), random block tables from a larger pool, the query sized
// exactly (its last row ends the allocation), guard regions around every written buffer, and
// a second run that must give the same bits.
//
//  - PrefillMma/CudaPrefillMma.*: head 64 and 128, fp16 and bf16, GQA 1/4/5/7/8/16/64 and
//    MQA, block sizes 1/16/544/2048, layouts split/nhd/hnd with padded pages, chunk lengths
//    2/15/64/65/200/1000 with and without a cached prefix, window / softcap / ALiBi / sinks /
//    LSE off, mixed batches with decodes and zero-length sequences, strided activations;
//  - SanitizePrefill/SanitizePrefillMma.* and SanitizePrefillMmaEdges.* (run under
//    compute-sanitizer by scripts/gpu_check.sh): small cases touching every instantiation
//    (dtype x head x split/other layout) and boundary class, the query ending at the end of a
//    2 MiB allocation, and the fallbacks (unaligned strides at plan time, an unaligned base
//    pointer at run time);
//  - CudaPrefillMmaGraph.*: CUDA-graph capture + replay equals eager bit for bit.
// Without a GPU every test skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "src/testing/harness.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagedattn::testing {
/// Defined in test_cuda_matrix.cpp: GoogleTest prints a case by its name, not as raw bytes.
void PrintTo(const CaseConfig& config, std::ostream* os);
}  // namespace pagedattn::testing

namespace pagedattn::cudatest {
namespace {

using testing::CaseConfig;

const DType f16 = DType::kFloat16;
const DType b16 = DType::kBFloat16;

/// A case for the prefill kernel: (seq_len, query_len) pairs, every other field default.
CaseConfig pcase(KVLayout layout, int head, DType dt, int heads, int kv_heads, int bs,
                 std::vector<std::pair<int, int>> seqs, const std::string& tag) {
  CaseConfig c;
  c.device = Device::cuda();
  c.layout = layout;
  c.head_size = head;
  c.dtype = c.kv_dtype = dt;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.block_size = bs;
  c.seq_lens.clear();
  c.query_lens.clear();
  for (const auto& [s, q] : seqs) {
    c.seq_lens.push_back(s);
    c.query_lens.push_back(q);
  }
  c.extra_blocks = bs >= 512 ? 1 : 3;
  // On an H200 the wgmma kernel would take most of these (test_cuda_prefill_wgmma.cpp tests
  // it): keep them on this one.
  c.plan.no_wgmma_prefill = true;
  c.tag = "pmma_" + tag;
  return c;
}

CaseConfig named(CaseConfig c) {
  std::uint64_t h = 1469598103934665603ull;
  c.name = testing::case_name(c);
  for (unsigned char ch : c.name) h = (h ^ ch) * 1099511628211ull;
  c.seed = h % 100000;
  return c;
}

std::vector<CaseConfig> prefill_cases() {
  const KVLayout split = KVLayout::kSplit, nhd = KVLayout::kNHD, hnd = KVLayout::kHND;
  std::vector<CaseConfig> v;
  auto add = [&](CaseConfig c) { v.push_back(named(std::move(c))); };

  // ---- chunk lengths 2, 15, 64, 65, 200, 1000: first chunks and chunks after a prefix, every
  // layout, head 64 and 128, fp16 and bf16.
  add(pcase(split, 128, b16, 32, 8, 16, {{2, 2}, {15, 15}, {64, 64}, {65, 65}}, "chunks_first"));
  add(pcase(nhd, 128, f16, 32, 8, 16, {{39, 2}, {115, 15}, {128, 64}, {66, 65}}, "chunks_ctx"));
  add(pcase(hnd, 64, b16, 32, 4, 544, {{200, 200}, {700, 200}, {545, 15}}, "chunk200"));
  add(pcase(nhd, 64, f16, 4, 4, 1, {{1000, 1000}}, "chunk1000_first"));
  add(pcase(split, 64, b16, 8, 2, 32, {{1300, 1000}}, "chunk1000_ctx"));
  add(pcase(hnd, 128, f16, 8, 2, 16, {{64, 2}, {129, 65}, {1000, 64}}, "chunks_ctx_hnd"));
  add(pcase(split, 128, f16, 16, 1, 2048, {{2200, 200}, {2049, 2}}, "bs2048_ctx"));
  add(pcase(nhd, 128, b16, 8, 2, 2048, {{2047, 65}, {2048, 64}, {4097, 15}}, "bs2048_edges"));
  add(pcase(split, 64, f16, 20, 4, 544, {{1145, 600}, {544, 2}, {543, 65}}, "bs544_ctx"));
  add(pcase(hnd, 64, b16, 8, 8, 1, {{65, 65}, {100, 15}}, "bs1"));

  // ---- GQA ratios: 1, 4, 5, 7, 8, 16, 64 and MQA (rows of a CTA cross query tokens)
  add(pcase(nhd, 128, b16, 8, 8, 16, {{130, 130}}, "gqa1"));
  add(pcase(hnd, 128, f16, 20, 4, 16, {{100, 100}, {80, 13}}, "gqa5"));
  add(pcase(nhd, 64, f16, 21, 3, 16, {{100, 100}, {37, 9}}, "gqa7"));
  add(pcase(split, 128, b16, 32, 4, 16, {{96, 64}, {17, 17}}, "gqa8"));
  add(pcase(hnd, 64, b16, 32, 2, 16, {{90, 45}, {200, 3}}, "gqa16"));
  add(pcase(nhd, 128, f16, 16, 1, 16, {{300, 100}}, "mqa"));
  add(pcase(split, 64, b16, 8, 1, 32, {{65, 65}, {33, 2}}, "mqa8"));
  add(pcase(hnd, 128, f16, 64, 1, 16, {{50, 10}, {300, 2}}, "gqa64"));

  // ---- features
  {
    CaseConfig c = pcase(hnd, 128, b16, 20, 4, 16, {{300, 300}, {700, 200}}, "window64");
    c.sliding_window = 64;
    add(c);
  }
  {
    CaseConfig c = pcase(nhd, 64, b16, 8, 2, 16, {{40, 40}, {100, 30}}, "window1");
    c.sliding_window = 1;
    add(c);
  }
  {
    // The window starts inside a 64-token tile and cuts through the chunk.
    CaseConfig c = pcase(split, 64, f16, 8, 2, 16, {{1000, 1000}, {250, 90}}, "window100");
    c.sliding_window = 100;
    add(c);
  }
  {
    CaseConfig c = pcase(nhd, 128, f16, 32, 8, 544, {{1100, 200}, {60, 60}}, "window_gt_chunk");
    c.sliding_window = 700;
    add(c);
  }
  {
    CaseConfig c = pcase(hnd, 128, f16, 32, 4, 16, {{65, 65}, {130, 65}}, "softcap");
    c.softcap = 5.0f;
    add(c);
  }
  {
    CaseConfig c = pcase(nhd, 64, b16, 20, 4, 16, {{200, 200}, {250, 50}}, "alibi");
    c.alibi = true;
    add(c);
  }
  {
    CaseConfig c = pcase(split, 128, b16, 32, 8, 16, {{64, 64}, {100, 36}}, "sinks");
    c.sinks = true;
    add(c);
  }
  {
    CaseConfig c = pcase(hnd, 64, f16, 8, 8, 16, {{100, 100}, {20, 5}}, "nolse");
    c.lse = false;
    add(c);
  }
  {
    CaseConfig c =
        pcase(nhd, 128, b16, 32, 8, 544, {{700, 65}, {545, 200}, {3, 2}, {1, 1}}, "allfeat");
    c.sliding_window = 300;
    c.softcap = 30.0f;
    c.alibi = true;
    c.sinks = true;
    add(c);
  }

  // ---- padded pages (block stride > block size; the padding is NaN)
  {
    CaseConfig c = pcase(nhd, 64, f16, 32, 8, 16, {{50, 20}, {33, 33}}, "padded");
    c.page_pad = 32;
    add(c);
  }
  {
    CaseConfig c = pcase(split, 128, b16, 16, 4, 32, {{100, 70}, {5, 1}}, "padded");
    c.page_pad = 64;
    add(c);
  }
  {
    CaseConfig c = pcase(hnd, 128, f16, 8, 2, 2048, {{2100, 80}}, "padded_bs2048");
    c.page_pad = 8;
    add(c);
  }

  // ---- mixed batches: decodes (on the decode fast path, GQA <= 16) and zero-length sequences
  // around prefill chunks
  add(pcase(split, 128, b16, 32, 8, 16,
            {{3000, 1}, {1, 1}, {200, 200}, {20, 0}, {65, 1}, {700, 64}, {0, 0}, {17, 1}},
            "mixed"));
  add(pcase(nhd, 64, f16, 40, 5, 16, {{30, 1}, {0, 0}, {64, 64}, {90, 0}, {128, 65}, {2, 1}},
            "mixed_zero"));
  // Decodes with a GQA ratio the decode path does not take (32): every row on the prefill kernel.
  add(pcase(hnd, 64, b16, 32, 1, 16, {{100, 1}, {50, 30}, {7, 1}, {0, 0}}, "mixed_gqa32"));
  {
    CaseConfig c = pcase(nhd, 128, b16, 32, 8, 16, {}, "manyseqs");
    for (int i = 0; i < 120; ++i) {
      const int len = 1 + (i * 53) % 300;
      const int q = i % 17 == 5 ? 0 : (i % 7 == 3 ? std::min(len, 2 + i % 70) : 1);
      c.seq_lens.push_back(len);
      c.query_lens.push_back(q);
    }
    add(c);
  }

  // ---- strided activations (strides still multiples of 8 elements) and metadata
  {
    CaseConfig c = pcase(hnd, 64, f16, 32, 8, 16, {{30, 1}, {17, 3}, {64, 40}}, "strided");
    c.token_pad = 24;
    c.slot_dtype = DType::kInt32;
    add(c);
  }
  {
    CaseConfig c = pcase(split, 128, b16, 16, 4, 16, {{40, 1}, {0, 0}, {33, 6}, {80, 80}},
                         "strided");
    c.head_pad = 8;
    c.strided_metadata = true;
    add(c);
  }
  return v;
}

/// The compute-sanitizer subset: every instantiation (fp16/bf16 x head 64/128 x split/other
/// layout) and every boundary class, small.
std::vector<CaseConfig> sanitize_cases() {
  const KVLayout split = KVLayout::kSplit, nhd = KVLayout::kNHD, hnd = KVLayout::kHND;
  std::vector<CaseConfig> v;
  auto add = [&](CaseConfig c) { v.push_back(named(std::move(c))); };
  {
    CaseConfig c = pcase(split, 64, f16, 20, 4, 16, {{70, 33}, {1, 1}, {20, 0}, {9, 9}}, "san");
    c.sliding_window = 16;
    c.sinks = true;
    add(c);
  }
  {
    CaseConfig c = pcase(nhd, 128, b16, 32, 8, 544, {{600, 65}, {3, 2}, {545, 1}}, "san");
    c.page_pad = 64;
    c.softcap = 5.0f;
    c.alibi = true;
    add(c);
  }
  {
    CaseConfig c = pcase(hnd, 64, b16, 32, 2, 1, {{40, 40}, {0, 0}}, "san");
    c.lse = false;
    add(c);
  }
  add(pcase(split, 128, f16, 8, 1, 2048, {{2049, 17}, {2, 2}}, "san"));
  add(pcase(nhd, 64, b16, 8, 8, 16, {{130, 130}}, "san"));
  add(pcase(split, 128, b16, 16, 4, 32, {{90, 2}, {64, 64}}, "san"));
  add(pcase(hnd, 128, f16, 24, 8, 16, {{15, 15}, {100, 65}, {5, 1}}, "san"));
  {
    CaseConfig c = pcase(nhd, 64, f16, 16, 4, 16, {{70, 2}, {33, 20}}, "san_pad_tokpad");
    c.page_pad = 8;
    c.token_pad = 8;
    add(c);
  }
  return v;
}

std::string case_param_name(const ::testing::TestParamInfo<CaseConfig>& info) {
  return info.param.name;
}

void expect_prefill_mma_passes(const CaseConfig& c) {
  const testing::CaseResult r = testing::run_case(c);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_TRUE(r.choice.prefill_rows_mma) << "the prefill kernel was not chosen: " << r.choice.reason;
  EXPECT_GT(r.elements_checked, 0);
  EXPECT_TRUE(r.writer_exact) << r.detail;
  EXPECT_TRUE(r.pass) << r.detail << "\n  worst ratio " << r.worst_ratio << "\n  "
                      << r.choice.reason;
}

class CudaPrefillMma : public ::testing::TestWithParam<CaseConfig> {};
TEST_P(CudaPrefillMma, MatchesOracle) {
  PA_SKIP_WITHOUT_GPU();
  expect_prefill_mma_passes(GetParam());
}
INSTANTIATE_TEST_SUITE_P(PrefillMma, CudaPrefillMma, ::testing::ValuesIn(prefill_cases()),
                         case_param_name);

class SanitizePrefillMma : public ::testing::TestWithParam<CaseConfig> {};
TEST_P(SanitizePrefillMma, MatchesOracle) {
  PA_SKIP_WITHOUT_GPU();
  expect_prefill_mma_passes(GetParam());
}
INSTANTIATE_TEST_SUITE_P(SanitizePrefill, SanitizePrefillMma, ::testing::ValuesIn(sanitize_cases()),
                         case_param_name);

ProblemSpec prefill_spec(KVLayout layout, int head, DType dt) {
  ProblemSpec s;
  s.layout = layout;
  s.head_size = head;
  s.dtype = s.kv_dtype = dt;
  s.num_heads = 20;
  s.num_kv_heads = 4;
  s.block_size = 16;
  s.seq_lens = {50, 1, 0, 130, 97};
  s.query_lens = {1, 1, 0, 64, 33};  // a prefill chunk last: its last row ends the query
  s.sliding_window = 80;
  s.sinks = true;
  // This file tests prefill_mma: on Hopper the wgmma kernel would take every layout.
  s.plan.no_wgmma_prefill = true;
  return s;
}

// The last query row ends exactly at the end of a 2 MiB-multiple allocation: a read past the
// query leaves the allocation (compute-sanitizer reports it; without it, it may fault).
TEST(SanitizePrefillMmaEdges, QueryEndsAtAllocationEnd) {
  PA_SKIP_WITHOUT_GPU();
  const std::pair<int, DType> variants[] = {{64, f16}, {128, b16}};
  for (KVLayout layout : {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND})
    for (const auto& [head, dt] : variants) {
      SCOPED_TRACE(std::string(to_string(layout)) + " head " + std::to_string(head));
      ProblemSpec s = prefill_spec(layout, head, dt);
      s.seed = 70 + head;
      auto p = Problem::make(s, /*query_at_end=*/true);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      PA_ASSERT_OK((*p)->plan());
      EXPECT_TRUE((*p)->attention_plan().choice().prefill_rows_mma)
          << (*p)->attention_plan().choice().reason;
      PA_ASSERT_OK((*p)->run());
      PA_ASSERT_OK(cuda::device_synchronize());
      EXPECT_EQ((*p)->check_against_oracle(), "");
    }
}

// A query whose base pointer is not 16-byte aligned (strides are): the plan picks the prefill
// kernel, run_attention sees the pointer and takes the planned tiled kernel for every row.
TEST(SanitizePrefillMmaEdges, UnalignedBasePointerFallsBackToTiled) {
  PA_SKIP_WITHOUT_GPU();
  for (DType dt : {f16, b16}) {
    ProblemSpec s = prefill_spec(KVLayout::kNHD, 64, dt);
    s.query_offset_bytes = 8;
    auto p = Problem::make(s);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    PA_ASSERT_OK((*p)->plan());
    EXPECT_TRUE((*p)->attention_plan().choice().prefill_rows_mma);
    PA_ASSERT_OK((*p)->run());
    PA_ASSERT_OK(cuda::device_synchronize());
    EXPECT_EQ((*p)->check_against_oracle(), "") << to_string(dt);
  }
}

// Strides that are not multiples of 8 elements: the plan keeps the tiled kernel and says why.
TEST(SanitizePrefillMmaEdges, UnalignedStridesPlanTheTiledKernel) {
  PA_SKIP_WITHOUT_GPU();
  CaseConfig c = pcase(KVLayout::kHND, 128, b16, 16, 4, 16, {{40, 20}, {9, 1}}, "headpad4");
  c.head_pad = 4;
  c = named(c);
  const testing::CaseResult r = testing::run_case(c);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_FALSE(r.choice.prefill_rows_mma);
  EXPECT_NE(r.choice.reason.find("prefill kernel not taken"), std::string::npos)
      << r.choice.reason;
  EXPECT_TRUE(r.pass) << r.detail;
}

TEST(CudaPrefillMmaGraph, CaptureAndReplayEqualEager) {
  PA_SKIP_WITHOUT_GPU();
  for (KVLayout layout : {KVLayout::kSplit, KVLayout::kHND}) {
    SCOPED_TRACE(to_string(layout));
    ProblemSpec s = prefill_spec(layout, 128, b16);
    s.softcap = 30.0f;
    s.alibi = true;
    auto p = Problem::make(s);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    Problem& pr = **p;
    PA_ASSERT_OK(pr.plan());
    ASSERT_TRUE(pr.attention_plan().choice().prefill_rows_mma);
    ASSERT_NO_FATAL_FAILURE(expect_graph_replay_equals_eager(pr));
  }
}

}  // namespace
}  // namespace pagedattn::cudatest
