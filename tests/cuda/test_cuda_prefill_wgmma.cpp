// GPU tests of the Hopper wgmma prefill kernel (src/cuda/prefill/prefill_wgmma.h). Every case
// asserts that the plan routes the prefill rows to it (KernelChoice::prefill_rows_wgmma; the
// test skips on a GPU of another compute capability, where prefill_mma takes them), then
// checks it against the oracle through the shared harness: NaN-poisoned cache memory (block
// tails, unused blocks, page padding), random block tables from a larger pool, guard regions
// around every written buffer, and a second run that must give the same bits.
//
//  - PrefillWgmma/CudaPrefillWgmma.*: head 64, 128 and 256, fp16 and bf16, nhd and hnd, chunk
//    lengths 1..300 (multiples of 64 and not) first and after a cached prefix, contexts to
//    4100 (head counts kept small where the CPU oracle would take seconds), GQA
//    1/2/4/5/8/16/32, block sizes 1/16/17/32/128/544, window, softcap, ALiBi,
//    sinks, padded pages, LSE off, varlen and mixed batches (decodes, zero-length sequences),
//    strided activations;
//  - SanitizePrefillWgmma/SanitizePrefillWgmma.*: one small case per instantiation (dtype x
//    head), for compute-sanitizer;
//  - PrefillWgmmaV1/CudaPrefillWgmmaV1.*: the sanitizer cases and a few more on the first
//    version (PlanOptions::wgmma_prefill_v1); every other case runs the warp-specialised one;
//  - CudaPrefillWgmmaSelect.*: PlanOptions::no_wgmma_prefill keeps prefill_mma, and the split
//    layout with a block size that is not a multiple of 8 the tiled kernel; both still match the
//    oracle.
// Without a GPU every test skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <tuple>
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

/// Whether device 0 is a compute capability 9.0 GPU (where the wgmma kernel is selected).
bool have_sm90() {
  if (!have_gpu()) return false;
  auto info = query_device(Device::cuda(0));
  return info.ok() && info->cc_major == 9 && info->cc_minor == 0;
}
#define PA_SKIP_WITHOUT_SM90()                                                        \
  do {                                                                                \
    PA_SKIP_WITHOUT_GPU();                                                            \
    if (!have_sm90()) GTEST_SKIP() << "not a compute capability 9.0 GPU";             \
  } while (0)

CaseConfig wcase(KVLayout layout, int head, DType dt, int heads, int kv_heads, int bs,
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
  c.tag = "pwg_" + tag;
  return c;
}

/// `c` with every score feature on: a sliding window of `window` keys, softcap 30, ALiBi and
/// sinks.
CaseConfig every_feature(CaseConfig c, int window) {
  c.sliding_window = window;
  c.softcap = 30.0f;
  c.alibi = true;
  c.sinks = true;
  return c;
}

CaseConfig named(CaseConfig c) {
  std::uint64_t h = 1469598103934665603ull;
  c.name = testing::case_name(c);
  for (unsigned char ch : c.name) h = (h ^ ch) * 1099511628211ull;
  c.seed = h % 100000;
  return c;
}

