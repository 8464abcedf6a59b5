// The named cases of the fault classes of DESIGN.md §5 (case_builders.h, add_named_cases).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "src/testing/case_builders.h"
#include "src/testing/harness.h"

namespace pagedattn::testing::detail {

void add_named_cases(Device dev, bool quick, std::vector<CaseConfig>* out) {
  auto add = [&](CaseConfig c) { out->push_back(finish(std::move(c))); };
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16, b16 = DType::kBFloat16;
  const DType e4m3 = DType::kFloat8E4M3, e5m2 = DType::kFloat8E5M2;

  // query_len == 0 sequences between others (and at both ends, and with seq_len 0): they read
  // nothing and must not write their neighbour's row.
  for (KVLayout l : kLayouts) {
    if (quick && l != KVLayout::kNHD) continue;
    CaseConfig c = base(dev, l, 16, 64, 8, 2, f16, f16);
    set_lengths(&c, {{20, 0}, {17, 1}, {0, 0}, {30, 5}, {18, 0}, {16, 1}, {5, 0}});
    c.tag = "zeroq";
    add(c);
  }
  {
    // Every sequence skipped (the all-zero query_start_loc of CUDA-graph capture): no rows.
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 128, 8, 2, b16, b16);
    set_lengths(&c, {{20, 0}, {0, 0}, {33, 0}});
    c.tag = "allzeroq";
    add(c);
  }

