// Address arithmetic of the CUDA kernels, written once as __host__ __device__ functions so that
// the host unit test (tests/unit/test_cuda_indexing.cpp) checks exactly the code the GPU runs.
// No CUDA headers: this file compiles with any C++17 compiler.
//
// Every offset that multiplies a block id, a token index or a head index is int64
// (DESIGN.md §3 "bounded by construction").
#pragma once

#include <cstdint>

#include "src/core/numeric.h"  // PA_HD

namespace pagedattn::cuda {

/// Layout codes used in kernel parameters; equal to the KVLayout enumerators.
enum : int { kLayoutSplit = 0, kLayoutNHD = 1, kLayoutHND = 2 };

/// Strides (elements) of one cache tensor's first four dimensions. The `split` key's fifth
/// dimension (x) and every other tensor's last dimension have stride 1 (validated).
struct Strides4 {
  std::int64_t s[4];
};

/// Element offset of key element (block b, token-in-block t, head h, dim d).
///  split: [num_blocks, num_kv_heads, head_size / x, block_size, x]
///  nhd:   [num_blocks, block_size, num_kv_heads, head_size]
///  hnd:   [num_blocks, num_kv_heads, block_size, head_size]
PA_HD std::int64_t key_offset(int layout, int x, const Strides4& st, std::int64_t b,
                              std::int64_t t, std::int64_t h, std::int64_t d) {
  if (layout == kLayoutSplit)
    return b * st.s[0] + h * st.s[1] + (d / x) * st.s[2] + t * st.s[3] + (d % x);
  if (layout == kLayoutNHD) return b * st.s[0] + t * st.s[1] + h * st.s[2] + d;
  return b * st.s[0] + h * st.s[1] + t * st.s[2] + d;
}

/// Element offset of value element (block b, token-in-block t, head h, dim d).
///  split: [num_blocks, num_kv_heads, head_size, block_size]; nhd/hnd as the key.
PA_HD std::int64_t value_offset(int layout, const Strides4& st, std::int64_t b, std::int64_t t,
                                std::int64_t h, std::int64_t d) {
  if (layout == kLayoutSplit) return b * st.s[0] + h * st.s[1] + d * st.s[2] + t * st.s[3];
  if (layout == kLayoutNHD) return b * st.s[0] + t * st.s[1] + h * st.s[2] + d;
  return b * st.s[0] + h * st.s[1] + t * st.s[2] + d;
}

/// The sequence a row tile belongs to: the s with tile_start[s] <= tile < tile_start[s + 1],
/// sequences without tiles skipped (binary search over the prefix sums that
/// launch_tile_prefix writes, tile_start[0] = 0). Needs 0 <= tile < tile_start[num_seqs].
PA_HD int tile_sequence(const std::int32_t* tile_start, int num_seqs, int tile) {
  int lo = 0, hi = num_seqs;  // invariant: tile_start[lo] <= tile < tile_start[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (tile_start[mid] <= tile) lo = mid;
    else hi = mid;
  }
  return lo;
}

/// A slot decomposed into (block, offset); `ok` is false for negative slots (padding: skip)
/// and for slots >= num_slots (skipped so that the writer is memory-safe even when the host did
/// not validate the slot mapping).
struct SlotPos {
  std::int64_t block;
  std::int64_t offset;
  bool ok;
};
PA_HD SlotPos decompose_slot(std::int64_t slot, std::int64_t block_size, std::int64_t num_blocks) {
  SlotPos p{0, 0, false};
  if (slot < 0 || block_size <= 0) return p;
  p.block = slot / block_size;
  p.offset = slot - p.block * block_size;
  p.ok = p.block < num_blocks;
  return p;
}

/// Where key position `j` of a sequence lives: (physical block, offset in block), read through
/// the sequence's block-table row. block = -1 when j is negative, the logical block lies past
/// the row, or the id is outside [0, num_blocks): memory safety for device metadata that the
/// host did not validate (such a token is never read).
struct BlockPos {
  std::int64_t block;
  std::int64_t offset;
};
PA_HD BlockPos lookup_block(const std::int32_t* row, std::int64_t row_stride, std::int64_t width,
                            std::int64_t j, std::int64_t block_size, std::int64_t num_blocks) {
  BlockPos r{-1, 0};
  if (j < 0 || block_size <= 0) return r;
  const std::int64_t logical = j / block_size;
  if (logical >= width) return r;
  const std::int64_t b = row[logical * row_stride];
  if (b < 0 || b >= num_blocks) return r;
  r.block = b;
  r.offset = j - logical * block_size;
  return r;
}

/// Bytes per asynchronous copy unit (16, 8 or 4) for loading token rows of one cache tensor, or
/// 0 when only element-wise copies are possible. A unit of u bytes needs the base address, every
/// outer stride (bytes) and the contiguous run (`run_elems` elements) to be multiples of u.
/// `strides` are in elements.
PA_HD int choose_unit_bytes(std::uint64_t base_address, const std::int64_t* strides,
                            int num_strides, int elem_bytes, std::int64_t run_elems) {
  for (int u = 16; u >= 4; u /= 2) {
    bool ok = (base_address % static_cast<std::uint64_t>(u)) == 0 &&
              (run_elems * elem_bytes) % u == 0 && u >= elem_bytes;
    for (int i = 0; i < num_strides && ok; ++i) ok = (strides[i] * elem_bytes) % u == 0;
    if (ok) return u;
  }
  return 0;
}

