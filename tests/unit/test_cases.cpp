// The case generator itself (src/testing/cases.cpp): names are unique and usable as GoogleTest
// names, the matrix covers every value of every axis and every pair of axis values (DESIGN.md
// §4 "pairwise"), the quick subset keeps every boundary class, and the tolerance table is the
// one DESIGN.md §4 states. Nothing here runs attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/testing/harness.h"

namespace pagedattn::testing {
namespace {

bool valid_test_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](unsigned char ch) { return std::isalnum(ch) || ch == '_'; });
}

TEST(CaseName, MatchesTheDesignExampleAndEncodesEveryKnob) {
  CaseConfig c;
  c.layout = KVLayout::kNHD;
  c.block_size = 544;
  c.head_size = 80;
  c.num_heads = 16;
  c.num_kv_heads = 4;
  c.dtype = DType::kBFloat16;
  c.kv_dtype = DType::kBFloat16;
  c.sliding_window = 64;
  c.tag = "decode";
  EXPECT_EQ(case_name(c), "nhd_bs544_h80_q16kv4_bf16_window64_decode");

  c.kv_dtype = DType::kFloat8E5M2;
  c.softcap = 2.5f;
  c.alibi = true;
  c.sinks = true;
  c.page_pad = 32;
  c.plan.tile_tokens = 16;
  c.plan.num_splits = 3;
  c.k_scale = 0.05f;
  c.v_scale = 3.0f;
  c.token_pad = 8;
  c.slot_dtype = DType::kInt32;
  c.lse = false;
  EXPECT_EQ(case_name(c),
            "nhd_bs544_h80_q16kv4_bf16_fp8e5m2_window64_softcap2p5_alibi_sinks_pad32_tile16_"
            "splits3_ks0p05_vs3_tokpad8_i32slots_nolse_decode");
  // Without a tag the lengths name the case.
  c = CaseConfig{};
  c.seq_lens = {1, 17, 544};
  c.query_lens = {1, 0, 5};
  EXPECT_EQ(case_name(c), "nhd_bs16_h64_q8kv2_fp16_s3_max544_t6");
}

TEST(CaseName, EncodesValueStridesOutputStridesAndInPlace) {
  CaseConfig c;
  c.tag = "x";
  c.page_pad = 32;
  c.value_page_pad = 32;  // the same as the key's: not named
  c.token_pad = 8;
  c.out_token_pad = 8;
  EXPECT_EQ(case_name(c), "nhd_bs16_h64_q8kv2_fp16_pad32_tokpad8_x");
  c.value_page_pad = 0;
  c.out_token_pad = 24;
  EXPECT_EQ(case_name(c), "nhd_bs16_h64_q8kv2_fp16_pad32_tokpad8_vpad0_outpad24_x");
  c.out_token_pad = -1;
  c.in_place = true;
  EXPECT_EQ(case_name(c), "nhd_bs16_h64_q8kv2_fp16_pad32_tokpad8_vpad0_inplace_x");
}

TEST(Matrix, HasValueStrideOutputStrideAndInPlaceCases) {
  int vpad = 0, outpad = 0, inplace = 0;
  for (const CaseConfig& c : matrix_cases(Device::cuda(0))) {
    vpad += c.value_page_pad >= 0 && c.value_page_pad != c.page_pad;
    outpad += c.out_token_pad >= 0 && c.out_token_pad != c.token_pad;
    inplace += c.in_place;
  }
  EXPECT_GE(vpad, 5);
  EXPECT_GE(outpad, 3);
  EXPECT_GE(inplace, 5);
}

TEST(Matrix, NamesAreUniqueValidAndStable) {
  for (bool quick : {false, true}) {
    const auto cases = matrix_cases(Device::cpu(), quick);
    std::set<std::string> names;
    for (const CaseConfig& c : cases) {
      EXPECT_TRUE(valid_test_name(c.name)) << c.name;
      // Generated, except the two names DESIGN.md gives as examples, which exist verbatim.
      const bool design_example = c.name == "nhd_bs544_h80_q16kv4_bf16_window64" ||
                                  c.name == "nhd_bs544_h80_gqa4_bf16_window64";
      if (!design_example)
        EXPECT_EQ(c.name, case_name(c)) << "the stored name must be the generated one";
      else
        EXPECT_EQ(case_name(c).rfind("nhd_bs544_h80_q", 0), 0u) << c.name;
      EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name " << c.name;
      EXPECT_EQ(c.device, Device::cpu());
    }
    // Deterministic: a second call gives the same cases with the same seeds.
    const auto again = matrix_cases(Device::cpu(), quick);
    ASSERT_EQ(again.size(), cases.size());
    for (std::size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(again[i].name, cases[i].name);
      EXPECT_EQ(again[i].seed, cases[i].seed);
    }
  }
}

