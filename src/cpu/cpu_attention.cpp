// The CPU backend's attention (DESIGN.md §3): tiled online softmax in fp32, threads over
// (sequence, KV head, chunk of query rows). A different code from the oracle in reference.cpp
// on purpose: it walks the KV sequence in tiles whose size has nothing to do with block_size,
// converts each K/V element once per tile and reuses it for every query head of a GQA group
// and every query row of the chunk, and keeps a running max / sum instead of two passes.
//
// Precision (DESIGN.md §4, "Tolerance and length"): the weights and weighted values are summed
// in fp32 into a partial state of fewer than 2 * kFlushKeys keys, which is then added to the
// fp64 running state (sum l, accumulator acc) that spans the whole sequence. One fp32 running
// sum over every key, as this code had before, loses the small weights of a long sequence: at
// 1M keys each new weight is a few ulps of l, and round-to-nearest drops them with a bias that
// grows with the length (l 1.3e-3 low at 1M keys). Flushing every kFlushKeys keys rather than
// every tile keeps the fp64 work (D adds per pair) a few per cent of the fp32 work.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/core/numeric.h"
#include "src/cpu/cpu_backend.h"

namespace pagedattn::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
/// Keys a (row, head) pair sums in fp32 before its partial sums join the fp64 running state:
/// the fp32 chain of any term is shorter than kFlushKeys + tile <= 512 additions.
constexpr int kFlushKeys = 256;

// ---------------------------------------------------------------- cache element decoding
// One decoder per storage dtype, so that the gather loops are compiled without a per-element
// switch. fp8 values come out unscaled; the caller multiplies by k_scale / v_scale.
struct DecodeF32 {
  using T = float;
  static float get(T v) { return v; }
};
struct DecodeF16 {
  using T = std::uint16_t;
  static float get(T v) { return numeric::half_bits_to_float(v); }
};
struct DecodeBF16 {
  using T = std::uint16_t;
  static float get(T v) { return numeric::bf16_bits_to_float(v); }
};
struct DecodeE4M3 {
  using T = std::uint8_t;
  static float get(T v) { return numeric::e4m3_to_float(v); }
};
struct DecodeE5M2 {
  using T = std::uint8_t;
  static float get(T v) { return numeric::e5m2_to_float(v); }
};

/// How to find element (block, head, token-in-block, dim) of one cache tensor: every layout is
/// `block * block_stride + head * head_stride + token * token_stride + dim_offset[dim]`, so
/// one gather routine serves split, nhd and hnd, padded pages and permuted strides alike.
struct CacheAddressing {
  const void* data = nullptr;
  std::int64_t block_stride = 0;
  std::int64_t head_stride = 0;
  std::int64_t token_stride = 0;
  std::vector<std::int64_t> dim_offset;
  bool dims_dense = false;  // dim_offset[d] == d: a token's head vector is one run
  /// One element offset per cache line a token's head vector touches, for prefetching the
  /// next tile; empty when a head vector is spread over too many lines to be worth it.
  std::vector<std::int64_t> prefetch_offsets;
};

CacheAddressing address_cache(const TensorView& t, KVLayout layout, bool is_key,
                              const KVCacheGeometry& geo) {
  CacheAddressing a;
  a.data = t.data;
  a.block_stride = t.stride(0);
  a.dim_offset.resize(static_cast<std::size_t>(geo.head_size));
  for (std::int64_t d = 0; d < geo.head_size; ++d) {
    switch (layout) {
      case KVLayout::kSplit:
        a.head_stride = t.stride(1);
        if (is_key) {  // [b, g, d/x, t, d%x]
          a.token_stride = t.stride(3);
          a.dim_offset[d] = (d / geo.x) * t.stride(2) + (d % geo.x) * t.stride(4);
        } else {  // [b, g, d, t]
          a.token_stride = t.stride(3);
          a.dim_offset[d] = d * t.stride(2);
        }
        break;
      case KVLayout::kNHD:  // [b, t, g, d]
        a.token_stride = t.stride(1);
        a.head_stride = t.stride(2);
        a.dim_offset[d] = d * t.stride(3);
        break;
      case KVLayout::kHND:  // [b, g, t, d]
        a.head_stride = t.stride(1);
        a.token_stride = t.stride(2);
        a.dim_offset[d] = d * t.stride(3);
        break;
    }
  }
  a.dims_dense = true;
  for (std::int64_t d = 0; d < geo.head_size; ++d) a.dims_dense &= a.dim_offset[d] == d;

  constexpr std::int64_t kLine = 64;
  constexpr std::size_t kMaxLines = 32;
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(geo.dtype));
  std::int64_t last = std::numeric_limits<std::int64_t>::min() / 2;
  for (std::int64_t d = 0; d < geo.head_size; ++d) {
    const std::int64_t byte = a.dim_offset[d] * elem;
    if (byte >= last + kLine || byte < last || d == geo.head_size - 1) {
      a.prefetch_offsets.push_back(a.dim_offset[d]);
      last = byte;
    }
  }
  if (a.prefetch_offsets.size() > kMaxLines) a.prefetch_offsets.clear();
  return a;
}