// ---------------------------------------------------------------- tiled attention mapping

/// The rows a CTA of the tiled kernel owns: `q_tokens` query tokens x `heads_per_cta` query
/// heads of one KV head, row m = token_in_tile * heads_per_cta + head_in_group.
struct RowMap {
  int q_tok;    // query token within the CTA's tile
  int head_in;  // head within the KV head's group of gqa query heads
};
PA_HD RowMap row_map(int m, int heads_per_cta, int head_group) {
  RowMap r;
  r.q_tok = m / heads_per_cta;
  r.head_in = head_group * heads_per_cta + m % heads_per_cta;
  return r;
}

/// Key range [lo, hi) of one split of one CTA: the CTA's rows need keys [row_lo, row_hi); the
/// sequence's keys [0, seq_len) are cut into `num_splits` chunks of a tile multiple.
struct KeyRange {
  std::int64_t lo;
  std::int64_t hi;
};
PA_HD KeyRange split_range(std::int64_t row_lo, std::int64_t row_hi, std::int64_t seq_len,
                           int num_splits, int split, int tile_tokens) {
  KeyRange r{row_lo, row_hi};
  if (num_splits > 1) {
    std::int64_t chunk = (seq_len + num_splits - 1) / num_splits;
    chunk = (chunk + tile_tokens - 1) / tile_tokens * tile_tokens;
    if (chunk < 1) chunk = 1;
    const std::int64_t a = chunk * split, b = a + chunk;
    if (a > r.lo) r.lo = a;
    if (b < r.hi) r.hi = b;
  }
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}

/// The split size of a sequence of `seq_len` keys under a fixed-token cut
/// (AttnParams::split_tokens > 0): `split_tokens` doubled until `num_splits` chunks cover the
/// sequence. It depends on the sequence's own length and the two launch constants only, never
/// on the other sequences of the batch; a sequence that grew past the plan (a replayed graph)
/// is still covered, with larger chunks.
PA_HD std::int64_t tiled_split_chunk(std::int64_t seq_len, int split_tokens, int num_splits) {
  std::int64_t chunk = split_tokens > 0 ? split_tokens : 1;
  while (chunk * num_splits < seq_len) chunk *= 2;
  return chunk;
}

/// Key range [lo, hi) of split `split` under a fixed-token cut: the CTA's rows need keys
/// [row_lo, row_hi), clipped to [split * chunk, (split + 1) * chunk) (tiled_split_chunk).
PA_HD KeyRange split_range_fixed(std::int64_t row_lo, std::int64_t row_hi, std::int64_t seq_len,
                                 int num_splits, int split, int split_tokens) {
  KeyRange r{row_lo, row_hi};
  if (num_splits > 1) {
    const std::int64_t chunk = tiled_split_chunk(seq_len, split_tokens, num_splits);
    const std::int64_t a = chunk * split, b = a + chunk;
    if (a > r.lo) r.lo = a;
    if (b < r.hi) r.hi = b;
  }
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}

/// Keys the query tokens [tok0, tok_end) of a sequence need (before splitting): from the
/// window start of the first token to the last token's own position, clamped to [0, seq_len).
/// Token t sits at position context_len + (t - q_begin), context_len = seq_len - query_len.
PA_HD KeyRange cta_key_range(std::int64_t q_begin, std::int64_t q_end, std::int64_t tok0,
                             std::int64_t tok_end, std::int64_t seq_len, int window) {
  const std::int64_t ctx = seq_len - (q_end - q_begin);
  const std::int64_t qpos_min = ctx + (tok0 - q_begin);
  const std::int64_t qpos_max = ctx + (tok_end - 1 - q_begin);
  KeyRange r{0, qpos_max + 1};
  if (r.hi > seq_len) r.hi = seq_len;
  if (window > 0 && qpos_min - window + 1 > 0) r.lo = qpos_min - window + 1;
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}

/// Keys a query at position q_pos may see: [q_pos - window + 1, q_pos] (window 0 = off).
PA_HD bool key_allowed(std::int64_t j, std::int64_t q_pos, int window) {
  return j <= q_pos && j >= 0 && (window <= 0 || q_pos - j < window);
}

/// One transfer unit of a K or V tile load: `unit_bytes` consecutive bytes of one token row in
/// global memory, copied to the token's row of the shared-memory tile.
struct TileUnit {
  int t;       // token within the tile
  int d;       // first head dimension of the unit
};
/// Item `i` of a tile load of `rows` tokens x `units_per_row` units. `t_fast` orders the items
/// token-fastest (consecutive threads read consecutive tokens: the split layout, where one
/// token's dims are block_size*x apart) instead of unit-fastest (nhd/hnd rows).
PA_HD TileUnit tile_unit(int i, int rows, int units_per_row, int unit_elems, bool t_fast) {
  TileUnit u;
  if (t_fast) {
    u.t = i % rows;
    u.d = (i / rows) * unit_elems;
  } else {
    u.t = i / units_per_row;
    u.d = (i % units_per_row) * unit_elems;
  }
  return u;
}

}  // namespace pagedattn::cuda