TEST(Matrix, EveryCaseIsWellFormed) {
  for (const CaseConfig& c : matrix_cases(Device::cpu())) {
    ASSERT_EQ(c.seq_lens.size(), c.query_lens.size()) << c.name;
    EXPECT_EQ(c.num_heads % c.num_kv_heads, 0) << c.name;
    for (std::size_t i = 0; i < c.seq_lens.size(); ++i)
      EXPECT_LE(c.query_lens[i], c.seq_lens[i]) << c.name;
    // fp8 split caches need head_size % 16 == 0; the generator must never produce the
    // invalid triple (DESIGN.md §1).
    if (c.layout == KVLayout::kSplit && is_fp8(c.kv_dtype)) {
      EXPECT_EQ(c.head_size % 16, 0) << c.name;
    }
  }
}

/// The nine axes of the pairwise matrix, read back from a generated case.
std::array<std::string, 9> axes_of(const CaseConfig& c) {
  std::string feature = "none";
  const int n = (c.softcap != 0) + (c.sliding_window != 0) + c.alibi + c.sinks;
  if (n == 4)
    feature = "all";
  else if (c.softcap != 0)
    feature = "softcap";
  else if (c.sliding_window != 0)
    feature = "window";
  else if (c.alibi)
    feature = "alibi";
  else if (c.sinks)
    feature = "sinks";
  return {to_string(c.layout),
          std::to_string(c.head_size),
          std::to_string(c.block_size),
          std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads),
          to_string(c.dtype),
          c.kv_dtype == c.dtype ? std::string("auto") : to_string(c.kv_dtype),
          feature,
          c.page_pad > 0 ? "pad" : "nopad",
          c.tag};
}

TEST(Matrix, PairwiseCoverageOfEveryAxis) {
  const std::vector<std::vector<std::string>> values = {
      {"split", "nhd", "hnd"},
      {"32", "64", "80", "96", "112", "120", "128", "192", "256"},
      {"1", "16", "32", "544", "2048"},
      {"32/8", "40/40", "64/8", "20/4", "16/1"},  // GQA 4, 1, 8, 5, 16 (= MQA)
      {"fp32", "fp16", "bf16"},
      {"auto", "fp8_e4m3", "fp8_e5m2"},
      {"none", "softcap", "window", "alibi", "sinks", "all"},
      {"nopad", "pad"},
      {"decode", "prefill", "long"}};
  std::set<std::pair<std::pair<int, std::string>, std::pair<int, std::string>>> seen;
  int pairwise_cases = 0;
  for (const CaseConfig& c : matrix_cases(Device::cpu())) {
    if (c.tag != "decode" && c.tag != "prefill" && c.tag != "long") continue;  // named cases
    ++pairwise_cases;
    const auto a = axes_of(c);
    for (int i = 0; i < 9; ++i)
      for (int j = i + 1; j < 9; ++j)
        seen.insert({{i, a[static_cast<std::size_t>(i)]}, {j, a[static_cast<std::size_t>(j)]}});
  }
  int missing = 0;
  for (int i = 0; i < 9; ++i)
    for (int j = i + 1; j < 9; ++j)
      for (const std::string& vi : values[static_cast<std::size_t>(i)])
        for (const std::string& vj : values[static_cast<std::size_t>(j)])
          if (!seen.count({{i, vi}, {j, vj}})) {
            ++missing;
            ADD_FAILURE() << "pair not covered: axis " << i << " = " << vi << ", axis " << j
                          << " = " << vj;
          }
  EXPECT_EQ(missing, 0);
  // Pairwise, not the cross product (which would be 3*9*5*5*3*3*6*2*3 = 218700 cases).
  EXPECT_LT(pairwise_cases, 120);
}

