// check_batch_invariance (invariance.h): the subject sequence alone and in a batch.
#include "src/testing/invariance.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "src/core/numeric.h"
#include "src/testing/fill.h"
#include "src/testing/guarded_buffer.h"

namespace pagedattn::testing {
namespace {

using detail::Buffer;

struct Seq {
  int seq_len = 0;
  int query_len = 0;
  std::uint64_t id = 0;  // seeds its data: the same sequence has the same inputs in any batch
};

struct RunOutput {
  std::vector<std::uint8_t> out, lse;  // [T, H, D] dtype, [T, H] fp32
  KernelChoice choice;
};

template <class T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Result<RunOutput> run_batch(const InvarianceConfig& c, const std::vector<Seq>& seqs) {
  const std::int64_t H = c.num_heads, KVH = c.num_kv_heads, D = c.head_size, BS = c.block_size;
  const int n = static_cast<int>(seqs.size());
  const std::size_t es = dtype_size(c.dtype);
  std::int64_t blocks = 0, width = 1, kv_rows = 0, T = 0;
  for (const Seq& s : seqs) {
    const std::int64_t b = (s.seq_len + BS - 1) / BS;
    blocks += b;
    width = std::max(width, b);
    kv_rows += s.seq_len;
    T += s.query_len;
  }
  const std::int64_t pool = blocks + 1;

  // Inputs of each sequence from its own generator: K/V rows [seq_len, 2, KVH, D] then Q rows.
  std::vector<std::uint8_t> kv(static_cast<std::size_t>(kv_rows * 2 * KVH * D) * es);
  std::vector<std::uint8_t> q(static_cast<std::size_t>(T * H * D) * es);
  std::vector<std::int64_t> slots;
  std::vector<std::int32_t> block_table(static_cast<std::size_t>(n * width), 0);
  std::vector<std::int32_t> seq_lens, qsl{0};
  std::int64_t next_block = 0, row = 0, tok = 0;
  for (int i = 0; i < n; ++i) {
    const Seq& s = seqs[static_cast<std::size_t>(i)];
    SplitMix64 rng(c.seed * kGolden + 0x9E37ull * (s.id + 1));
    const std::int64_t b = (s.seq_len + BS - 1) / BS;
    // Blocks in reverse order, so that the subject's physical blocks differ between runs.
    for (std::int64_t j = 0; j < b; ++j)
      block_table[static_cast<std::size_t>(i * width + j)] =
          static_cast<std::int32_t>(pool - 1 - (next_block + j));
    for (std::int64_t t = 0; t < s.seq_len; ++t, ++row) {
      for (std::int64_t e = 0; e < 2 * KVH * D; ++e)
        numeric::store_from_float(kv.data(), c.dtype, row * 2 * KVH * D + e,
                                  rng.uniform(-1.0f, 1.0f));
      slots.push_back(static_cast<std::int64_t>(block_table[static_cast<std::size_t>(i * width + t / BS)]) * BS +
                      t % BS);
    }
    for (std::int64_t t = 0; t < s.query_len; ++t, ++tok)
      for (std::int64_t e = 0; e < H * D; ++e)
        numeric::store_from_float(q.data(), c.dtype, tok * H * D + e, rng.uniform(-1.0f, 1.0f));
    next_block += b;
    seq_lens.push_back(s.seq_len);
    qsl.push_back(static_cast<std::int32_t>(tok));
  }

  KVCacheSpec spec;
  spec.layout = c.layout;
  spec.num_blocks = pool;
  spec.block_size = c.block_size;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_size = c.head_size;
  spec.dtype = c.kv_dtype;
  auto elems = kv_cache_elements(spec);
  if (!elems.ok()) return elems.status();
  const std::vector<std::uint8_t> cache_init(
      static_cast<std::size_t>(*elems) * dtype_size(c.kv_dtype), 0);
  const Device dev = c.device;
  auto b_k = Buffer::create(dev, cache_init, 0);
  if (!b_k.ok()) return b_k.status();
  auto b_v = Buffer::create(dev, cache_init, 0);
  if (!b_v.ok()) return b_v.status();
  auto b_kv = Buffer::create(dev, kv, 0);
  if (!b_kv.ok()) return b_kv.status();
  auto b_slots = Buffer::create(dev, bytes_of(slots), 0);
  if (!b_slots.ok()) return b_slots.status();
  auto b_q = Buffer::create(dev, q, 0);
  if (!b_q.ok()) return b_q.status();
  auto b_out = Buffer::create(dev, std::vector<std::uint8_t>(q.size(), 0xFF), 0);
  if (!b_out.ok()) return b_out.status();
  auto b_lse = Buffer::create(dev, std::vector<std::uint8_t>(static_cast<std::size_t>(T * H) * 4, 0xFF), 0);
  if (!b_lse.ok()) return b_lse.status();
  auto b_bt = Buffer::create(dev, bytes_of(block_table), 0);
  if (!b_bt.ok()) return b_bt.status();
  auto b_sl = Buffer::create(dev, bytes_of(seq_lens), 0);
  if (!b_sl.ok()) return b_sl.status();
  auto b_qsl = Buffer::create(dev, bytes_of(qsl), 0);
  if (!b_qsl.ok()) return b_qsl.status();

  const float scale8 = is_fp8(c.kv_dtype) ? 1.0f / 64.0f : 1.0f;
  auto cache = make_kv_cache(spec, b_k->data(), b_v->data(), dev, scale8, scale8);
  if (!cache.ok()) return cache.status();
  const std::int64_t kv_stride = 2 * KVH * D;
  const TensorView key = TensorView::strided(b_kv->data(), c.dtype, {kv_rows, KVH, D}, {kv_stride, D, 1}, dev);
  const TensorView value =
      TensorView::strided(static_cast<std::uint8_t*>(b_kv->data()) + KVH * D * static_cast<std::int64_t>(es),
                          c.dtype, {kv_rows, KVH, D}, {kv_stride, D, 1}, dev);
  WriteKVOptions wopts;
  const TensorView host_slots = TensorView::contiguous(slots.data(), DType::kInt64, {kv_rows});
  if (dev.type != DeviceType::kCPU) wopts.host_slot_mapping = host_slots;
  PAGEDATTN_RETURN_IF_ERROR(write_kv(key, value,
                                     TensorView::contiguous(b_slots->data(), DType::kInt64, {kv_rows}, dev),
                                     *cache, nullptr, wopts));

  AttentionArgs args;
  args.query = TensorView::contiguous(b_q->data(), c.dtype, {T, H, D}, dev);
  args.out = TensorView::contiguous(b_out->data(), c.dtype, {T, H, D}, dev);
  args.lse = TensorView::contiguous(b_lse->data(), DType::kFloat32, {T, H}, dev);
  args.cache = *cache;
  args.block_table = TensorView::contiguous(b_bt->data(), DType::kInt32, {n, width}, dev);
  args.seq_lens = TensorView::contiguous(b_sl->data(), DType::kInt32, {n}, dev);
  args.query_start_loc = TensorView::contiguous(b_qsl->data(), DType::kInt32, {n + 1}, dev);
  args.params.scale = 6.0f * default_scale(c.head_size);  // a peaked softmax, as run_case's
  args.params.sliding_window = c.sliding_window;
  args.params.softcap = c.softcap;
  std::vector<float> alibi(static_cast<std::size_t>(H)), sinks(static_cast<std::size_t>(H));
  for (std::int64_t h = 0; h < H; ++h) {
    alibi[static_cast<std::size_t>(h)] = std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(H));
    sinks[static_cast<std::size_t>(h)] = 0.5f - 0.25f * static_cast<float>(h);
  }
  auto b_alibi = Buffer::create(dev, bytes_of(alibi), 0);
  if (!b_alibi.ok()) return b_alibi.status();
  auto b_sinks = Buffer::create(dev, bytes_of(sinks), 0);
  if (!b_sinks.ok()) return b_sinks.status();
  if (c.alibi) args.params.alibi_slopes = TensorView::contiguous(b_alibi->data(), DType::kFloat32, {H}, dev);
  if (c.sinks) args.params.sinks = TensorView::contiguous(b_sinks->data(), DType::kFloat32, {H}, dev);
  HostMetadata host;
  host.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {n, width});
  host.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {n});
  host.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {n + 1});
  auto plan = plan_attention(args, host, c.plan);
  if (!plan.ok()) return plan.status();
  RunOutput r;
  r.choice = plan->choice();
  PAGEDATTN_RETURN_IF_ERROR(paged_attention(args, host, nullptr, c.plan));
  PAGEDATTN_RETURN_IF_ERROR(b_out->download(&r.out));
  PAGEDATTN_RETURN_IF_ERROR(b_lse->download(&r.lse));
  return r;
}

}  // namespace