std::vector<CaseConfig> wgmma_cases() {
  const KVLayout nhd = KVLayout::kNHD, hnd = KVLayout::kHND;
  std::vector<CaseConfig> v;
  auto add = [&](CaseConfig c) { v.push_back(named(std::move(c))); };

  // ---- chunk edges: lengths around the 128-row CTA and 128-key tile, first chunks and after
  // a cached prefix, both heads, both dtypes, both layouts.
  add(wcase(nhd, 128, b16, 32, 8, 16, {{2, 2}, {15, 15}, {31, 31}, {32, 32}, {33, 33}},
            "edges_first"));
  add(wcase(nhd, 128, f16, 32, 8, 16, {{39, 2}, {115, 15}, {200, 64}, {300, 65}, {140, 127}},
            "edges_ctx"));
  add(wcase(hnd, 128, b16, 4, 4, 16, {{128, 128}, {129, 129}, {255, 255}, {300, 300}},
            "gqa1_edges"));
  add(wcase(hnd, 64, f16, 32, 8, 32, {{1, 1}, {64, 64}, {65, 65}, {500, 200}, {3, 3}},
            "h64_edges"));
  add(wcase(nhd, 64, b16, 8, 4, 16, {{600, 600}}, "h64_gqa2_600"));
  // Head 64 (no turn-taking between its consumers): rows that end inside a consumer (144),
  // on the edges of 64-row consumers and 192-row spans, 3 rows past them, and a window that
  // starts key ranges mid-page.
  add(wcase(nhd, 64, b16, 12, 4, 16, {{48, 48}, {64, 64}, {65, 65}, {100, 97}, {400, 129}},
            "h64_cta192"));
  {
    CaseConfig c = wcase(hnd, 64, f16, 8, 8, 64, {{900, 250}, {70, 70}, {193, 193}}, "h64_window");
    c.sliding_window = 100;
    add(c);
  }
  add(wcase(nhd, 128, b16, 8, 2, 16, {{4100, 40}, {2048, 130}}, "ctx4100"));
  add(wcase(hnd, 128, f16, 8, 2, 128, {{3000, 1}, {2500, 70}, {129, 128}}, "bs128"));
  add(wcase(nhd, 64, f16, 8, 2, 17, {{700, 111}, {18, 18}}, "bs17"));
  add(wcase(hnd, 128, b16, 8, 1, 1, {{260, 70}}, "bs1_mqa8"));
  add(wcase(nhd, 128, f16, 8, 2, 544, {{1145, 130}, {544, 2}, {543, 65}}, "bs544"));
  // ---- the producer's TMA boxes (prefill_ws_tma_box): 8-token pages (16 boxes a tile), pages
  // of two tiles, a window that starts key ranges mid-page (partial segments by cp.async), and
  // a page of 24 tokens that is no box (cp.async only).
  add(wcase(nhd, 64, b16, 16, 4, 8, {{700, 333}, {9, 9}, {130, 2}}, "tma_bs8"));
  add(wcase(nhd, 128, f16, 8, 2, 256, {{1000, 300}, {257, 200}, {600, 1}}, "tma_bs256"));
  {
    CaseConfig c = wcase(hnd, 128, b16, 8, 2, 64, {{900, 400}, {333, 100}}, "tma_bs64_window");
    c.sliding_window = 77;
    add(c);
  }
  add(wcase(nhd, 128, b16, 8, 2, 24, {{500, 130}, {49, 49}}, "bs24_no_tma"));

  // ---- head 256 (64-key tiles)
  add(wcase(nhd, 256, b16, 8, 2, 16, {{2, 2}, {33, 33}, {300, 65}, {700, 130}}, "h256"));
  add(wcase(hnd, 256, f16, 4, 4, 128, {{129, 129}, {700, 64}, {3000, 1}}, "h256_gqa1"));
  {
    CaseConfig c = wcase(nhd, 256, f16, 8, 2, 32, {{500, 200}, {9, 1}}, "h256_window");
    c.sliding_window = 90;
    add(c);
  }

  // ---- GQA ratios 2, 4, 5, 16, 32 (CTA rows cross query tokens and heads)
  add(wcase(nhd, 128, b16, 16, 8, 16, {{100, 100}, {37, 9}}, "gqa2"));
  add(wcase(hnd, 128, f16, 20, 4, 16, {{100, 100}, {80, 13}}, "gqa5"));
  add(wcase(nhd, 64, b16, 32, 2, 16, {{90, 45}, {200, 3}}, "gqa16"));
  add(wcase(hnd, 128, b16, 32, 1, 16, {{50, 10}, {300, 2}}, "gqa32"));

  // ---- window
  {
    CaseConfig c = wcase(hnd, 128, b16, 20, 4, 16, {{300, 300}, {700, 130}}, "window64");
    c.sliding_window = 64;
    add(c);
  }
  {
    CaseConfig c = wcase(nhd, 64, b16, 8, 2, 16, {{40, 40}, {100, 30}}, "window1");
    c.sliding_window = 1;
    add(c);
  }
  {
    CaseConfig c = wcase(nhd, 128, f16, 8, 2, 32, {{700, 300}, {250, 90}}, "window200");
    c.sliding_window = 200;
    add(c);
  }
  // ---- score modifiers
  {
    CaseConfig c = wcase(hnd, 128, f16, 16, 2, 16, {{65, 65}, {300, 165}}, "softcap");
    c.softcap = 5.0f;
    add(c);
  }
  {
    CaseConfig c = wcase(nhd, 64, b16, 20, 4, 16, {{200, 200}, {250, 50}}, "alibi");
    c.alibi = true;
    add(c);
  }
  {
    CaseConfig c = wcase(nhd, 128, b16, 32, 8, 16, {{64, 64}, {300, 136}}, "sinks");
    c.sinks = true;
    add(c);
  }
  add(every_feature(
      wcase(nhd, 256, b16, 8, 2, 128, {{700, 165}, {545, 130}, {3, 2}, {1, 1}}, "allfeat"), 300));
  // ---- LSE off, padded pages, strided activations
  {
    CaseConfig c = wcase(hnd, 64, f16, 8, 8, 16, {{100, 100}, {20, 5}}, "nolse");
    c.lse = false;
    add(c);
  }
  {
    CaseConfig c = wcase(nhd, 64, f16, 32, 8, 16, {{150, 120}, {33, 33}}, "padded");
    c.page_pad = 32;
    add(c);
  }
  {
    CaseConfig c = wcase(hnd, 128, b16, 16, 4, 32, {{400, 170}, {5, 1}}, "padded");
    c.page_pad = 64;
    c.value_page_pad = 8;
    add(c);
  }
  {
    CaseConfig c = wcase(hnd, 64, f16, 32, 8, 16, {{30, 1}, {17, 3}, {164, 140}}, "strided");
    c.token_pad = 24;
    add(c);
  }
  {
    CaseConfig c = wcase(nhd, 128, b16, 16, 4, 16, {{40, 1}, {0, 0}, {33, 6}, {80, 80}},
                         "strided_meta");
    c.head_pad = 8;
    c.strided_metadata = true;
    add(c);
  }

  // ---- varlen and mixed batches: decodes (on the decode fast path) and zero-length
  // sequences around prefill chunks
  add(wcase(nhd, 128, b16, 32, 8, 16,
            {{3000, 1}, {1, 1}, {200, 200}, {20, 0}, {65, 1}, {700, 64}, {0, 0}, {17, 1}},
            "mixed"));
  add(wcase(hnd, 64, f16, 40, 5, 16, {{30, 1}, {0, 0}, {64, 64}, {90, 0}, {128, 65}, {2, 1}},
            "mixed_zero"));
  {
    CaseConfig c = wcase(nhd, 128, f16, 32, 8, 16, {}, "manyseqs");
    for (int i = 0; i < 60; ++i) {
      const int len = 1 + (i * 53) % 400;
      const int q = i % 17 == 5 ? 0 : (i % 5 == 3 ? std::min(len, 2 + (i * 37) % 300) : 1);
      c.seq_lens.push_back(len);
      c.query_lens.push_back(q);
    }
    add(c);
  }
  // ---- masked heads (prefill_ws_instance_head): every other multiple of 8 up to 256 on the
  // next larger instance, dims past the head zero in shared memory and never stored: TMA boxes
  // whose dims past the tensor map's head read as zeros (a whole 64-dim box past it for head
  // 136), cp.async zero-filling the chunks past it (block 24, no box), heads below a box's 64
  // dims (8, 40), multiples of 8 that are not of 16 (72, 200), padded pages and strided rows
  // (the next head's or the page pad's elements follow the head in memory), every feature.
  add(wcase(nhd, 80, b16, 32, 8, 16, {{2, 2}, {300, 130}, {700, 65}, {20, 1}}, "h80"));
  {
    CaseConfig c = wcase(hnd, 96, f16, 16, 4, 32, {{129, 129}, {500, 200}}, "h96_window");
    c.sliding_window = 150;
    add(c);
  }
  add(wcase(nhd, 112, b16, 8, 2, 64, {{900, 300}, {65, 2}}, "h112_bs64"));
  add(wcase(hnd, 72, f16, 8, 8, 16, {{200, 140}, {33, 33}}, "h72"));
  add(wcase(nhd, 40, b16, 8, 2, 16, {{300, 200}, {5, 3}}, "h40"));
  add(wcase(hnd, 8, f16, 8, 8, 16, {{70, 33}, {129, 129}}, "h8"));
  add(wcase(nhd, 136, f16, 4, 4, 128, {{700, 130}, {129, 129}}, "h136"));
  add(wcase(nhd, 200, b16, 8, 2, 24, {{300, 100}, {49, 49}}, "h200_bs24_no_tma"));
  add(every_feature(wcase(nhd, 192, b16, 16, 4, 16, {{500, 165}, {130, 2}}, "h192_allfeat"),
                    200));
  {
    CaseConfig c = wcase(nhd, 80, f16, 16, 4, 16, {{150, 120}, {33, 33}}, "h80_padded");
    c.page_pad = 32;
    add(c);
  }
  {
    CaseConfig c = wcase(hnd, 96, b16, 8, 2, 16, {{30, 2}, {164, 140}}, "h96_strided");
    c.token_pad = 24;
    c.head_pad = 8;
    add(c);
  }
  // ---- fp8 caches (the producer converts the rows to the query dtype): both kinds, both
  // query dtypes, the three instances and a masked head, host scalars, per-tensor and
  // per-KV-head scale tensors (a KV head dequantised with another's scale fails), scales
  // derived from the data, every feature, padded pages, mixed batches, ring wrap-around.
  auto fp8 = [&](CaseConfig c, DType kv, testing::ScaleMode mode, float ks, float vs) {
    c.kv_dtype = kv;
    c.scales = mode;
    c.k_scale = ks;
    c.v_scale = vs;
    add(c);
  };
  using testing::ScaleMode;
  const DType e4 = DType::kFloat8E4M3, e5 = DType::kFloat8E5M2;
  fp8(wcase(nhd, 128, b16, 32, 8, 16, {{2, 2}, {300, 130}, {700, 65}, {20, 1}}, "f8_e4_h128"),
      e4, ScaleMode::kHost, 0.0f, 0.0f);
  fp8(wcase(hnd, 128, f16, 16, 4, 32, {{129, 129}, {1000, 40}}, "f8_e5_h128"), e5,
      ScaleMode::kTensor, 0.0f, 0.0f);
  fp8(wcase(nhd, 64, f16, 32, 8, 16, {{64, 64}, {1300, 200}, {3, 1}}, "f8_e4_h64_perhead"), e4,
      ScaleMode::kPerHead, 0.0f, 0.0f);
  fp8(wcase(nhd, 256, b16, 16, 4, 16, {{500, 165}, {70, 70}}, "f8_e5_h256"), e5,
      ScaleMode::kHost, 0.5f, 2.0f);
  fp8(wcase(nhd, 80, b16, 16, 4, 24, {{300, 130}, {33, 33}}, "f8_e4_h80_masked"), e4,
      ScaleMode::kPerHead, 0.0f, 0.0f);
  fp8(wcase(hnd, 112, f16, 8, 2, 17, {{400, 200}, {20, 3}}, "f8_e5_h112_hnd_bs17"), e5,
      ScaleMode::kHost, 0.0f, 0.0f);
  {
    CaseConfig c = every_feature(
        wcase(nhd, 128, b16, 16, 4, 16, {{500, 165}, {130, 2}, {3000, 1}}, "f8_e4_allfeat_mixed"),
        200);
    c.page_pad = 32;
    fp8(c, e4, ScaleMode::kTensor, 0.0f, 0.0f);
  }
  // ---- the split layout (key [b, g, d/8, t, 8], value [b, g, d, t]; V^T tiles): chunk edges
  // (keys from kv_hi on zero-filled inside an 8-token chunk), windows (keys before kv_lo in a
  // chunk), every instance and a masked head, block sizes 8..544, padded pages, GQA, every
  // feature, mixed batches.
  const KVLayout split = KVLayout::kSplit;
  add(wcase(split, 128, b16, 32, 8, 16, {{2, 2}, {15, 15}, {33, 33}, {300, 65}, {140, 127}},
            "split_edges"));
  add(wcase(split, 64, f16, 16, 8, 8, {{1, 1}, {65, 65}, {500, 200}, {3, 3}}, "split_h64_bs8"));
  add(wcase(split, 256, b16, 8, 2, 32, {{129, 129}, {300, 100}}, "split_h256"));
  add(wcase(split, 80, f16, 16, 4, 16, {{300, 130}, {20, 1}}, "split_h80_masked"));
  add(wcase(split, 128, f16, 40, 5, 544, {{700, 300}, {33, 9}}, "split_bs544_gqa8"));
  {
    CaseConfig c = every_feature(
        wcase(split, 128, b16, 16, 4, 24, {{500, 165}, {130, 2}, {3000, 1}}, "split_allfeat_mixed"),
        150);
    c.page_pad = 64;
    add(c);
  }
  {
    CaseConfig c = wcase(split, 96, b16, 8, 2, 16, {{129, 129}, {500, 200}}, "split_h96_window");
    c.sliding_window = 37;  // windows that start inside an 8-token chunk
    add(c);
  }
  return v;
}