TEST(Matrix, NamedFaultClassesArePresent) {
  std::map<std::string, int> tags;
  for (const CaseConfig& c : matrix_cases(Device::cpu())) ++tags[c.tag];
  for (const char* t :
       {"zeroq",      "allzeroq",    "win1",     "winedge",    "windecprefill", "tilelt",
        "tilegt",     "tile1",       "splits",   "splitsfeat", "padded",        "fp8scale",
        "fp8sat",     "lastrow",     "strided",  "len257_513", "bs2048",        "bigpool",
        "mqaprefill", "longprefill", "manyseqs", "gqa64",      "oddhead",       "bs1056"})
    EXPECT_GT(tags[t], 0) << "no case for fault class " << t;
  EXPECT_EQ(tags["zeroq"], 3) << "one zero-length case per layout";
  EXPECT_EQ(tags["bs2048"], 3) << "block 2048 with head 64, 128 and 256";
  // The heavy GPU-only cases are not in the CPU matrix.
  EXPECT_EQ(tags["len131072"], 0);
  EXPECT_EQ(tags["idx2e31"], 0);
}

TEST(Matrix, WindowEdgeCasesHitTheOffByOneBoundaries) {
  bool eq = false, minus1 = false, plus1 = false;
  for (const CaseConfig& c : matrix_cases(Device::cpu())) {
    if (c.tag != "winedge") continue;
    for (std::size_t i = 0; i < c.seq_lens.size(); ++i) {
      if (c.query_lens[i] != 1) continue;
      eq |= c.seq_lens[i] == c.sliding_window;
      minus1 |= c.sliding_window == c.seq_lens[i] - 1;
      plus1 |= c.sliding_window == c.seq_lens[i] + 1;
    }
  }
  EXPECT_TRUE(eq && minus1 && plus1);
}

TEST(Matrix, QuickSubsetIsSmallAndTouchesEverything) {
  const auto quick = matrix_cases(Device::cpu(), true);
  EXPECT_GE(quick.size(), 30u);
  // 80 before issue 21, plus the fp8 decode fast path's nhd and split cases, head 512 (the
  // tiled kernel's widest instance), per-KV-head device scales and a batch-invariant plan,
  // and two decode cases of the heads between 128 and 256 (80, 192).
  EXPECT_LE(quick.size(), 88u);
  std::set<std::string> combos, heads, blocks, features, tags, ratios;
  bool padded = false;
  for (const CaseConfig& c : quick) {
    const auto a = axes_of(c);
    combos.insert(a[0] + "/" + a[4] + "/" + a[5]);
    heads.insert(a[1]);
    blocks.insert(a[2]);
    features.insert(a[6]);
    ratios.insert(std::to_string(c.num_heads / c.num_kv_heads));
    tags.insert(c.tag);
    padded |= c.page_pad > 0;
  }
  EXPECT_EQ(combos.size(), 27u) << "every layout x dtype x kv dtype";
  for (const char* h : {"32", "64", "80", "96", "112", "120", "128", "192", "256"})
    EXPECT_TRUE(heads.count(h)) << "head size " << h;
  EXPECT_TRUE(heads.count("512")) << "head size 512";
  for (const char* t : {"head512", "devscales", "invariant"})
    EXPECT_TRUE(tags.count(t)) << "tag " << t;
  EXPECT_EQ(blocks.size(), 5u) << "every block size";
  EXPECT_EQ(features.size(), 6u) << "every feature";
  for (const char* r : {"1", "4", "5", "8", "16"})
    EXPECT_TRUE(ratios.count(r)) << "GQA ratio " << r;
  EXPECT_TRUE(padded);
  for (const char* t : {"zeroq", "allzeroq", "win1", "winedge", "tilelt", "tilegt", "splits",
                        "padded", "fp8scale", "lastrow", "strided", "len257_513", "bs2048",
                        "bigpool", "longprefill", "manyseqs", "gqa64", "oddhead"})
    EXPECT_TRUE(tags.count(t)) << "quick subset lacks boundary class " << t;
}

TEST(Matrix, CudaMatrixAddsTheHeavyCases) {
  std::set<std::string> tags;
  for (const CaseConfig& c : matrix_cases(Device::cuda(0))) {
    EXPECT_EQ(c.device, Device::cuda(0));
    tags.insert(c.tag);
  }
  EXPECT_TRUE(tags.count("len131072"));
  EXPECT_TRUE(tags.count("idx2e31"));
  for (const CaseConfig& c : matrix_cases(Device::cuda(0), true)) EXPECT_NE(c.tag, "len131072");
}

