// Host-side view of AttentionArgs shared by the MMA kernels (decode fast path, prefill): the
// alignment rules of their 16-byte cp.async copies and the cache addressing their launchers
// pass on (the fields every attention kernel shares are filled by launch_args.h).
// Header-only, so that selection and the unit tests see the same code in every build.
#pragma once

#include <cstdint>

#include "pagedattn/attention.h"
#include "src/cuda/common/launch_args.h"  // fill_attention_params

namespace pagedattn::cuda {

/// True when every stride but the innermost of the query, output, key cache and value cache is
/// a multiple of 8 elements (16 bytes of a 16-bit dtype), dimensions of extent 1 excepted.
inline bool mma_copy_aligned_strides(const AttentionArgs& args) {
  const TensorView* views[] = {&args.query, &args.out, &args.cache.key, &args.cache.value};
  for (const TensorView* v : views)
    for (int d = 0; d + 1 < v->ndim; ++d)
      if (v->shape[d] > 1 && v->strides[d] % 8 != 0) return false;
  return true;
}

/// True when the query, output, key and value base pointers are 16-byte aligned.
inline bool mma_copy_aligned_pointers(const AttentionArgs& args) {
  for (const void* p : {args.query.data, args.out.data, args.cache.key.data, args.cache.value.data})
    if ((reinterpret_cast<std::uintptr_t>(p) & 15u) != 0) return false;
  return true;
}

/// Element strides of a cache as the MMA kernels address it. Key element (block b, KV head g,
/// token-in-block t, dim 8c + e) at b*k_blk + g*k_head + t*k_tok + c*k_chunk + e (every
/// layout: x = 8 for 16-bit caches). Value element (b, g, t, d): nhd/hnd
/// b*v_blk + g*v_head + t*v_tok + (d/8)*v_chunk + d%8; split ([b, g, d, t], tokens
/// contiguous) b*v_blk + g*v_head + d*v_dim + t*v_tok with v_tok = 1 and v_chunk = 0.
/// The same element as cache_index.h's key_offset / value_offset (unit-tested).
struct MmaCacheStrides {
  std::int64_t k_blk, k_head, k_tok, k_chunk;
  std::int64_t v_blk, v_head, v_tok, v_chunk, v_dim;
  int num_kv_heads;
};

/// The strides of `cache` (a validated view: innermost strides 1).
inline MmaCacheStrides mma_cache_strides(const KVCache& cache) {
  const std::int64_t* ks = cache.key.strides;
  const std::int64_t* vs = cache.value.strides;
  MmaCacheStrides s{};
  switch (cache.layout) {
    case KVLayout::kSplit:  // key [b, g, d/x, t, x], value [b, g, d, t]
      s = {ks[0], ks[1], ks[3], ks[2], vs[0], vs[1], 1, 0, vs[2], 0};
      s.num_kv_heads = static_cast<int>(cache.key.shape[1]);
      break;
    case KVLayout::kNHD:  // [b, t, g, d]
      s = {ks[0], ks[2], ks[1], 8, vs[0], vs[2], vs[1], 8, 0, 0};
      s.num_kv_heads = static_cast<int>(cache.key.shape[2]);
      break;
    case KVLayout::kHND:  // [b, g, t, d]
      s = {ks[0], ks[1], ks[2], 8, vs[0], vs[1], vs[2], 8, 0, 0};
      s.num_kv_heads = static_cast<int>(cache.key.shape[1]);
      break;
  }
  return s;
}

}  // namespace pagedattn::cuda