/// One small case per instantiation (dtype x head), every boundary class, for the sanitizer.
std::vector<CaseConfig> sanitize_cases() {
  std::vector<CaseConfig> v;
  auto add = [&](CaseConfig c) { v.push_back(named(std::move(c))); };
  {
    CaseConfig c = wcase(KVLayout::kNHD, 64, f16, 20, 4, 16, {{70, 33}, {1, 1}, {20, 0}, {9, 9}},
                         "san");
    c.sliding_window = 16;
    c.sinks = true;
    add(c);
  }
  add(wcase(KVLayout::kHND, 64, b16, 32, 8, 32, {{140, 130}, {3, 2}}, "san"));
  {
    CaseConfig c = wcase(KVLayout::kNHD, 128, b16, 32, 8, 128, {{300, 65}, {3, 2}, {129, 1}}, "san");
    c.page_pad = 64;
    add(c);
  }
  add(wcase(KVLayout::kHND, 128, f16, 24, 8, 16, {{15, 15}, {200, 140}, {5, 1}}, "san"));
  add(wcase(KVLayout::kNHD, 256, b16, 16, 4, 16, {{70, 70}, {3, 2}}, "san"));
  add(wcase(KVLayout::kHND, 256, f16, 8, 8, 32, {{100, 65}, {2, 1}}, "san"));
  // Enough key tiles (8 and 6) that every ring slot is refilled: the mbarrier phases wrap.
  add(wcase(KVLayout::kNHD, 128, b16, 8, 2, 16, {{1000, 40}, {700, 1}}, "san_long"));
  // Head 64: its 5 stages of 128 keys wrap after 640 keys; 2 CTAs for 200 rows.
  add(wcase(KVLayout::kNHD, 64, b16, 8, 8, 16, {{1300, 200}, {600, 1}}, "san_long"));
  // Masked heads: TMA boxes past the head (80 on 128, 136 on 256) and the cp.async gather past
  // it (block 24), for memcheck's out-of-bounds reads past the cache rows.
  add(wcase(KVLayout::kNHD, 80, b16, 16, 4, 16, {{300, 130}, {3, 2}}, "san_h80"));
  add(wcase(KVLayout::kHND, 136, f16, 8, 8, 32, {{200, 65}, {2, 2}}, "san_h136"));
  add(wcase(KVLayout::kNHD, 96, f16, 8, 2, 24, {{250, 70}, {9, 9}}, "san_h96_bs24"));
  // fp8 caches: the producer's register path (plain loads, conversion, stores), every head.
  for (const auto& [head, kv, dt] :
       {std::tuple<int, DType, DType>{64, DType::kFloat8E4M3, f16},
        std::tuple<int, DType, DType>{128, DType::kFloat8E5M2, b16},
        std::tuple<int, DType, DType>{256, DType::kFloat8E4M3, b16},
        std::tuple<int, DType, DType>{96, DType::kFloat8E5M2, f16}}) {
    CaseConfig c = wcase(KVLayout::kNHD, head, dt, 8, 2, 16, {{300, 130}, {3, 2}}, "san_f8");
    c.kv_dtype = kv;
    c.scales = testing::ScaleMode::kPerHead;
    c.k_scale = c.v_scale = 0.0f;
    add(c);
  }
  // The split layout's V^T gather, every instance and a masked head, a window inside chunks.
  add(wcase(KVLayout::kSplit, 64, b16, 8, 2, 8, {{300, 130}, {3, 2}}, "san_split"));
  add(wcase(KVLayout::kSplit, 128, f16, 8, 2, 16, {{300, 130}, {9, 9}}, "san_split"));
  add(wcase(KVLayout::kSplit, 256, b16, 8, 2, 32, {{200, 70}, {3, 2}}, "san_split"));
  {
    CaseConfig c = wcase(KVLayout::kSplit, 96, f16, 8, 2, 16, {{250, 70}, {9, 9}}, "san_split");
    c.sliding_window = 21;
    add(c);
  }
  return v;
}

