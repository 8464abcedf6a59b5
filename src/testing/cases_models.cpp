// Matrix cases with the head shapes of real models that the pairwise axes do not contain.
// SmolLM2-135M (the model of python/pagedattn/models, issue 20): 9 query heads over 3 KV heads
// of 64, so an odd number of KV heads and a GQA ratio of 3, which no kHeads entry of
// cases.cpp has (ratios 4, 1, 8, 5, 16), and which the CUDA decode kernels group differently
// from the power-of-two ratios.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "src/testing/cases_models.h"

namespace pagedattn::testing {

namespace {

/// The seed from the name, as cases.cpp's finish(): adding a case never changes another's.
std::uint64_t name_seed(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a, 64-bit
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h & 0xFFFFFFFFull;
}

CaseConfig model_case(Device dev, KVLayout layout, int block_size, DType dtype, DType kv,
                      const std::vector<std::pair<int, int>>& lens, const char* tag) {
  CaseConfig c;
  c.device = dev;
  c.layout = layout;
  c.block_size = block_size;
  c.num_heads = 9;
  c.num_kv_heads = 3;
  c.head_size = 64;
  c.dtype = dtype;
  c.kv_dtype = kv;
  c.seq_lens.clear();
  c.query_lens.clear();
  for (const auto& [s, q] : lens) {
    c.seq_lens.push_back(s);
    c.query_lens.push_back(q);
  }
  c.extra_blocks = block_size >= 512 ? 1 : 3;
  c.tag = tag;
  return c;
}

void add(CaseConfig c, std::vector<CaseConfig>* out) {
  c.name = case_name(c);
  c.seed = name_seed(c.name);
  out->push_back(std::move(c));
}

}  // namespace

void add_model_cases(Device dev, bool quick, std::vector<CaseConfig>* out) {
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16, b16 = DType::kBFloat16;
  // One engine step as the generate loop makes it: decodes of several lengths (one token, a
  // block edge, one past a 544 block) beside a whole prompt and a later prefill chunk.
  const std::vector<std::pair<int, int>> mixed = {{1, 1},  {17, 1},   {100, 1},
                                                  {545, 1}, {40, 40}, {300, 23}};
  // Decode only: the CUDA decode fast paths (per KV head, 3 query rows each).
  const std::vector<std::pair<int, int>> decode = {{1, 1}, {33, 1}, {544, 1}, {1000, 1}, {7, 1}};
  // None in the quick subset: it is at its size limit (test_cases.cpp); the sanitizer can
  // select these by name (--gtest_filter='*smollm2*').
  if (quick) return;
  for (KVLayout l : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kSplit}) {
    for (DType dt : {f32, f16, b16})
      for (int bs : {16, 544}) add(model_case(dev, l, bs, dt, dt, mixed, "smollm2"), out);
    add(model_case(dev, l, 16, b16, b16, decode, "smollm2dec"), out);
    // KV split forced to 3: the split states of a 3-row group and their merge.
    CaseConfig s = model_case(dev, l, 16, b16, b16, decode, "smollm2dec");
    s.plan.num_splits = 3;
    add(s, out);
    // fp8 cache with vLLM's test scales (stored values well inside fp8).
    CaseConfig f = model_case(dev, l, 16, b16, DType::kFloat8E4M3, mixed, "smollm2");
    f.k_scale = 0.5f;
    f.v_scale = 0.25f;
    add(f, out);
  }
  // The model's sliding-window variant is not SmolLM2's, but a window over a GQA-3 group
  // crosses the same row grouping: window 100 on the mixed step, bf16, 544-token blocks.
  CaseConfig w = model_case(dev, KVLayout::kNHD, 544, b16, b16, mixed, "smollm2");
  w.sliding_window = 100;
  add(w, out);
}

}  // namespace pagedattn::testing
