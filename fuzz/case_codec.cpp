#include "fuzz/case_codec.h"

#include <cmath>

namespace pagedattn::fuzz {

using testing::CaseConfig;

namespace {

constexpr KVLayout kLayouts[] = {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND};
constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr DType kFp8[] = {DType::kFloat8E4M3, DType::kFloat8E5M2};

// Head sizes: codes 0..32 are multiples of 8 (0 included, an error), codes above give every
// other size (1..267), mostly errors, so that a mutation of one byte crosses the boundary.
int head_size_of(int code) { return code <= 32 ? code * 8 : code - 32; }
int code_of_head_size(int h) { return h % 8 == 0 && h / 8 <= 32 ? h / 8 : h + 32; }

// Scales and softcaps: a few meaningful values, or any float bit pattern (NaN, inf, negative).
float read_special(ByteReader& in, const float (&values)[3]) {
  const int k = in.pick(4);
  return k < 3 ? values[k] : in.f32();
}
void write_special(ByteWriter& out, const float (&values)[3], float v) {
  for (int k = 0; k < 3; ++k)
    if (std::memcmp(&values[k], &v, sizeof v) == 0) return out.pick(k);
  out.pick(3), out.f32(v);
}
constexpr float kSoftcaps[3] = {0.0f, 5.0f, 30.0f};
constexpr float kKVScales[3] = {1.0f, 0.0f, 0.5f};
constexpr float kScales[3] = {0.0f, 0.125f, 2.0f};

std::int64_t work(const CaseConfig& c) {
  std::int64_t w = 0;
  for (std::size_t s = 0; s < c.seq_lens.size(); ++s)
    w += std::int64_t{c.seq_lens[s]} * (c.query_lens[s] + 1);
  return w * c.num_heads * c.head_size;
}

}  // namespace

std::optional<CaseConfig> read_case(ByteReader& in) {
  CaseConfig c;
  c.device = Device::cpu();
  c.layout = kLayouts[in.pick(3)];
  c.head_size = head_size_of(in.range(0, 299));
  c.num_kv_heads = in.range(0, kMaxKVHeads);
  c.num_heads = c.num_kv_heads * in.range(0, kMaxGroup);
  if (in.flag()) c.num_heads += in.range(-2, 2);  // not a multiple of num_kv_heads, or < 0
  c.block_size = in.range(0, kMaxBlockSize);
  c.dtype = kDtypes[in.pick(3)];
  const int kv = in.pick(3);
  c.kv_dtype = kv == 0 ? c.dtype : kFp8[kv - 1];
  const int num_seqs = in.range(0, kMaxSeqs);
  c.seq_lens.assign(static_cast<std::size_t>(num_seqs), 0);
  c.query_lens.assign(static_cast<std::size_t>(num_seqs), 0);
  for (int s = 0; s < num_seqs; ++s) {
    c.seq_lens[static_cast<std::size_t>(s)] = in.range(0, kMaxSeqLen);
    c.query_lens[static_cast<std::size_t>(s)] = in.range(0, kMaxQueryLen);
  }
  if (in.flag())
    for (int s = 0; s < num_seqs; ++s) c.planned_seq_lens.push_back(in.range(0, kMaxSeqLen));
  c.sliding_window = in.flag() ? in.range(-1, kMaxSeqLen) : 0;
  c.softcap = read_special(in, kSoftcaps);
  c.alibi = in.flag();
  c.sinks = in.flag();
  c.lse = in.flag();
  c.page_pad = in.range(-1, kMaxPad);
  c.value_page_pad = in.range(-1, kMaxPad);
  c.token_pad = in.range(0, kMaxPad);
  c.head_pad = in.range(0, kMaxPad);
  c.out_token_pad = in.range(-1, kMaxPad);
  c.seed = in.u64();
  c.extra_blocks = in.range(0, 7);
  c.plan.num_splits = in.range(-1, 255);
  c.plan.tile_tokens = in.range(-1, 2048);
  c.plan.num_threads = in.range(0, 3);
  c.k_scale = read_special(in, kKVScales);
  c.v_scale = read_special(in, kKVScales);
  c.scale = read_special(in, kScales);
  c.in_place = in.flag();
  c.strided_metadata = in.flag();
  c.slot_dtype = in.flag() ? DType::kInt32 : DType::kInt64;
  c.nan_query = in.flag();
  c.neg_inf_keys = in.flag();
  c.neg_inf_sinks = in.flag();
  // Fields added after the first corpus: drawn last, so that older inputs read as before (an
  // exhausted reader gives zeros: host scales, no batch invariance).
  c.scales = static_cast<testing::ScaleMode>(in.pick(3));
  c.plan.batch_invariant = in.flag();
  c.plan.no_wgmma_prefill = in.flag();
  if (work(c) > kMaxWork) return std::nullopt;
  return c;
}

const char* write_case(const CaseConfig& c, ByteWriter& out) {
  const auto fits = [](std::int64_t v, std::int64_t lo, std::int64_t hi) { return lo <= v && v <= hi; };
  const int num_seqs = static_cast<int>(c.seq_lens.size());
  const int group = c.num_kv_heads > 0 ? c.num_heads / c.num_kv_heads : 0;
  if (c.device.type != DeviceType::kCPU) return "device";
  if (!fits(num_seqs, 0, kMaxSeqs) || c.query_lens.size() != c.seq_lens.size()) return "num_seqs";
  if (!fits(c.num_kv_heads, 0, kMaxKVHeads)) return "num_kv_heads";
  if (group * c.num_kv_heads != c.num_heads || !fits(group, 0, kMaxGroup)) return "num_heads";
  if (!fits(code_of_head_size(c.head_size), 0, 299)) return "head_size";
  if (!fits(c.block_size, 0, kMaxBlockSize)) return "block_size";
  if (!fits(c.sliding_window, -1, kMaxSeqLen)) return "sliding_window";
  if (!fits(c.page_pad, -1, kMaxPad) || !fits(c.value_page_pad, -1, kMaxPad) ||
      !fits(c.token_pad, 0, kMaxPad) || !fits(c.head_pad, 0, kMaxPad) ||
      !fits(c.out_token_pad, -1, kMaxPad))
    return "padding";
  if (!fits(c.extra_blocks, 0, 7)) return "extra_blocks";
  if (!fits(c.plan.num_splits, -1, 255) || !fits(c.plan.tile_tokens, -1, 2048) ||
      !fits(c.plan.num_threads, 0, 3))
    return "plan";
  for (int s = 0; s < num_seqs; ++s)
    if (!fits(c.seq_lens[static_cast<std::size_t>(s)], 0, kMaxSeqLen) ||
        !fits(c.query_lens[static_cast<std::size_t>(s)], 0, kMaxQueryLen) ||
        (!c.planned_seq_lens.empty() && !fits(c.planned_seq_lens[static_cast<std::size_t>(s)], 0, kMaxSeqLen)))
      return "lengths";
  if (work(c) > kMaxWork) return "work";
  int layout = 0, dtype = 0, kv = 0;
  while (kLayouts[layout] != c.layout) ++layout;
  while (kDtypes[dtype] != c.dtype) ++dtype;
  if (c.kv_dtype != c.dtype) kv = c.kv_dtype == DType::kFloat8E4M3 ? 1 : 2;
  out.pick(layout);
  out.range(0, code_of_head_size(c.head_size));
  out.range(0, c.num_kv_heads);
  out.range(0, group);
  out.flag(false);
  out.range(0, c.block_size);
  out.pick(dtype);
  out.pick(kv);
  out.range(0, num_seqs);
  for (int s = 0; s < num_seqs; ++s) {
    out.range(0, c.seq_lens[static_cast<std::size_t>(s)]);
    out.range(0, c.query_lens[static_cast<std::size_t>(s)]);
  }
  out.flag(!c.planned_seq_lens.empty());
  for (int v : c.planned_seq_lens) out.range(0, v);
  out.flag(c.sliding_window != 0);
  if (c.sliding_window != 0) out.range(-1, c.sliding_window);
  write_special(out, kSoftcaps, c.softcap);
  out.flag(c.alibi);
  out.flag(c.sinks);
  out.flag(c.lse);
  out.range(-1, static_cast<int>(c.page_pad));
  out.range(-1, static_cast<int>(c.value_page_pad));
  out.range(0, static_cast<int>(c.token_pad));
  out.range(0, static_cast<int>(c.head_pad));
  out.range(-1, static_cast<int>(c.out_token_pad));
  out.u64(c.seed);
  out.range(0, c.extra_blocks);
  out.range(-1, c.plan.num_splits);
  out.range(-1, c.plan.tile_tokens);
  out.range(0, c.plan.num_threads);
  write_special(out, kKVScales, c.k_scale);
  write_special(out, kKVScales, c.v_scale);
  write_special(out, kScales, c.scale);
  out.flag(c.in_place);
  out.flag(c.strided_metadata);
  out.flag(c.slot_dtype == DType::kInt32);
  out.flag(c.nan_query);
  out.flag(c.neg_inf_keys);
  out.flag(c.neg_inf_sinks);
  out.pick(static_cast<int>(c.scales));
  out.flag(c.plan.batch_invariant);
  out.flag(c.plan.no_wgmma_prefill);
  return nullptr;
}

}  // namespace pagedattn::fuzz