std::string case_param_name(const ::testing::TestParamInfo<CaseConfig>& info) {
  return info.param.name;
}

void expect_wgmma_passes(const CaseConfig& c) {
  const testing::CaseResult r = testing::run_case(c);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_TRUE(r.choice.prefill_rows_wgmma) << "the wgmma kernel was not chosen: " << r.choice.reason;
  EXPECT_EQ(r.choice.prefill_rows_wgmma_ws, !c.plan.wgmma_prefill_v1) << r.choice.reason;
  EXPECT_GT(r.elements_checked, 0);
  EXPECT_TRUE(r.writer_exact) << r.detail;
  EXPECT_TRUE(r.pass) << r.detail << "\n  worst ratio " << r.worst_ratio << "\n  "
                      << r.choice.reason;
}

class CudaPrefillWgmma : public ::testing::TestWithParam<CaseConfig> {};
TEST_P(CudaPrefillWgmma, MatchesOracle) {
  PA_SKIP_WITHOUT_SM90();
  expect_wgmma_passes(GetParam());
}
INSTANTIATE_TEST_SUITE_P(PrefillWgmma, CudaPrefillWgmma, ::testing::ValuesIn(wgmma_cases()),
                         case_param_name);

class SanitizePrefillWgmma : public ::testing::TestWithParam<CaseConfig> {};
TEST_P(SanitizePrefillWgmma, MatchesOracle) {
  PA_SKIP_WITHOUT_SM90();
  expect_wgmma_passes(GetParam());
}
INSTANTIATE_TEST_SUITE_P(SanitizePrefillWgmma, SanitizePrefillWgmma,
                         ::testing::ValuesIn(sanitize_cases()), case_param_name);