/// Ask for the cache lines of `n` tokens' head vectors ahead of their use, so that the loads
/// of the next tile (a random block, for a paged cache) overlap the math of this one.
template <class Dec>
void prefetch_tile(const CacheAddressing& a, const std::int64_t* base, int n) {
  const auto* src = static_cast<const typename Dec::T*>(a.data);
  for (int j = 0; j < n; ++j) {
    for (std::int64_t off : a.prefetch_offsets) {
#if defined(__GNUC__) || defined(__clang__)
      __builtin_prefetch(src + base[j] + off);
#else
      (void)(src + base[j] + off);
#endif
    }
  }
}

/// Convert `n` tokens (element offsets of their head vectors in `base`) into dst[n][head_size]
/// fp32, times `scale`. The loop order follows the memory: token-major when a head vector is
/// contiguous, dim-major when consecutive tokens are adjacent (the split layout's value).
template <class Dec>
void gather_tile(const CacheAddressing& a, const std::int64_t* base, int n, int head_size,
                 float scale, float* dst) {
  const auto* src = static_cast<const typename Dec::T*>(a.data);
  if (a.dims_dense) {
    for (int j = 0; j < n; ++j) {
      const typename Dec::T* row = src + base[j];
      float* out = dst + static_cast<std::int64_t>(j) * head_size;
      for (int d = 0; d < head_size; ++d) out[d] = Dec::get(row[d]) * scale;
    }
  } else if (a.token_stride == 1) {
    for (int d = 0; d < head_size; ++d) {
      const std::int64_t off = a.dim_offset[d];
      for (int j = 0; j < n; ++j) {
        dst[static_cast<std::int64_t>(j) * head_size + d] = Dec::get(src[base[j] + off]) * scale;
      }
    }
  } else {
    for (int j = 0; j < n; ++j) {
      float* out = dst + static_cast<std::int64_t>(j) * head_size;
      for (int d = 0; d < head_size; ++d) out[d] = Dec::get(src[base[j] + a.dim_offset[d]]) * scale;
    }
  }
}