  // Sliding window off by one: window 1 (only the current token), window == seq_len,
  // window == seq_len - 1 and seq_len + 1, decode and prefill rows at the edges.
  for (DType dt : {f32, b16}) {
    if (quick && dt == b16) continue;
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 64, 8, 2, dt, dt);
    set_lengths(&c, {{17, 1}, {33, 4}, {1, 1}, {16, 16}});
    c.sliding_window = 1;
    c.tag = "win1";
    add(c);
  }
  for (KVLayout l : kLayouts) {
    if (quick && l == KVLayout::kHND) continue;
    CaseConfig c = base(dev, l, 16, 64, 8, 2, f32, f32);
    // W = 37: seq_len == W, == W + 1 (window = seq_len - 1), == W - 1, a prefill chunk whose
    // rows cross the window edge, and a full prefill of exactly W tokens.
    set_lengths(&c, {{37, 1}, {38, 1}, {36, 1}, {45, 12}, {37, 37}});
    c.sliding_window = 37;
    c.tag = "winedge";
    add(c);
  }
  if (!quick) {
    // Decode and prefill of the same window in one batch (the two paths must agree).
    CaseConfig c = base(dev, KVLayout::kHND, 32, 128, 16, 4, f16, f16);
    set_lengths(&c, {{100, 1}, {100, 20}, {99, 1}, {130, 64}});
    c.sliding_window = 30;
    c.tag = "windecprefill";
    add(c);
  }

  // Tile != block: tiles much smaller than a block, and tiles spanning many blocks.
  for (KVLayout l : {KVLayout::kNHD, KVLayout::kSplit}) {
    if (quick && l == KVLayout::kSplit) continue;
    CaseConfig c = base(dev, l, 544, 128, 8, 8, b16, b16);
    set_lengths(&c, {{545, 1}, {1100, 3}, {543, 1}});
    c.plan.tile_tokens = 16;
    c.tag = "tilelt";
    add(c);
  }
  for (int bs : {1, 16}) {
    CaseConfig c = base(dev, KVLayout::kHND, bs, 96, 8, 2, f16, f16);
    set_lengths(&c, {{200, 1}, {130, 7}, {15, 1}, {64, 2}});
    c.plan.tile_tokens = 64;
    c.tag = "tilegt";
    add(c);
  }
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 64, 4, 2, f32, f32);
    set_lengths(&c, {{40, 1}, {20, 5}});
    c.plan.tile_tokens = 1;
    c.tag = "tile1";
    add(c);
  }

  // Forced KV splits (the CPU backend may ignore them): more splits than tiles, a split
  // boundary inside a window, sinks that only one split may carry.
  for (int splits : {1, 3, 7}) {
    if (quick && splits == 1) continue;
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 128, 8, 2, f16, f16);
    set_lengths(&c, {{1000, 1}, {5, 1}, {300, 4}, {2, 2}});
    c.plan.num_splits = splits;
    c.tag = "splits";
    add(c);
  }
  {
    CaseConfig c = base(dev, KVLayout::kHND, 32, 64, 16, 2, b16, b16);
    set_lengths(&c, {{1500, 1}, {700, 3}, {3, 1}});
    c.plan.num_splits = 7;
    c.sliding_window = 600;
    c.sinks = true;
    c.alibi = true;
    c.tag = "splitsfeat";
    add(c);
  }

  // Padded pages (hybrid models), each layout, aligned and odd padding.
  for (KVLayout l : kLayouts) {
    for (std::int64_t pad : {std::int64_t{32}, std::int64_t{3}}) {
      if (quick && pad == 32) continue;
      CaseConfig c = base(dev, l, 16, 64, 8, 4, f16, l == KVLayout::kHND ? e4m3 : f16);
      set_lengths(&c, {{17, 1}, {40, 6}, {15, 1}});
      c.page_pad = pad;
      c.tag = "padded";
      add(c);
    }
  }
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kSplit, 544, 128, 8, 2, b16, e4m3);
    set_lengths(&c, {{545, 1}, {1000, 5}});
    c.page_pad = 100;
    c.tag = "padded";
    add(c);
  }

  // fp8 scales != 1 (data scaled so that fp8 is not saturated), derived scales, saturation.
  for (DType kv : {e4m3, e5m2}) {
    for (KVLayout l : {KVLayout::kSplit, KVLayout::kNHD}) {
      if (quick && l == KVLayout::kNHD) continue;
      CaseConfig c = base(dev, l, 16, 128, 8, 2, f16, kv);
      set_lengths(&c, {{50, 1}, {33, 9}, {16, 1}});
      c.k_scale = 0.05f;
      c.v_scale = 3.0f;
      c.tag = "fp8scale";
      add(c);
    }
  }
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kHND, 32, 64, 8, 2, b16, e4m3);
    set_lengths(&c, {{70, 1}, {40, 8}});
    c.k_scale = 0.0f;  // derived: amax / 64
    c.v_scale = 0.0f;
    c.tag = "fp8scale";
    add(c);
    // k / 0.001 reaches 1000 > 448: the writer saturates (bitwise against the writer oracle),
    // and the reader sees the saturated values.
    CaseConfig s = base(dev, KVLayout::kNHD, 16, 64, 8, 2, f32, e4m3);
    set_lengths(&s, {{40, 1}, {20, 4}});
    s.k_scale = 0.001f;
    s.v_scale = 0.001f;
    s.tag = "fp8sat";
    add(s);
  }

  // head_size 64 with the last query row at the very end of its allocation (run_case sizes the
  // query exactly): many decode rows, GQA 4 (Llama-3.2-1B), and a token-strided variant.
  for (DType dt : {f16, b16}) {
    for (KVLayout l : {KVLayout::kSplit, KVLayout::kNHD}) {
      if (quick && !(dt == f16 && l == KVLayout::kSplit)) continue;
      CaseConfig c = base(dev, l, 16, 64, 32, 8, dt, dt);
      std::vector<std::pair<int, int>> seqs;
      for (int i = 0; i < 33; ++i) seqs.push_back({1 + (i * 37) % 97, 1});
      set_lengths(&c, seqs);
      c.tag = "lastrow";
      add(c);
    }
  }
  {
    CaseConfig c = base(dev, KVLayout::kHND, 16, 64, 32, 8, f16, f16);
    set_lengths(&c, {{30, 1}, {17, 3}, {64, 1}});
    c.token_pad = 24;
    c.slot_dtype = DType::kInt32;
    c.tag = "strided";
    add(c);
  }

  {
    // Head-strided activations and strided metadata (block-table rows padded with -1 ids,
    // seq_lens / query_start_loc every other element).
    CaseConfig c = base(dev, KVLayout::kSplit, 16, 128, 16, 4, b16, b16);
    set_lengths(&c, {{40, 1}, {0, 0}, {33, 6}, {17, 1}});
    c.head_pad = 8;
    c.strided_metadata = true;
    c.tag = "strided";
    add(c);
  }

  // K and V caches with different block strides (different page padding): every kernel must
  // address V through V's own strides (vLLM's kernels take `kv_block_stride` from the key cache
  // and use it for both). Shapes that reach, on an H200, the decode fast path (grid, small-call
  // and head-64 pairs), the prefill kernel beside decode rows, and the tiled kernel (odd
  // padding, fp32, fp8), in every layout.
  {
    struct KV {
      KVLayout layout;
      int block, head, heads, kv_heads;
      DType dt, kv;
      std::int64_t kpad, vpad;
      std::vector<std::pair<int, int>> lens;
    };
    const std::vector<std::pair<int, int>> dec = {{3000, 1}, {1, 1}, {64, 1}, {20, 0}, {65, 1}, {700, 1}};
    const std::vector<std::pair<int, int>> mix = {{300, 40}, {50, 50}, {33, 1}, {17, 0}, {129, 1}};
    const KV kvs[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, b16, 0, 64, dec},
        {KVLayout::kHND, 16, 128, 32, 8, f16, f16, 32, 0, mix},
        {KVLayout::kSplit, 16, 64, 16, 2, b16, b16, 0, 40, dec},
        {KVLayout::kNHD, 16, 64, 32, 8, b16, b16, 8, 72, dec},  // head-64 pairs
        {KVLayout::kNHD, 16, 128, 32, 8, b16, b16, 0, 64, {{1024, 1}}},  // small-call
        {KVLayout::kSplit, 32, 96, 12, 4, f32, f32, 3, 0, mix},
        {KVLayout::kHND, 16, 128, 16, 4, b16, e4m3, 16, 48, mix},
    };
    int i = 0;
    for (const KV& k : kvs) {
      ++i;
      if (quick) continue;  // the sanitizer subset is at its size limit
      CaseConfig c = base(dev, k.layout, k.block, k.head, k.heads, k.kv_heads, k.dt, k.kv);
      set_lengths(&c, k.lens);
      c.page_pad = k.kpad;
      c.value_page_pad = k.vpad;
      if (is_fp8(k.kv)) {
        c.k_scale = 0.5f;
        c.v_scale = 0.25f;
      }
      c.tag = "kvstride" + std::to_string(i);
      add(c);
    }
  }

  // The output with other strides than the query (a kernel that stores with the query's
  // strides writes the wrong rows), and attention in place (out is the query view, which
  // AttentionArgs allows: every row must read its query before an output is stored over it,
  // across KV splits and merges). On an H200: the decode fast path with its split merges and
  // forced splits, the small-call kernel, head-64 pairs, the prefill kernel beside decode rows,
  // the tiled kernel with splits (fp32, odd padding).
  {
    struct O {
      KVLayout layout;
      int block, head, heads, kv_heads;
      DType dt;
      std::int64_t qpad, opad, hpad;  // token_pad, out_token_pad (-1: in place), head_pad
      int splits;
      std::vector<std::pair<int, int>> lens;
    };
    const std::vector<std::pair<int, int>> dec = {{3000, 1}, {1, 1}, {64, 1}, {20, 0}, {65, 1}, {700, 1}};
    const std::vector<std::pair<int, int>> mix = {{300, 40}, {50, 50}, {33, 1}, {17, 0}, {129, 1}};
    const O os[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 24, 0, 0, dec},
        {KVLayout::kHND, 16, 128, 32, 8, f16, 16, 0, 0, 0, mix},
        {KVLayout::kSplit, 16, 96, 12, 4, f32, 0, 5, 0, 3, mix},
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 40, 8, 0, {{1024, 1}}},  // small-call
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, -1, 0, 0, dec},
        {KVLayout::kNHD, 16, 128, 32, 8, f16, 0, -1, 0, 5, dec},
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, -1, 0, 0, {{1024, 1}}},  // small-call
        {KVLayout::kNHD, 16, 64, 32, 8, b16, 0, -1, 0, 0, dec},           // head-64 pairs
        {KVLayout::kHND, 16, 128, 32, 8, b16, 24, -1, 8, 0, mix},
        {KVLayout::kSplit, 16, 96, 12, 4, f32, 0, -1, 0, 3, mix},
        {KVLayout::kNHD, 16, 128, 16, 4, b16, 0, -1, 0, 70, {{9000, 1}}},  // the merge kernel
    };
    int i = 0;
    for (const O& o : os) {
      ++i;
      if (quick) continue;
      CaseConfig c = base(dev, o.layout, o.block, o.head, o.heads, o.kv_heads, o.dt, o.dt);
      set_lengths(&c, o.lens);
      c.token_pad = o.qpad;
      c.head_pad = o.hpad;
      if (o.opad < 0) {
        c.in_place = true;
      } else {
        c.out_token_pad = o.opad;
      }
      c.plan.num_splits = o.splits;
      c.tag = "outview" + std::to_string(i);
      add(c);
    }
  }

  // Long prefill chunks: many query tiles per sequence, causal masking across tiles, with and
  // without a window that cuts through the chunk.
  {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 64, 8, 2, f16, f16);
    if (quick) {
      set_lengths(&c, {{300, 300}, {5, 1}});
    } else {
      set_lengths(&c, {{600, 600}, {700, 200}, {5, 1}});
    }
    c.tag = "longprefill";
    add(c);
  }
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kSplit, 32, 128, 8, 2, b16, e4m3);
    set_lengths(&c, {{640, 512}, {33, 1}});
    c.sliding_window = 128;
    c.tag = "longprefill";
    add(c);
  }

  // Many sequences in one batch (work partitioning across SMs / threads), a few skipped and a
  // few short prefill chunks among the decodes.
  {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 128, 8, 2, b16, b16);
    std::vector<std::pair<int, int>> seqs;
    const int n = quick ? 65 : 257;
    for (int i = 0; i < n; ++i) {
      const int len = 1 + (i * 53) % 300;
      const int q = i % 17 == 5 ? 0 : (i % 11 == 3 ? std::min(len, 3) : 1);
      seqs.push_back({len, q});
    }
    set_lengths(&c, seqs);
    c.tag = "manyseqs";
    add(c);
  }

  // GQA 64 (one KV head for 64 query heads: more query heads per KV head than one tile of rows).
  {
    CaseConfig c = base(dev, KVLayout::kHND, 16, 128, 64, 1, f16, f16);
    set_lengths(&c, {{300, 1}, {50, 10}, {17, 1}});
    c.tag = "gqa64";
    add(c);
  }

  // Head sizes the API accepts beyond the tested list (every multiple of 8 up to 512; vLLM's
  // prefix-prefill test uses 24), and a non-power-of-two block of Qwen3.5 (1056).
  {
    struct Odd {
      KVLayout layout;
      int head;
      DType dtype, kv;
    };
    const Odd odd[] = {{KVLayout::kSplit, 24, f16, f16},
                       {KVLayout::kNHD, 8, f32, f32},
                       {KVLayout::kHND, 16, b16, e4m3},
                       {KVLayout::kNHD, 248, b16, b16}};
    for (const Odd& o : odd) {
      if (quick && o.head != 24) continue;
      CaseConfig c = base(dev, o.layout, 16, o.head, 8, 2, o.dtype, o.kv);
      set_lengths(&c, {{40, 1}, {33, 5}, {1, 1}});
      c.tag = "oddhead";
      add(c);
    }
  }
  // Head size 512 (Gemma-4's global layers) on every layout and cache kind: the tiled kernel's
  // largest instance (16 rows, tiles cut to fit the shared memory), decode and prefill rows, a
  // prefill chunk longer than a tile and a decode longer than a split.
  {
    struct H512 {
      KVLayout layout;
      int head, kvh;
      DType dtype, kv;
    };
    // 264 and 456: the same instance with head-dim pairs past head_size idle.
    const H512 cfgs[] = {{KVLayout::kNHD, 512, 2, b16, b16},
                         {KVLayout::kHND, 512, 1, f32, f32},
                         {KVLayout::kSplit, 512, 2, f16, e4m3},
                         {KVLayout::kNHD, 512, 4, b16, e5m2},
                         {KVLayout::kHND, 264, 2, f16, f16},
                         {KVLayout::kSplit, 456, 2, b16, b16}};
    for (const H512& h : cfgs) {
      if (quick && (h.layout != KVLayout::kSplit || h.head != 512)) continue;
      CaseConfig c = base(dev, h.layout, 16, h.head, 8, h.kvh, h.dtype, h.kv);
      set_lengths(&c, {{70, 1}, {40, 9}, {1, 1}, {17, 1}});
      c.tag = h.head == 512 ? "head512" : "headover256";
      add(c);
    }
  }

  // fp8 scales as device tensors (KVCache::k_scales / v_scales): one element, and one per KV
  // head (each head its own scale, so a reader that takes head 0's for every head, or the
  // host scalar, is off by up to 4x), in the writer and the reader, decode and prefill.
  for (ScaleMode mode : {ScaleMode::kTensor, ScaleMode::kPerHead}) {
    for (KVLayout l : {KVLayout::kNHD, KVLayout::kSplit}) {
      if (quick && (l == KVLayout::kSplit || mode == ScaleMode::kTensor)) continue;
      CaseConfig c = base(dev, l, 16, 128, 8, 4, b16, l == KVLayout::kSplit ? e5m2 : e4m3);
      set_lengths(&c, {{90, 1}, {33, 6}, {1, 1}});
      c.scales = mode;
      c.k_scale = 0.0f;  // derived from the data (amax / 64), then varied per head
      c.v_scale = 0.0f;
      c.tag = "devscales";
      add(c);
    }
  }

  // Batch-invariant plans (PlanOptions::batch_invariant) must still be exact: fixed-token splits
  // of a long decode, and a windowed prefill on the absolute tile grid (a forced split count
  // with the mode is refused: test_api.cpp PlanOptionsRules).
  for (int window : {0, 250}) {
    if (quick && window != 0) continue;
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 72, 8, 2, f16, f16);
    set_lengths(&c, {{4500, 1}, {300, 17}, {2049, 1}, {1, 1}});
    c.sliding_window = window;
    c.plan.batch_invariant = true;
    c.tag = "invariant";
    add(c);
  }

  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kNHD, 1056, 128, 8, 2, b16, b16);
    set_lengths(&c, {{1057, 1}, {1055, 1}, {2113, 4}});
    c.extra_blocks = 1;
    c.tag = "bs1056";
    add(c);
  }

  // max_seq_len = 256k + 1 (one past a partition boundary).
  for (int bs : {16, 32}) {
    if (quick && bs == 32) continue;
    const DType dt = bs == 16 ? f16 : b16;
    CaseConfig c = base(dev, KVLayout::kNHD, bs, 128, 8, 2, dt, dt);
    set_lengths(&c, {{257, 1}, {513, 1}, {256, 1}, {512, 1}, {513, 17}});
    c.tag = "len257_513";
    add(c);
  }

  // Block size 2048 (hybrid Mamba models) with head 64/128/256: a tile sized from the block
  // would ask for far more shared memory than the device has.
  for (int d : {64, 128, 256}) {
    CaseConfig c = base(dev, KVLayout::kNHD, 2048, d, 8, 2, b16, b16);
    if (quick) {
      set_lengths(&c, {{2049, 1}, {2047, 1}});
    } else {
      set_lengths(&c, {{2047, 1}, {2049, 1}, {4097, 2}, {2048, 1}});
    }
    c.page_pad = d == 128 ? 64 : 0;  // W5: block 2048 with padded pages
    c.tag = "bs2048";
    add(c);
  }

  // Sequences longer than the plan saw (a decode CUDA graph replayed at later steps): the
  // split plan is made for the planned lengths, the run's metadata holds the real ones. Decode
  // only (the decode fast path: cluster merge / work list), a window with sinks in the split
  // layout, and fp8 with a prefill chunk (the tiled kernel on CUDA).
  {
    struct G {
      KVLayout layout;
      int block, head, heads, kv_heads;
      DType dt, kv;
      std::vector<std::pair<int, int>> lens;
      std::vector<int> planned;
      int window;
    };
    const G gs[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, b16, {{3000, 1}, {700, 1}, {65, 1}, {20, 0}},
         {1024, 64, 65, 20}, 0},
        {KVLayout::kSplit, 32, 64, 16, 2, f16, f16, {{5000, 1}, {1, 1}, {300, 1}}, {200, 1, 299}, 100},
        {KVLayout::kHND, 16, 128, 32, 8, b16, e4m3, {{2000, 1}, {500, 40}}, {100, 500}, 0},
    };
    for (const G& g : gs) {
      CaseConfig c = base(dev, g.layout, g.block, g.head, g.heads, g.kv_heads, g.dt, g.kv);
      set_lengths(&c, g.lens);
      c.planned_seq_lens = g.planned;
      c.sliding_window = g.window;
      c.sinks = g.window > 0;
      if (is_fp8(g.kv)) {
        c.k_scale = 0.5f;
        c.v_scale = 0.25f;
      }
      c.tag = "grown";
      add(c);
    }
  }

  // A pool much larger than needed: block ids spread far apart.
  {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 64, 8, 2, f16, f16);
    set_lengths(&c, {{300, 1}, {120, 4}, {33, 1}});
    c.extra_blocks = quick ? 1000 : 3000;
    c.tag = "bigpool";
    add(c);
  }

  // CPU worker threads forced: one, and more threads than work items.
  for (int threads : {1, 7}) {
    if (quick && threads == 1) continue;
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 64, 4, 2, f32, f32);
    set_lengths(&c, {{40, 1}, {0, 0}, {20, 5}});
    c.plan.num_threads = threads;
    c.tag = "threads";
    add(c);
  }

  // Small softcap and sinks that dominate, MQA with long prefill chunks.
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kSplit, 32, 128, 16, 1, f32, f32);
    set_lengths(&c, {{200, 64}, {64, 1}, {90, 30}});
    c.softcap = 0.7f;
    c.sinks = true;
    c.tag = "mqaprefill";
    add(c);
  }

  // The names DESIGN.md uses as examples (§4, §7), so that `pagedattn verify --cases NAME` and
  // `--gtest_filter=*NAME` work as documented: a 544-token block, head 80, GQA 4, bf16, window
  // 64, with decode and prefill rows on both sides of the window edge and of a block boundary.
  for (const char* name : {"nhd_bs544_h80_q16kv4_bf16_window64", "nhd_bs544_h80_gqa4_bf16_window64"}) {
    CaseConfig c = base(dev, KVLayout::kNHD, 544, 80, 16, 4, b16, b16);
    set_lengths(&c, {{544, 1}, {545, 1}, {63, 1}, {64, 1}, {65, 1}, {600, 40}, {1100, 7}});
    c.sliding_window = 64;
    if (name[14] == 'g') {  // the gqa4 spelling: the same shape with 32/8 heads
      c.num_heads = 32;
      c.num_kv_heads = 8;
    }
    c.name = name;
    if (!quick) add(c);
  }
  add_kernel_path_cases(dev, quick, out);
}

}  // namespace pagedattn::testing::detail