// The first version (PlanOptions::wgmma_prefill_v1), kept as the fallback and for A/B
// benchmarks: the sanitizer cases and a few of the matrix, every instantiation.
std::vector<CaseConfig> v1_cases() {
  std::vector<CaseConfig> v;
  // The first version has no masked heads, no fp8 caches and no split layout.
  for (const CaseConfig& c : sanitize_cases())
    if ((c.head_size == 64 || c.head_size == 128 || c.head_size == 256) && c.kv_dtype == c.dtype &&
        c.layout != KVLayout::kSplit)
      v.push_back(c);
  for (const CaseConfig& c : wgmma_cases())
    if (c.tag == "pwg_edges_ctx" || c.tag == "pwg_h256_window" || c.tag == "pwg_gqa5" ||
        c.tag == "pwg_bs1_mqa8")
      v.push_back(c);
  for (CaseConfig& c : v) {
    c.plan.wgmma_prefill_v1 = true;
    c.tag += "_v1";
    c = named(std::move(c));
  }
  return v;
}
class CudaPrefillWgmmaV1 : public ::testing::TestWithParam<CaseConfig> {};
TEST_P(CudaPrefillWgmmaV1, MatchesOracle) {
  PA_SKIP_WITHOUT_SM90();
  expect_wgmma_passes(GetParam());
}
INSTANTIATE_TEST_SUITE_P(PrefillWgmmaV1, CudaPrefillWgmmaV1, ::testing::ValuesIn(v1_cases()),
                         case_param_name);