TEST(SelectCases, GlobsAndLists) {
  const auto all = matrix_cases(Device::cpu());
  EXPECT_EQ(select_cases(all, "all").size(), all.size());
  EXPECT_TRUE(select_cases(all, "no_such_case").empty());
  const auto zeroq = select_cases(all, "*_zeroq");
  EXPECT_EQ(zeroq.size(), 3u);
  for (const auto& c : zeroq) EXPECT_EQ(c.tag, "zeroq");
  const auto two = select_cases(all, "*_zeroq,*_allzeroq");
  EXPECT_EQ(two.size(), 4u);
  const auto q = select_cases(all, "nhd_bs16_h64_q8kv2_fp16_zero?");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].name, "nhd_bs16_h64_q8kv2_fp16_zeroq");
  // A glob must match the whole name, not a prefix.
  EXPECT_TRUE(select_cases(all, "nhd_bs16").empty());
}

// The patterns of a list are reported when they select nothing (a typo beside a good pattern
// would otherwise go unnoticed), "all" inside a list selects every case, and a case matched by
// several patterns is selected once, in matrix order.
TEST(SelectCases, ReportsPatternsThatMatchNothing) {
  const auto all = matrix_cases(Device::cpu());
  std::vector<std::string> unmatched{"stale"};
  EXPECT_EQ(select_cases(all, "*_zeroq,no_such_case,*_allzeroq,also_none", &unmatched).size(), 4u);
  EXPECT_EQ(unmatched, (std::vector<std::string>{"no_such_case", "also_none"}));
  EXPECT_EQ(select_cases(all, "*_zeroq,*_allzeroq", &unmatched).size(), 4u);
  EXPECT_TRUE(unmatched.empty());
  EXPECT_EQ(select_cases(all, "*_zeroq,all", &unmatched).size(), all.size());
  EXPECT_TRUE(unmatched.empty());
  EXPECT_TRUE(select_cases(all, "nope", &unmatched).empty());
  EXPECT_EQ(unmatched, (std::vector<std::string>{"nope"}));
  const auto twice = select_cases(all, "*_zeroq,*zeroq", &unmatched);
  const auto once = select_cases(all, "*zeroq", &unmatched);
  ASSERT_EQ(twice.size(), once.size());
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i].name, once[i].name);
}

TEST(Tolerance, OneTableAsInTheDesign) {
  EXPECT_EQ(tolerance_for(DType::kFloat32, DType::kFloat32).atol, 1e-5);
  EXPECT_EQ(tolerance_for(DType::kFloat32, DType::kFloat32).rtol, 1e-5);
  EXPECT_EQ(tolerance_for(DType::kFloat16, DType::kFloat16).atol, 1e-3);
  EXPECT_EQ(tolerance_for(DType::kBFloat16, DType::kBFloat16).rtol, 8e-3);
  // fp8 caches: the oracle reads the same dequantised values, so the budget is the query's.
  EXPECT_EQ(tolerance_for(DType::kFloat16, DType::kFloat8E4M3).atol, 1e-3);
  EXPECT_EQ(tolerance_for(DType::kBFloat16, DType::kFloat8E5M2).atol, 8e-3);
}

// DESIGN.md §4, "Tolerance and length": up to kToleranceRefKeys keys per row the table; beyond,
// only atol grows, by 1e-5 * (sqrt(n / 4096) - 1) for every dtype (the fp32 accumulation
// share), so 1M-key rows get 1.6e-4 in fp32 and 1.15e-3 in fp16.
TEST(Tolerance, AccumulationShareGrowsAsTheSquareRootOfTheKeysPerRow) {
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16, b16 = DType::kBFloat16;
  EXPECT_EQ(tolerance_for(f32, f32, 4096).atol, 1e-5);
  EXPECT_EQ(tolerance_for(f32, f32, 17).atol, 1e-5);
  EXPECT_NEAR(tolerance_for(f32, f32, 16384).atol, 2e-5, 1e-12);
  EXPECT_NEAR(tolerance_for(f32, f32, 1 << 20).atol, 1.6e-4, 1e-12);
  EXPECT_NEAR(tolerance_for(f16, f16, 1 << 20).atol, 1.15e-3, 1e-12);
  EXPECT_NEAR(tolerance_for(b16, b16, 1 << 20).atol, 8.15e-3, 1e-12);
  for (DType d : {f32, f16, b16}) {
    EXPECT_EQ(tolerance_for(d, d, 1 << 20).rtol, tolerance_for(d, d).rtol);
    EXPECT_LT(tolerance_for(d, d, 1 << 19).atol, tolerance_for(d, d, 1 << 20).atol);
  }
}