/// fp32 dot product of length n (a multiple of 8). Eight independent partial sums let the
/// compiler vectorise without reassociation flags.
inline float dot(const float* a, const float* b, int n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i += 8) {
    for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

std::int64_t read_i32(const TensorView& t, std::int64_t i) {
  return static_cast<const std::int32_t*>(t.data)[i * t.stride(0)];
}

/// Per-thread buffers, grown to the largest item a thread meets and reused.
struct Scratch {
  std::vector<float> k, v;        // [tile][head_size] dequantised K and V
  std::vector<float> q;           // [pairs][head_size]
  std::vector<double> acc;        // [pairs][head_size] running sum of w v, flushed partials
  std::vector<float> m;           // [pairs] running max (a logit, exact in fp32)
  std::vector<double> l;          // [pairs] running sum of w, flushed partials
  std::vector<float> part_acc;    // [pairs][head_size] sum of w v since the last flush
  std::vector<float> part_l;      // [pairs] sum of w since the last flush
  std::vector<int> part_keys;     // [pairs] keys summed since the last flush
  std::vector<float> z;           // [tile] logits of one pair
  std::vector<std::int64_t> kbase, vbase;  // [tile] element offsets of each token's head vector
  std::vector<std::int64_t> next_kbase, next_vbase;  // the same for the tile after
};

/// Everything that is the same for every work item of one run.
struct Job {
  const AttentionArgs* args = nullptr;
  const KVCacheGeometry* geo = nullptr;
  CacheAddressing key, value;
  int num_heads = 0;
  int group = 0;  // query heads per KV head
  int head_size = 0;
  int tile = 0;
  /// Dequantisation scale of each KV head (all 1 for non-fp8 caches): KVCache::k_scales /
  /// v_scales read on the host (a CPU cache has CPU scale tensors), else k_scale / v_scale.
  std::vector<float> k_scale, v_scale;
};

Status metadata_changed(const std::string& what) {
  return Status(StatusCode::kInvalidArgument,
                "run_attention: " + what + " differs from the metadata the plan was made for");
}

/// The metadata facts one work item's addressing depends on, read from the caller's tensors:
/// its rows inside the sequence's query range, the query no longer than the sequence, and a
/// block-table row wide enough for seq_len (a seq_len grown after planning names seq_lens).
Status check_item_metadata(const Job& job, const CpuWorkItem& item) {
  const AttentionArgs& args = *job.args;
  const std::int64_t s = item.seq;
  if (s < 0 || s >= args.seq_lens.size(0)) return metadata_changed("the number of sequences");
  const std::int64_t q_start = read_i32(args.query_start_loc, s);
  const std::int64_t q_stop = read_i32(args.query_start_loc, s + 1);
  const std::int64_t seq_len = read_i32(args.seq_lens, s);
  if (item.q_begin < q_start || item.q_end > q_stop || item.q_begin >= item.q_end)
    return metadata_changed("query_start_loc[" + std::to_string(s) + ".." +
                            std::to_string(s + 1) + "] = " + std::to_string(q_start) + ", " +
                            std::to_string(q_stop));
  if (q_stop - q_start > seq_len)
    return metadata_changed("seq_lens[" + std::to_string(s) + "] = " + std::to_string(seq_len) +
                            " (below its query_len " + std::to_string(q_stop - q_start) + ")");
  const std::int64_t block_size = job.geo->block_size;
  const std::int64_t blocks_needed = (seq_len + block_size - 1) / block_size;
  if (blocks_needed > args.block_table.size(1))
    return metadata_changed("seq_lens[" + std::to_string(s) + "] = " + std::to_string(seq_len) +
                            " (" + std::to_string(blocks_needed) + " blocks of " +
                            std::to_string(block_size) + ", more than the " +
                            std::to_string(args.block_table.size(1)) + " columns of block_table)");
  return Status::Ok();
}

/// One work item: query rows [q_begin, q_end) of a sequence against one KV head.
template <class Dec>
Status run_item(const Job& job, const CpuWorkItem& item, Scratch& sc) {
  const AttentionArgs& args = *job.args;
  const AttentionParams& params = args.params;
  const int D = job.head_size;
  const int G = job.group;
  const std::int64_t s = item.seq;
  const std::int64_t g = item.kv_head;

  // The plan was made from host copies of these values; re-check the few facts the addressing
  // below depends on so that a changed metadata tensor cannot send a read out of bounds
  // (precheck_items did so before any item ran; this guards the reads themselves).
  PAGEDATTN_RETURN_IF_ERROR(check_item_metadata(job, item));
  const std::int64_t q_start = read_i32(args.query_start_loc, s);
  const std::int64_t q_stop = read_i32(args.query_start_loc, s + 1);
  const std::int64_t seq_len = read_i32(args.seq_lens, s);
  const std::int64_t context_len = seq_len - (q_stop - q_start);
  const std::int64_t first_pos = context_len + (item.q_begin - q_start);
  const std::int64_t last_pos = context_len + (item.q_end - 1 - q_start);
  const std::int64_t window = params.sliding_window;
  // Keys any row of this item may see: the union of the rows' causal windows. Nothing outside
  // it is read, so tiles outside every row's range never exist.
  const std::int64_t kv_lo = window > 0 ? std::max<std::int64_t>(0, first_pos - window + 1) : 0;
  const std::int64_t kv_hi = last_pos + 1;

  const int rows = static_cast<int>(item.q_end - item.q_begin);
  const int pairs = rows * G;  // (row, query head) pairs, pair = row * G + head-in-group
  const std::size_t pd = static_cast<std::size_t>(pairs) * D;
  const std::size_t td = static_cast<std::size_t>(job.tile) * D;
  if (sc.q.size() < pd) sc.q.resize(pd);
  if (sc.acc.size() < pd) {
    sc.acc.resize(pd);
    sc.part_acc.resize(pd);
  }
  if (sc.m.size() < static_cast<std::size_t>(pairs)) {
    sc.m.resize(pairs);
    sc.l.resize(pairs);
    sc.part_l.resize(pairs);
    sc.part_keys.resize(pairs);
  }
  if (sc.k.size() < td) {
    sc.k.resize(td);
    sc.v.resize(td);
  }
  if (sc.z.size() < static_cast<std::size_t>(job.tile)) {
    sc.z.resize(job.tile);
    sc.kbase.resize(job.tile);
    sc.vbase.resize(job.tile);
    sc.next_kbase.resize(job.tile);
    sc.next_vbase.resize(job.tile);
  }

  const TensorView& query = args.query;
  for (int r = 0; r < rows; ++r) {
    for (int hh = 0; hh < G; ++hh) {
      const int p = r * G + hh;
      const std::int64_t h = g * G + hh;
      const std::int64_t row_off = (item.q_begin + r) * query.stride(0) + h * query.stride(1);
      for (int d = 0; d < D; ++d) {
        sc.q[static_cast<std::size_t>(p) * D + d] =
            numeric::load_as_float(query.data, query.dtype, row_off + d);
      }
      // A sink is a logit without a value: it starts the softmax at m = sink, l = e^0 = 1.
      float m0 = kNegInf;
      if (params.sinks.defined()) {
        m0 = static_cast<const float*>(params.sinks.data)[h * params.sinks.stride(0)];
      }
      sc.m[p] = m0;
      sc.l[p] = m0 > kNegInf ? 1.0 : 0.0;
    }
  }
  std::fill(sc.acc.begin(), sc.acc.begin() + static_cast<std::ptrdiff_t>(pd), 0.0);
  std::fill(sc.part_acc.begin(), sc.part_acc.begin() + static_cast<std::ptrdiff_t>(pd), 0.0f);
  std::fill(sc.part_l.begin(), sc.part_l.begin() + pairs, 0.0f);
  std::fill(sc.part_keys.begin(), sc.part_keys.begin() + pairs, 0);
  // Add pair p's fp32 partial sums to its fp64 running state and start a new partial.
  auto flush = [&](int p) {
    double* accp = &sc.acc[static_cast<std::size_t>(p) * D];
    float* part = &sc.part_acc[static_cast<std::size_t>(p) * D];
    for (int d = 0; d < D; ++d) {
      accp[d] += static_cast<double>(part[d]);
      part[d] = 0.0f;
    }
    sc.l[p] += static_cast<double>(sc.part_l[p]);
    sc.part_l[p] = 0.0f;
    sc.part_keys[p] = 0;
  };

  const TensorView& bt = args.block_table;
  const std::int64_t block_size = job.geo->block_size;
  const std::int64_t num_blocks = job.geo->num_blocks;
  const std::int64_t bt_cols = bt.size(1);
  const auto* bt_data = static_cast<const std::int32_t*>(bt.data);
  const float scale = params.scale;
  const float softcap = params.softcap;
  const float* slopes = static_cast<const float*>(params.alibi_slopes.data);
  const std::int64_t slope_stride =
      params.alibi_slopes.defined() ? params.alibi_slopes.stride(0) : 0;

  // Tile != block: each token finds its own block, so a tile may straddle blocks and a block
  // may hold many tiles.
  auto locate = [&](std::int64_t t0, int n, std::int64_t* kbase, std::int64_t* vbase) {
    for (int j = 0; j < n; ++j) {
      const std::int64_t pos = t0 + j;
      const std::int64_t col = pos / block_size;
      if (col >= bt_cols) return metadata_changed("block_table width");
      const std::int64_t block = bt_data[s * bt.stride(0) + col * bt.stride(1)];
      if (block < 0 || block >= num_blocks) {
        return metadata_changed("block_table[" + std::to_string(s) + "][" + std::to_string(col) +
                                "] = " + std::to_string(block));
      }
      const std::int64_t in_block = pos % block_size;
      kbase[j] = block * job.key.block_stride + g * job.key.head_stride +
                 in_block * job.key.token_stride;
      vbase[j] = block * job.value.block_stride + g * job.value.head_stride +
                 in_block * job.value.token_stride;
    }
    return Status::Ok();
  };
  auto tile_len = [&](std::int64_t t0) {
    return static_cast<int>(std::min<std::int64_t>(job.tile, kv_hi - t0));
  };

  PAGEDATTN_RETURN_IF_ERROR(locate(kv_lo, tile_len(kv_lo), sc.kbase.data(), sc.vbase.data()));
  for (std::int64_t t0 = kv_lo; t0 < kv_hi; t0 += job.tile) {
    const int n = tile_len(t0);
    gather_tile<Dec>(job.key, sc.kbase.data(), n, D, job.k_scale[g], sc.k.data());
    gather_tile<Dec>(job.value, sc.vbase.data(), n, D, job.v_scale[g], sc.v.data());
    const std::int64_t t_next = t0 + job.tile;
    if (t_next < kv_hi) {
      const int n_next = tile_len(t_next);
      PAGEDATTN_RETURN_IF_ERROR(locate(t_next, n_next, sc.next_kbase.data(), sc.next_vbase.data()));
      prefetch_tile<Dec>(job.key, sc.next_kbase.data(), n_next);
      prefetch_tile<Dec>(job.value, sc.next_vbase.data(), n_next);
    }

    for (int r = 0; r < rows; ++r) {
      const std::int64_t q_pos = first_pos + r;
      const std::int64_t row_lo = window > 0 ? std::max<std::int64_t>(0, q_pos - window + 1) : 0;
      const int j_begin = static_cast<int>(std::max<std::int64_t>(row_lo - t0, 0));
      const int j_end = static_cast<int>(std::min<std::int64_t>(q_pos + 1 - t0, n));
      if (j_begin >= j_end) continue;  // this row sees nothing of the tile
      for (int hh = 0; hh < G; ++hh) {
        const int p = r * G + hh;
        const std::int64_t h = g * G + hh;
        const float* qp = &sc.q[static_cast<std::size_t>(p) * D];
        const float slope = slopes ? slopes[h * slope_stride] : 0.0f;
        float tile_max = kNegInf;
        for (int j = j_begin; j < j_end; ++j) {
          float z = scale * dot(qp, &sc.k[static_cast<std::size_t>(j) * D], D);
          if (softcap > 0.0f) z = softcap * std::tanh(z / softcap);
          if (slopes) z += slope * static_cast<float>(t0 + j - q_pos);
          sc.z[j] = z;
          tile_max = std::max(tile_max, z);
        }
        const float m_new = std::max(sc.m[p], tile_max);
        // std::max drops NaN logits, so m_new stays -inf when every logit so far is -inf
        // (masked) or NaN. Exponentiate relative to 0 then: masked weights are 0 and NaN
        // ones NaN, as in the oracle, where skipping the row made its output finite.
        const float base = m_new == kNegInf ? 0.0f : m_new;
        // Both states are relative to the running max: rescale them when it moves (rare
        // once it has settled), the fp64 one with an fp64 factor.
        const double alpha = std::exp(static_cast<double>(sc.m[p]) - static_cast<double>(base));
        double* accp = &sc.acc[static_cast<std::size_t>(p) * D];
        float* part = &sc.part_acc[static_cast<std::size_t>(p) * D];
        if (alpha != 1.0) {
          const float alpha_f = static_cast<float>(alpha);
          for (int d = 0; d < D; ++d) {
            accp[d] *= alpha;
            part[d] *= alpha_f;
          }
          sc.l[p] *= alpha;
          sc.part_l[p] *= alpha_f;
        }
        float l = sc.part_l[p];
        for (int j = j_begin; j < j_end; ++j) {
          const float w = std::exp(sc.z[j] - base);
          l += w;
          const float* vj = &sc.v[static_cast<std::size_t>(j) * D];
          for (int d = 0; d < D; ++d) part[d] += w * vj[d];
        }
        sc.part_l[p] = l;
        sc.part_keys[p] += j_end - j_begin;
        if (sc.part_keys[p] >= kFlushKeys) flush(p);
        sc.m[p] = m_new;
      }
    }
    std::swap(sc.kbase, sc.next_kbase);
    std::swap(sc.vbase, sc.next_vbase);
  }

  for (int p = 0; p < pairs; ++p) flush(p);
  const TensorView& out = args.out;
  const TensorView& lse = args.lse;
  for (int r = 0; r < rows; ++r) {
    const std::int64_t token = item.q_begin + r;
    for (int hh = 0; hh < G; ++hh) {
      const int p = r * G + hh;
      const std::int64_t h = g * G + hh;
      const double inv = sc.l[p] != 0.0 ? 1.0 / sc.l[p] : std::nan("");  // see the LSE
      const double* accp = &sc.acc[static_cast<std::size_t>(p) * D];
      const std::int64_t row_off = token * out.stride(0) + h * out.stride(1);
      for (int d = 0; d < D; ++d) {
        numeric::store_from_float(out.data, out.dtype, row_off + d,
                                  static_cast<float>(accp[d] * inv));
      }
      if (lse.defined()) {
        // l = 0: every logit -inf and no sink (every row has keys: its own position at
        // least): 0/0, NaN as in the oracle, where m + log(0) would say "no keys".
        static_cast<float*>(lse.data)[token * lse.stride(0) + h * lse.stride(1)] =
            sc.l[p] == 0.0 ? std::nanf("")
                           : static_cast<float>(static_cast<double>(sc.m[p]) + std::log(sc.l[p]));
      }
    }
  }
  return Status::Ok();
}

/// Run every item of the plan on `num_threads` threads (the caller's thread is one of them).
/// Items write disjoint output rows and each item is computed by one thread in a fixed order,
/// so the result does not depend on the thread count or on scheduling.
template <class Dec>
Status run_items(const Job& job, const std::vector<CpuWorkItem>& items, int num_threads) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  Status error;
  auto record = [&](Status st) {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (error.ok()) error = std::move(st);
    failed.store(true);
  };
  auto worker = [&]() noexcept {
    try {
      Scratch sc;
      while (!failed.load(std::memory_order_relaxed)) {
        const std::size_t i = next.fetch_add(1);
        if (i >= items.size()) break;
        Status st = run_item<Dec>(job, items[i], sc);
        if (!st.ok()) record(std::move(st));
      }
    } catch (const std::exception& e) {
      record(Status(StatusCode::kInternal, std::string("cpu attention worker: ") + e.what()));
    } catch (...) {
      record(Status(StatusCode::kInternal, "cpu attention worker: unknown exception"));
    }
  };

  std::vector<std::thread> threads;
  try {
    threads.reserve(static_cast<std::size_t>(num_threads));
    for (int t = 1; t < num_threads; ++t) threads.emplace_back(worker);
  } catch (...) {
    // Could not start another thread: the ones already running finish the list with us.
  }
  worker();
  for (std::thread& t : threads) t.join();
  return error;
}