// An fp8 cache with the first version asked for: the tiled kernel takes the chunks (neither
// the first version nor prefill_mma converts fp8), matches the oracle and says why.
TEST(CudaPrefillWgmmaSelect, Fp8CacheWithTheFirstVersionFallsBackToTheTiledKernel) {
  PA_SKIP_WITHOUT_SM90();
  CaseConfig c = wcase(KVLayout::kNHD, 128, b16, 8, 2, 16, {{300, 130}, {3, 2}}, "f8_v1");
  c.kv_dtype = DType::kFloat8E4M3;
  c.plan.wgmma_prefill_v1 = true;
  const testing::CaseResult r = testing::run_case(named(c));
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_FALSE(r.choice.prefill_rows_mma) << r.choice.reason;
  EXPECT_NE(r.choice.reason.find("the first version has none"), std::string::npos)
      << r.choice.reason;
  EXPECT_TRUE(r.pass) << r.detail;
}

// The same case on the wgmma kernel and, with PlanOptions::no_wgmma_prefill, on prefill_mma:
// both pass, and the option is honoured.
TEST(CudaPrefillWgmmaSelect, OptionKeepsPrefillMma) {
  PA_SKIP_WITHOUT_SM90();
  CaseConfig c = named(wcase(KVLayout::kNHD, 128, b16, 32, 8, 16, {{500, 200}, {9, 1}}, "opt"));
  expect_wgmma_passes(c);
  c.plan.no_wgmma_prefill = true;
  const testing::CaseResult r = testing::run_case(c);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_TRUE(r.choice.prefill_rows_mma) << r.choice.reason;
  EXPECT_FALSE(r.choice.prefill_rows_wgmma) << r.choice.reason;
  EXPECT_TRUE(r.pass) << r.detail;
}