TEST(Tolerance, LongestRowKeysIsTheLongestVisibleRange) {
  CaseConfig c;
  c.seq_lens = {1 << 20, 5000, 9};
  c.query_lens = {0, 16, 1};  // the skipped sequence has no rows
  EXPECT_EQ(longest_row_keys(c), 5000);
  c.sliding_window = 100;
  EXPECT_EQ(longest_row_keys(c), 100);
  c.sliding_window = 0;
  c.query_lens = {0, 0, 0};
  EXPECT_EQ(longest_row_keys(c), 0);
}

TEST(RunCase, ReportsBadConfigurationsAsStatusNotCrash) {
  CaseConfig c;
  c.seq_lens = {4, 5};
  c.query_lens = {1};
  EXPECT_EQ(run_case(c).status.code(), StatusCode::kInvalidArgument);
  c = CaseConfig{};
  c.seq_lens = {2};
  c.query_lens = {3};
  EXPECT_EQ(run_case(c).status.code(), StatusCode::kInvalidArgument);
  // Limits of the library come back as the library's status.
  c = CaseConfig{};
  c.head_size = 520;
  const CaseResult r = run_case(c);
  EXPECT_EQ(r.status.code(), StatusCode::kUnsupported) << r.status.to_string();
  EXPECT_FALSE(r.pass);
  c = CaseConfig{};
  c.sliding_window = -1;
  EXPECT_EQ(run_case(c).status.code(), StatusCode::kInvalidArgument);
  c = CaseConfig{};
  c.layout = KVLayout::kSplit;
  c.kv_dtype = DType::kFloat8E4M3;
  c.head_size = 40;
  EXPECT_EQ(run_case(c).status.code(), StatusCode::kUnsupported);
  // planned_seq_lens: one per sequence, each in [query_len, seq_len].
  for (const std::vector<int>& planned : {std::vector<int>{10}, std::vector<int>{10, 10, 10},
                                          std::vector<int>{41, 10}, std::vector<int>{10, 0}}) {
    c = CaseConfig{};
    c.seq_lens = {40, 30};
    c.query_lens = {1, 5};
    c.planned_seq_lens = planned;
    const CaseResult bad = run_case(c);
    EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument) << planned.size();
    EXPECT_NE(bad.status.message().find("planned"), std::string::npos) << bad.status.to_string();
  }
  c.planned_seq_lens = {20, 5};  // shorter than the run's lengths: valid
  const CaseResult grown = run_case(c);
  EXPECT_TRUE(grown.status.ok()) << grown.status.to_string();
  EXPECT_TRUE(grown.pass) << grown.detail;
}

TEST(RunCase, CudaCaseWithoutCudaIsDeviceUnavailable) {
  // Runs in builds without CUDA and in CUDA builds on machines without a GPU.
  if (query_device(Device::cuda(0)).ok()) GTEST_SKIP() << "a GPU is present";
  CaseConfig c;
  c.device = Device::cuda(0);
  EXPECT_EQ(run_case(c).status.code(), StatusCode::kDeviceUnavailable);
}

TEST(RunCase, AValidCaseChecksEveryOutputElement) {
  CaseConfig c;
  c.seq_lens = {17, 5, 9};
  c.query_lens = {1, 0, 4};
  c.tag = "unit";
  const CaseResult r = run_case(c);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_TRUE(r.pass) << r.detail;
  EXPECT_TRUE(r.writer_exact);
  // 5 rows x 8 heads x 64 dims of out, plus 5 x 8 lse values.
  EXPECT_EQ(r.elements_checked, 5 * 8 * 64 + 5 * 8);
  EXPECT_LE(r.worst_ratio, 1.0);
}

}  // namespace
}  // namespace pagedattn::testing