// Every fact run_item re-checks, for every item, before any item runs: a metadata tensor
// changed after planning is then an error with nothing written, instead of one found by a
// worker after others wrote their rows. (run_item keeps its checks: they guard the reads.)
Status precheck_items(const Job& job, const std::vector<CpuWorkItem>& items) {
  const AttentionArgs& args = *job.args;
  const TensorView& bt = args.block_table;
  const auto* bt_data = static_cast<const std::int32_t*>(bt.data);
  const std::int64_t block_size = job.geo->block_size;
  std::vector<bool> seen(static_cast<std::size_t>(args.seq_lens.size(0)), false);
  for (const CpuWorkItem& item : items) {
    PAGEDATTN_RETURN_IF_ERROR(check_item_metadata(job, item));
    const std::int64_t s = item.seq;
    if (seen[static_cast<std::size_t>(s)]) continue;
    seen[static_cast<std::size_t>(s)] = true;
    // The blocks of every key some row of the sequence may see (its first row's window on).
    const std::int64_t q_len = read_i32(args.query_start_loc, s + 1) -
                               read_i32(args.query_start_loc, s);
    const std::int64_t seq_len = read_i32(args.seq_lens, s);
    const std::int64_t window = args.params.sliding_window;
    const std::int64_t first_pos = seq_len - q_len;
    const std::int64_t kv_lo = window > 0 ? std::max<std::int64_t>(0, first_pos - window + 1) : 0;
    for (std::int64_t col = kv_lo / block_size; col < (seq_len + block_size - 1) / block_size;
         ++col) {
      const std::int64_t block = bt_data[s * bt.stride(0) + col * bt.stride(1)];
      if (block < 0 || block >= job.geo->num_blocks)
        return metadata_changed("block_table[" + std::to_string(s) + "][" + std::to_string(col) +
                                "] = " + std::to_string(block));
    }
  }
  return Status::Ok();
}