InvarianceResult check_batch_invariance(const InvarianceConfig& c) {
  InvarianceResult res;
  const Seq subject{c.subject.first, c.subject.second, 0};
  std::vector<Seq> batch;
  std::int64_t offset = 0;  // the subject's first token in the batch
  const int at = std::clamp(c.subject_index, 0, static_cast<int>(c.others.size()));
  for (int i = 0; i <= static_cast<int>(c.others.size()); ++i) {
    if (i == at) batch.push_back(subject);
    if (i < static_cast<int>(c.others.size())) {
      const auto& o = c.others[static_cast<std::size_t>(i)];
      if (i < at) offset += o.second;
      batch.push_back({o.first, o.second, static_cast<std::uint64_t>(i) + 1});
    }
  }
  auto alone = run_batch(c, {subject});
  if (!alone.ok()) {
    res.status = alone.status();
    return res;
  }
  auto batched = run_batch(c, batch);
  if (!batched.ok()) {
    res.status = batched.status();
    return res;
  }
  res.alone = alone->choice;
  res.batched = batched->choice;
  const std::size_t row_out = static_cast<std::size_t>(c.num_heads) * c.head_size * dtype_size(c.dtype);
  const std::size_t row_lse = static_cast<std::size_t>(c.num_heads) * 4;
  const std::size_t q = static_cast<std::size_t>(subject.query_len);
  const std::size_t o = static_cast<std::size_t>(offset);
  res.out_equal = std::memcmp(alone->out.data(), batched->out.data() + o * row_out, q * row_out) == 0;
  res.lse_equal = std::memcmp(alone->lse.data(), batched->lse.data() + o * row_lse, q * row_lse) == 0;
  if (!res.out_equal) {
    for (std::size_t b = 0; b < q * row_out; ++b)
      if (alone->out[b] != batched->out[o * row_out + b]) {
        res.detail = fmt::format("out differs first at byte {} of the subject's rows", b);
        break;
      }
  }
  if (!res.lse_equal) {
    const auto* la = reinterpret_cast<const float*>(alone->lse.data());
    const auto* lb = reinterpret_cast<const float*>(batched->lse.data() + o * row_lse);
    for (std::size_t i = 0; i < q * static_cast<std::size_t>(c.num_heads); ++i)
      if (std::memcmp(&la[i], &lb[i], 4) != 0) {
        res.detail += fmt::format("{}lse[{}] alone {:.9g}, in the batch {:.9g}",
                                  res.detail.empty() ? "" : "; ", i, la[i], lb[i]);
        break;
      }
  }
  return res;
}

