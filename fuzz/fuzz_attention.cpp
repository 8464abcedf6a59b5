// libFuzzer target: plan_attention + run_attention on the CPU backend.
//
// Mode 0 (most inputs): a whole test case read by read_case and run by the harness's run_case,
// which writes the cache through write_kv, checks it against the writer oracle bit for bit,
// runs attention twice (determinism), compares with reference_attention and checks that no
// byte outside the outputs' rows changed. Every accepted input must pass; a rejected one must
// be rejected as invalid or unsupported, never as an internal error.
// Mode 1: valid shapes, but block_table / seq_lens / query_start_loc values taken raw from
// the input (out-of-range block ids, negative or inconsistent lengths, a query_start_loc that
// steps back): plan_attention must reject them or the run must match the oracle.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fuzz/case_codec.h"
#include "fuzz/fuzz_bytes.h"
#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"
#include "src/testing/harness.h"

namespace pagedattn::fuzz {
namespace {

[[noreturn]] void fail(const std::string& what) { fuzz::fail("fuzz_attention", what); }

// The kernels compute logits (scale * q.k) in fp32; the oracle in double. A case whose logits
// can leave fp32's range (the codec draws any float as the softmax scale: 3.4e38 overflows
// once log2(e) is folded in, and scale * q.k beyond 2^128 is inf) gets NaN from the kernels
// where the oracle is finite: outside the numeric domain, so not compared. The bound: the
// harness fills q and K with values in [-1, 1], an fp8 K dequantises to at most
// max(1, k_scale * 2) (the per-head tensors scale k_scale by up to 2), and the dot has
// head_size terms; 2^96 leaves room for log2(e) and the exp's argument.
bool logits_in_fp32_range(const testing::CaseConfig& c) {
  if (!(std::isfinite(c.scale) && c.scale > 0)) return true;  // refused by validation
  double k_max = 1.0;
  if (is_fp8(c.kv_dtype) && std::isfinite(c.k_scale) && c.k_scale > 0) {
    k_max = std::max(1.0, 2.0 * static_cast<double>(c.k_scale));
  }
  return static_cast<double>(c.scale) * std::max(1, c.head_size) * k_max <= 0x1p96;
}

void run_case_mode(ByteReader& in) {
  const auto c = read_case(in);
  if (!c) return;
  const testing::CaseResult r = testing::run_case(*c);
  if (!r.status.ok()) {
    if (r.status.code() == StatusCode::kInternal)
      fail(testing::case_name(*c) + ": " + r.status.to_string());
    return;
  }
  // Still run (the sanitizers see every access), but not held to the oracle.
  if (!r.pass && logits_in_fp32_range(*c)) fail(testing::case_name(*c) + ": " + r.detail);
}

// Metadata values as the input gives them, biased towards the edges of their valid range.
std::int32_t metadata_value(ByteReader& in, std::int32_t lo, std::int32_t hi) {
  switch (in.pick(4)) {
    case 0: return static_cast<std::int32_t>(in.u32());
    case 1: return in.flag() ? lo - 1 : hi + 1;
    default: return lo + static_cast<std::int32_t>(in.u16() % (hi - lo + 1));
  }
}

void raw_metadata_mode(ByteReader& in) {
  constexpr KVLayout kLayouts[] = {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND};
  constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  KVCacheSpec spec;
  spec.layout = kLayouts[in.pick(3)];
  spec.dtype = kDtypes[in.pick(3)];
  spec.head_size = 8 * in.range(1, 8);
  spec.num_kv_heads = in.range(1, 2);
  spec.block_size = in.range(1, 40);
  spec.num_blocks = in.range(1, 24);
  const int num_heads = spec.num_kv_heads * in.range(1, 3);
  const int num_seqs = in.range(1, 4);
  const int width = in.range(0, 12);  // block table entries per sequence
  const int num_tokens = in.range(0, 40);
  const std::int32_t max_len = width * spec.block_size;

  std::vector<std::int32_t> block_table(static_cast<std::size_t>(num_seqs * width));
  for (auto& b : block_table) b = metadata_value(in, 0, static_cast<std::int32_t>(spec.num_blocks - 1));
  std::vector<std::int32_t> seq_lens(static_cast<std::size_t>(num_seqs));
  for (auto& s : seq_lens) s = metadata_value(in, 0, max_len);
  std::vector<std::int32_t> qsl(static_cast<std::size_t>(num_seqs + 1), 0);
  for (int s = 1; s <= num_seqs; ++s)
    qsl[static_cast<std::size_t>(s)] =
        in.flag() ? metadata_value(in, 0, num_tokens)
                  : qsl[static_cast<std::size_t>(s - 1)] + in.range(0, 4);
  if (in.flag()) qsl[static_cast<std::size_t>(num_seqs)] = num_tokens;

  auto elems = kv_cache_elements(spec);
  if (!elems.ok()) fail("kv_cache_elements: " + elems.status().to_string());
  const std::size_t es = dtype_size(spec.dtype);
  std::vector<std::uint8_t> k(static_cast<std::size_t>(*elems) * es), v(k.size());
  const std::int64_t q_elems = std::int64_t{num_tokens} * num_heads * spec.head_size;
  std::vector<std::uint8_t> q(static_cast<std::size_t>(q_elems) * es);
  const std::uint64_t seed = in.u64();
  fill_uniform(k.data(), spec.dtype, static_cast<std::int64_t>(k.size() / es), seed);
  fill_uniform(v.data(), spec.dtype, static_cast<std::int64_t>(v.size() / es), seed + 1);
  fill_uniform(q.data(), spec.dtype, static_cast<std::int64_t>(q.size() / es), seed + 2);
  auto cache = make_kv_cache(spec, k.data(), v.data());
  if (!cache.ok()) fail("make_kv_cache: " + cache.status().to_string());

  std::vector<std::uint8_t> out(q.size(), 0xA5);
  const std::vector<std::uint8_t> out_before = out;
  std::vector<float> lse(static_cast<std::size_t>(num_tokens * num_heads), 0.0f);
  AttentionArgs args;
  args.query = TensorView::contiguous(q.data(), spec.dtype, {num_tokens, num_heads, spec.head_size});
  args.cache = *cache;
  args.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {num_seqs, width});
  args.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {num_seqs});
  args.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {num_seqs + 1});
  args.out = TensorView::contiguous(out.data(), spec.dtype, {num_tokens, num_heads, spec.head_size});
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {num_tokens, num_heads});
  args.params.scale = default_scale(spec.head_size);

  auto plan = plan_attention(args, HostMetadata::from_args(args));
  if (!plan.ok()) {
    if (plan.status().code() != StatusCode::kInvalidArgument &&
        plan.status().code() != StatusCode::kUnsupported)
      fail("plan_attention: " + plan.status().to_string());
    if (out != out_before) fail("plan_attention wrote the output of a rejected call");
    return;
  }
  std::vector<std::uint8_t> ws(plan->workspace_bytes() + kWorkspaceAlignment);
  void* ws_ptr = ws.data() + (kWorkspaceAlignment - reinterpret_cast<std::uintptr_t>(ws.data()) %
                                                      kWorkspaceAlignment) % kWorkspaceAlignment;
  Status st = run_attention(*plan, args, plan->workspace_bytes() ? ws_ptr : nullptr,
                            plan->workspace_bytes());
  if (!st.ok()) fail("run_attention after a successful plan: " + st.to_string());

  std::vector<float> ref_out(static_cast<std::size_t>(q_elems)), ref_lse(lse.size());
  AttentionArgs ra = args;
  ra.out = TensorView::contiguous(ref_out.data(), DType::kFloat32, {num_tokens, num_heads, spec.head_size});
  ra.lse = TensorView::contiguous(ref_lse.data(), DType::kFloat32, {num_tokens, num_heads});
  st = reference_attention(ra);
  if (!st.ok()) fail("reference_attention rejects what plan_attention accepted: " + st.to_string());
  const testing::Tolerance tol = testing::tolerance_for(spec.dtype, spec.dtype);
  const auto check = [&](double got, double ref, const char* what, std::int64_t i) {
    const bool both_nan = std::isnan(got) && std::isnan(ref);
    if (!both_nan && !(std::fabs(got - ref) <= tol.atol + tol.rtol * std::fabs(ref)))
      fail(std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(got) +
           ", reference " + std::to_string(ref));
  };
  for (std::int64_t i = 0; i < q_elems; ++i)
    check(numeric::load_as_float(out.data(), spec.dtype, i), ref_out[static_cast<std::size_t>(i)], "out", i);
  for (std::size_t i = 0; i < lse.size(); ++i)
    check(lse[i], ref_lse[i], "lse", static_cast<std::int64_t>(i));
}

}  // namespace
}  // namespace pagedattn::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pagedattn::fuzz::ByteReader in(data, size);
  if (in.pick(8) == 7)
    pagedattn::fuzz::raw_metadata_mode(in);
  else
    pagedattn::fuzz::run_case_mode(in);
  return 0;
}