int rows_per_item(int group) {
  // Enough (row, head) pairs per item to reuse each converted K/V element many times, few
  // enough that a long prefill splits into many items for the threads.
  return std::clamp(128 / std::max(group, 1), 8, 64);
}

int cache_kv_heads(const KVCache& cache) {
  return static_cast<int>(cache.layout == KVLayout::kNHD ? cache.key.size(2) : cache.key.size(1));
}

}  // namespace

int choose_tile_tokens(int head_size, DType cache_dtype) {
  // One tile costs, per token, the stored K and V plus their fp32 copies. Keep that near
  // 48 KiB so both tiles stay in L1/L2 while every (row, head) pair of an item streams them.
  constexpr int kBudgetBytes = 48 * 1024;
  const int per_token =
      2 * std::max(head_size, 8) * (4 + static_cast<int>(dtype_size(cache_dtype)));
  const int tokens = kBudgetBytes / per_token / 16 * 16;
  return std::clamp(tokens, 16, 256);
}

void build_work_list(const AttentionArgs& args, const HostMetadata& host,
                     AttentionPlan::State* state) {
  const int num_heads = static_cast<int>(args.query.size(1));
  const int num_kv_heads = cache_kv_heads(args.cache);
  const int group = num_heads / std::max(num_kv_heads, 1);
  const std::int64_t chunk = rows_per_item(group);
  const std::int64_t window = args.params.sliding_window;
  const std::int64_t num_seqs = host.seq_lens.size(0);

  struct Costed {
    std::int64_t cost;
    CpuWorkItem item;
  };
  std::vector<Costed> work;
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const std::int64_t q_start = read_i32(host.query_start_loc, s);
    const std::int64_t q_stop = read_i32(host.query_start_loc, s + 1);
    if (q_stop <= q_start) continue;  // query_len == 0: no rows, no work
    const std::int64_t context_len = read_i32(host.seq_lens, s) - (q_stop - q_start);
    for (std::int64_t b = q_start; b < q_stop; b += chunk) {
      const std::int64_t e = std::min(b + chunk, q_stop);
      const std::int64_t first_pos = context_len + (b - q_start);
      const std::int64_t last_pos = context_len + (e - 1 - q_start);
      const std::int64_t kv_lo = window > 0 ? std::max<std::int64_t>(0, first_pos - window + 1) : 0;
      const std::int64_t cost = (e - b) * (last_pos + 1 - kv_lo);
      for (int g = 0; g < num_kv_heads; ++g) {
        work.push_back({cost, CpuWorkItem{static_cast<std::int32_t>(s), g, b, e}});
      }
    }
  }
  // Longest first, so that the last items to start are short ones (greedy load balance);
  // stable so the order, and therefore any diagnostics, is reproducible.
  std::stable_sort(work.begin(), work.end(),
                   [](const Costed& a, const Costed& b) { return a.cost > b.cost; });
  state->cpu_work.clear();
  state->cpu_work.reserve(work.size());
  for (const Costed& c : work) state->cpu_work.push_back(c.item);
}