// The split layout on the warp-specialised kernel with the query's last row at the end of its
// allocation (a read past it leaves the allocation), then captured in a CUDA graph and
// replayed from poisoned outputs: the bits of the eager run.
TEST(CudaPrefillWgmmaSplit, QueryAtAllocationEndAndGraphReplay) {
  PA_SKIP_WITHOUT_SM90();
  for (int head : {64, 128, 256}) {
    SCOPED_TRACE("head " + std::to_string(head));
    ProblemSpec s;
    s.layout = KVLayout::kSplit;
    s.head_size = head;
    s.dtype = s.kv_dtype = b16;
    s.num_heads = 16;
    s.num_kv_heads = 4;
    s.block_size = 16;
    s.seq_lens = {50, 1, 0, 130, 97};
    s.query_lens = {1, 1, 0, 64, 33};
    s.sliding_window = 80;
    s.sinks = true;
    s.seed = 90 + head;
    auto p = Problem::make(s, /*query_at_end=*/true);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    Problem& pr = **p;
    PA_ASSERT_OK(pr.plan());
    ASSERT_TRUE(pr.attention_plan().choice().prefill_rows_wgmma_ws)
        << pr.attention_plan().choice().reason;
    ASSERT_NO_FATAL_FAILURE(expect_graph_replay_equals_eager(pr));
  }
}

// The split layout with a block size that is not a multiple of 8 runs on the tiled kernel
// (neither tensor-core prefill kernel takes it), matches the oracle and says why.
TEST(CudaPrefillWgmmaSelect, SplitLayoutOfBlock12RunsOnTheTiledKernel) {
  PA_SKIP_WITHOUT_SM90();
  CaseConfig c = named(wcase(KVLayout::kSplit, 128, b16, 16, 4, 12, {{100, 70}, {5, 1}}, "split"));
  const testing::CaseResult r = testing::run_case(c);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_FALSE(r.choice.prefill_rows_mma) << r.choice.reason;
  EXPECT_NE(r.choice.reason.find("split layout with block_size 12"), std::string::npos)
      << r.choice.reason;
  EXPECT_TRUE(r.pass) << r.detail;
}

}  // namespace
}  // namespace pagedattn::cudatest