EachAloneResult check_each_sequence_alone(const InvarianceConfig& c,
                                          const std::vector<std::pair<int, int>>& batch) {
  EachAloneResult res;
  std::vector<Seq> seqs;
  for (std::size_t i = 0; i < batch.size(); ++i)
    seqs.push_back({batch[i].first, batch[i].second, static_cast<std::uint64_t>(i) + 1});
  auto batched = run_batch(c, seqs);
  if (!batched.ok()) {
    res.status = batched.status();
    return res;
  }
  res.batched = batched->choice;
  const std::size_t row_out = static_cast<std::size_t>(c.num_heads) * c.head_size * dtype_size(c.dtype);
  const std::size_t row_lse = static_cast<std::size_t>(c.num_heads) * 4;
  std::size_t offset = 0;  // sequence i's first token in the batch
  for (std::size_t i = 0; i < seqs.size(); offset += static_cast<std::size_t>(seqs[i].query_len), ++i) {
    const std::size_t q = static_cast<std::size_t>(seqs[i].query_len);
    if (q == 0) continue;
    auto alone = run_batch(c, {seqs[i]});
    if (!alone.ok()) {
      res.status = alone.status();
      return res;
    }
    ++res.checked;
    const bool out_equal =
        std::memcmp(alone->out.data(), batched->out.data() + offset * row_out, q * row_out) == 0;
    const bool lse_equal =
        std::memcmp(alone->lse.data(), batched->lse.data() + offset * row_lse, q * row_lse) == 0;
    if (out_equal && lse_equal) continue;
    res.differing.push_back(static_cast<int>(i));
    if (!res.detail.empty()) continue;
    if (!out_equal) {
      for (std::size_t b = 0; b < q * row_out; ++b)
        if (alone->out[b] != batched->out[offset * row_out + b]) {
          res.detail = fmt::format(
              "sequence {} (seq_len {}, query_len {}): out differs first at byte {} of its rows "
              "(alone: {}, in the batch: {})",
              i, seqs[i].seq_len, seqs[i].query_len, b, to_string(alone->choice.kernel),
              to_string(batched->choice.kernel));
          break;
        }
    } else {
      res.detail = fmt::format("sequence {} (seq_len {}, query_len {}): lse differs", i,
                               seqs[i].seq_len, seqs[i].query_len);
    }
  }
  return res;
}

}  // namespace pagedattn::testing