Status run_attention(const AttentionPlan::State& plan, const AttentionArgs& args) {
  try {
    if (plan.cpu_work.empty()) return Status::Ok();
    const KVCacheGeometry& geo = plan.geometry;
    Job job;
    job.args = &args;
    job.geo = &geo;
    job.num_heads = static_cast<int>(args.query.size(1));
    job.group = job.num_heads / geo.num_kv_heads;
    job.head_size = geo.head_size;
    job.tile = plan.choice.tile_tokens > 0 ? plan.choice.tile_tokens
                                           : choose_tile_tokens(geo.head_size, geo.dtype);
    // A forced tile longer than any sequence would only size the scratch buffers.
    job.tile = std::min(job.tile, std::max(plan.problem.batch.max_seq_len, 1));
    job.k_scale = head_scales(args.cache, geo, /*key=*/true);
    job.v_scale = head_scales(args.cache, geo, /*key=*/false);
    job.key = address_cache(args.cache.key, args.cache.layout, /*is_key=*/true, geo);
    job.value = address_cache(args.cache.value, args.cache.layout, /*is_key=*/false, geo);

    PAGEDATTN_RETURN_IF_ERROR(precheck_items(job, plan.cpu_work));

    int threads = plan.options.num_threads;
    if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
    threads = std::clamp<std::int64_t>(threads, 1, static_cast<std::int64_t>(plan.cpu_work.size()));

    switch (geo.dtype) {
      case DType::kFloat32: return run_items<DecodeF32>(job, plan.cpu_work, threads);
      case DType::kFloat16: return run_items<DecodeF16>(job, plan.cpu_work, threads);
      case DType::kBFloat16: return run_items<DecodeBF16>(job, plan.cpu_work, threads);
      case DType::kFloat8E4M3: return run_items<DecodeE4M3>(job, plan.cpu_work, threads);
      case DType::kFloat8E5M2: return run_items<DecodeE5M2>(job, plan.cpu_work, threads);
      default:
        return Status(StatusCode::kInternal,
                      std::string("cpu run_attention: cache dtype ") + to_string(geo.dtype));
    }
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("cpu run_attention: ") + e.what());
  } catch (...) {
    return Status(StatusCode::kInternal, "cpu run_attention: unknown exception");
  }
}

Status merge_attention_states(const TensorView& out_a, const TensorView& lse_a,
                              const TensorView& out_b, const TensorView& lse_b,
                              const TensorView& out, const TensorView& lse_out) {
  const std::int64_t num_tokens = out.size(0);
  const std::int64_t num_heads = out.size(1);
  const std::int64_t head_size = out.size(2);
  const auto* la_data = static_cast<const float*>(lse_a.data);
  const auto* lb_data = static_cast<const float*>(lse_b.data);
  auto* lo_data = static_cast<float*>(lse_out.data);
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    for (std::int64_t h = 0; h < num_heads; ++h) {
      const float la = la_data[t * lse_a.stride(0) + h * lse_a.stride(1)];
      const float lb = lb_data[t * lse_b.stride(0) + h * lse_b.stride(1)];
      const std::int64_t oa = t * out_a.stride(0) + h * out_a.stride(1);
      const std::int64_t ob = t * out_b.stride(0) + h * out_b.stride(1);
      const std::int64_t oo = t * out.stride(0) + h * out.stride(1);
      // An lse of -inf means "no keys": that state's out is not read at all (it may be
      // garbage), so it cannot turn the result into NaN through 0 * NaN.
      const bool use_a = la != kNegInf;
      const bool use_b = lb != kNegInf;
      float lse;
      if (!use_a && !use_b) {
        for (std::int64_t d = 0; d < head_size; ++d) {
          numeric::store_from_float(out.data, out.dtype, oo + d, 0.0f);
        }
        lse = kNegInf;
      } else if (use_a != use_b && !std::isfinite(use_a ? la : lb)) {
        // The one state used has an LSE of NaN or +inf: e^(l - lse) is NaN, as the two-sided
        // formula and the CUDA merge give.
        for (std::int64_t d = 0; d < head_size; ++d)
          numeric::store_from_float(out.data, out.dtype, oo + d, std::nanf(""));
        lse = std::nanf("");
      } else if (!use_b) {
        lse = la;
        if (oo != oa || out.data != out_a.data) {
          for (std::int64_t d = 0; d < head_size; ++d) {
            numeric::store_from_float(out.data, out.dtype, oo + d,
                                      numeric::load_as_float(out_a.data, out_a.dtype, oa + d));
          }
        }
      } else if (!use_a) {
        lse = lb;
        if (oo != ob || out.data != out_b.data) {
          for (std::int64_t d = 0; d < head_size; ++d) {
            numeric::store_from_float(out.data, out.dtype, oo + d,
                                      numeric::load_as_float(out_b.data, out_b.dtype, ob + d));
          }
        }
      } else {
        // NaN in either lse propagates through max/exp into the result, as it should.
        const float m = (std::isnan(la) || std::isnan(lb)) ? std::nanf("") : std::max(la, lb);
        const float wa = std::exp(la - m);
        const float wb = std::exp(lb - m);
        const float sum = wa + wb;
        lse = m + std::log(sum);
        const float ca = wa / sum;
        const float cb = wb / sum;
        // Each element is read from both inputs before it is written, so out may alias either.
        for (std::int64_t d = 0; d < head_size; ++d) {
          const float va = numeric::load_as_float(out_a.data, out_a.dtype, oa + d);
          const float vb = numeric::load_as_float(out_b.data, out_b.dtype, ob + d);
          numeric::store_from_float(out.data, out.dtype, oo + d, ca * va + cb * vb);
        }
      }
      if (lse_out.defined()) lo_data[t * lse_out.stride(0) + h * lse_out.stride(1)] = lse;
    }
  }
  return Status::Ok();
}

}  // namespace pagedattn::cpu
