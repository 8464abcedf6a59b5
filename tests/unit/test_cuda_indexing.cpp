// Host emulation of the CUDA kernels' index math (src/cuda/common/cache_index.h is compiled both for
// the device and here) and of the tiled kernel's sizing (src/cuda/tiled/cuda_config.h): runs on any
// machine, GPU or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/cuda/common/cache_index.h"
#include "src/cuda/tiled/cuda_config.h"

namespace pagedattn::cuda {
namespace {

std::int64_t offset_of(const TensorView& t, std::initializer_list<std::int64_t> idx) {
  std::int64_t off = 0;
  int d = 0;
  for (std::int64_t i : idx) off += i * t.strides[d++];
  return off;
}

Strides4 strides4(const TensorView& t) {
  Strides4 s{};
  for (int d = 0; d < 4; ++d) s.s[d] = t.strides[d];
  return s;
}

struct Geo {
  KVLayout layout;
  DType dtype;
  int block_size, kvh, head;
  std::int64_t pad;
};

std::vector<Geo> geometries() {
  std::vector<Geo> g;
  for (KVLayout l : {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND})
    for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat8E4M3})
      for (int head : {8, 16, 40, 64, 80, 96, 128, 256})
        for (std::int64_t pad : {std::int64_t{0}, std::int64_t{3}, std::int64_t{16}}) {
          const int x = static_cast<int>(16 / dtype_size(dt));
          if (l == KVLayout::kSplit && head % x != 0) continue;
          g.push_back({l, dt, head % 3 == 0 ? 5 : 16, head <= 64 ? 3 : 2, head, pad});
        }
  return g;
}

// The kernels' key/value offsets equal the generic strided offset of the logical index, for
// every layout, dtype, head size and page padding.
TEST(CudaIndexing, CacheOffsetsMatchTensorStrides) {
  for (const Geo& g : geometries()) {
    KVCacheSpec spec{g.layout, 6, g.block_size, g.kvh, g.head, g.dtype, g.pad};
    auto cache = make_kv_cache(spec, reinterpret_cast<void*>(256), reinterpret_cast<void*>(512));
    ASSERT_TRUE(cache.ok()) << cache.status().to_string();
    const TensorView& k = cache->key;
    const TensorView& v = cache->value;
    const int x = static_cast<int>(16 / dtype_size(g.dtype));
    const Strides4 ks = strides4(k), vs = strides4(v);
    const int layout = static_cast<int>(g.layout);
    for (std::int64_t b = 0; b < 6; ++b)
      for (std::int64_t t = 0; t < g.block_size; ++t)
        for (std::int64_t h = 0; h < g.kvh; ++h)
          for (std::int64_t d = 0; d < g.head; ++d) {
            std::int64_t kw, vw;
            switch (g.layout) {
              case KVLayout::kSplit:
                kw = offset_of(k, {b, h, d / x, t, d % x});
                vw = offset_of(v, {b, h, d, t});
                break;
              case KVLayout::kNHD:
                kw = offset_of(k, {b, t, h, d});
                vw = offset_of(v, {b, t, h, d});
                break;
              default:
                kw = offset_of(k, {b, h, t, d});
                vw = offset_of(v, {b, h, t, d});
                break;
            }
            ASSERT_EQ(key_offset(layout, x, ks, b, t, h, d), kw);
            ASSERT_EQ(value_offset(layout, vs, b, t, h, d), vw);
            ASSERT_LT(kw, k.span());
            ASSERT_LT(vw, v.span());
          }
  }
}

TEST(CudaIndexing, OffsetsAre64Bit) {
  const Strides4 s{{std::int64_t{16} * 8 * 128, 8 * 128, 128, 1}};
  const std::int64_t b = 140000;  // b * 16384 > 2^31
  EXPECT_EQ(key_offset(kLayoutNHD, 0, s, b, 15, 7, 127), b * 16384 + 15 * 1024 + 7 * 128 + 127);
  EXPECT_GT(key_offset(kLayoutNHD, 0, s, b, 0, 0, 0), std::int64_t{1} << 31);
}

TEST(CudaIndexing, SlotsNegativeOrPastTheCacheAreSkipped) {
  EXPECT_FALSE(decompose_slot(-1, 16, 10).ok);
  EXPECT_FALSE(decompose_slot(-17, 16, 10).ok);
  EXPECT_FALSE(decompose_slot(160, 16, 10).ok);
  EXPECT_FALSE(decompose_slot(std::int64_t{1} << 40, 16, 10).ok);
  const SlotPos p = decompose_slot(159, 16, 10);
  EXPECT_TRUE(p.ok);
  EXPECT_EQ(p.block, 9);
  EXPECT_EQ(p.offset, 15);
  const SlotPos q = decompose_slot((std::int64_t{1} << 33) + 5, 544, std::int64_t{1} << 30);
  EXPECT_TRUE(q.ok);
  EXPECT_EQ(q.block * 544 + q.offset, (std::int64_t{1} << 33) + 5);
}

TEST(CudaIndexing, BlockLookupRejectsWhatIsOutsideTheTableOrThePool) {
  const std::int32_t row[4] = {7, -1, 12, 3};
  EXPECT_EQ(lookup_block(row, 1, 4, 0, 16, 10).block, 7);
  EXPECT_EQ(lookup_block(row, 1, 4, 15, 16, 10).offset, 15);
  EXPECT_EQ(lookup_block(row, 1, 4, 16, 16, 10).block, -1);  // negative id
  EXPECT_EQ(lookup_block(row, 1, 4, 32, 16, 10).block, -1);  // id 12 >= num_blocks
  EXPECT_EQ(lookup_block(row, 1, 4, 48, 16, 10).block, 3);
  EXPECT_EQ(lookup_block(row, 1, 4, 64, 16, 10).block, -1);  // past the row
  EXPECT_EQ(lookup_block(row, 1, 4, -1, 16, 10).block, -1);
  const std::int32_t strided[8] = {1, 99, 2, 99, 3, 99, 4, 99};
  EXPECT_EQ(lookup_block(strided, 2, 4, 5 * 2 + 1, 5, 10).block, 3);
}

// The tile loader's items cover every (token, unit) of a tile exactly once, stay inside the
// tile's shared memory and inside one 16-byte x-group of the split key, and copy contiguous,
// aligned global runs of the right elements.
TEST(CudaIndexing, TileLoaderCoversTheTileOnceAndStaysInBounds) {
  for (const Geo& g : geometries())
    for (bool is_key : {true, false})
      for (int tile : {1, 5, 16, 64})
        for (std::uintptr_t base : {std::uintptr_t{4096}, std::uintptr_t{4096 + 4}}) {
          KVCacheSpec spec{g.layout, 5, g.block_size, g.kvh, g.head, g.dtype, g.pad};
          auto cache = make_kv_cache(spec, reinterpret_cast<void*>(base), reinterpret_cast<void*>(base));
          ASSERT_TRUE(cache.ok());
          const TensorView& t = is_key ? cache->key : cache->value;
          const int es = static_cast<int>(dtype_size(g.dtype));
          const int x = 16 / es;
          const bool split = g.layout == KVLayout::kSplit;
          const Strides4 st = strides4(t);
          const int unit = choose_unit_bytes(base, st.s, split ? 4 : 3, es,
                                             split ? (is_key ? x : 1) : g.head);
          const TiledSmem sm = tiled_smem(g.head, es, g.layout, 16, tile);
          const int row_bytes = is_key ? sm.k_row_bytes : sm.v_row_bytes;
          const int rows = (tile + 3) / 4 * 4;
          const int ue = unit > 0 ? unit / es : 1;
          ASSERT_EQ(g.head % ue, 0);
          const int upr = g.head / ue;
          std::set<std::pair<int, int>> seen;
          for (int i = 0; i < rows * upr; ++i) {
            const TileUnit u = tile_unit(i, rows, upr, ue, split);
            ASSERT_TRUE(u.t >= 0 && u.t < rows);
            ASSERT_TRUE(u.d >= 0 && u.d + ue <= g.head);
            ASSERT_TRUE(seen.insert({u.t, u.d}).second) << "item " << i << " repeats";
            const int dst = u.t * row_bytes + u.d * es;
            ASSERT_LE(u.d * es + ue * es, row_bytes);
            if (unit > 0) {
              ASSERT_EQ(dst % unit, 0) << "cp.async destination misaligned";
            }
            if (split && is_key) {
              ASSERT_LE(u.d % x + ue, x) << "unit crosses an x group";
            }
            // global: the unit's elements are contiguous and the run is aligned
            for (std::int64_t b : {std::int64_t{0}, std::int64_t{4}})
              for (std::int64_t off : {std::int64_t{0}, std::int64_t{g.block_size - 1}}) {
                const int layout = static_cast<int>(g.layout);
                const std::int64_t e0 = is_key ? key_offset(layout, x, st, b, off, g.kvh - 1, u.d)
                                               : value_offset(layout, st, b, off, g.kvh - 1, u.d);
                for (int k = 1; k < ue; ++k) {
                  const std::int64_t ek = is_key ? key_offset(layout, x, st, b, off, g.kvh - 1, u.d + k)
                                                 : value_offset(layout, st, b, off, g.kvh - 1, u.d + k);
                  ASSERT_EQ(ek, e0 + k);
                }
                ASSERT_LE(e0 + ue, t.span());
                if (unit > 0) {
                  ASSERT_EQ((base + static_cast<std::uintptr_t>(e0 * es)) % unit, 0u);
                }
              }
          }
          ASSERT_EQ(static_cast<int>(seen.size()), rows * upr);
        }
}

// Shared-memory regions: aligned, disjoint, and large enough for every read of the QK and PV
// steps (16-byte key chunks, query rows in 16-byte chunks, value pairs, score rows).
TEST(CudaIndexing, SharedMemoryCarveUpHoldsEveryAccess) {
  for (int head = 8; head <= 512; head += 8)
    for (int es : {1, 2, 4})
      for (KVLayout l : {KVLayout::kSplit, KVLayout::kNHD})
        for (int mmax : {16, 32, 64})
          for (int tile : {1, 3, 8, 33, 64}) {
            const TiledSmem s = tiled_smem(head, es, l, mmax, tile);
            const int rows = (tile + 3) / 4 * 4;
            for (int off : {s.off_q, s.off_k, s.off_v, s.off_s, s.off_rows, s.total}) ASSERT_EQ(off % 16, 0);
            ASSERT_EQ(s.k_row_bytes % 16, 0);
            ASSERT_EQ((s.k_row_bytes / 16) % 2, 1) << "key rows must be an odd number of 16B units";
            ASSERT_EQ(s.v_row_bytes % (2 * es), 0);
            const int nchunks = (head * es + 15) / 16;
            ASSERT_LE(nchunks * 16, s.k_row_bytes);                      // K chunk reads
            ASSERT_LE(nchunks * (16 / es), s.q_stride);                   // Q chunk reads
            ASSERT_LE(head * es, s.v_row_bytes);                          // V pair reads
            ASSERT_LE(s.off_q + mmax * s.q_stride * 4, s.off_k);
            ASSERT_LE(s.off_k + 2 * rows * s.k_row_bytes, s.off_v);
            ASSERT_LE(s.off_v + 2 * rows * s.v_row_bytes, s.off_s);
            ASSERT_LE(s.off_s + mmax * rows * 4, s.off_rows);
            ASSERT_LE(s.off_rows + mmax * 24, s.total);
          }
}

TEST(CudaIndexing, SplitsPartitionTheKeyRange) {
  for (std::int64_t seq_len : {1, 17, 64, 65, 1000, 131072})
    for (int splits : {1, 2, 3, 7, 64})
      for (int tile : {1, 16, 64})
        for (std::int64_t lo : {std::int64_t{0}, seq_len / 3}) {
          const std::int64_t hi = seq_len;
          std::int64_t covered = lo;
          for (int s = 0; s < splits; ++s) {
            const KeyRange r = split_range(lo, hi, seq_len, splits, s, tile);
            ASSERT_LE(r.lo, r.hi);
            if (r.hi == r.lo) continue;
            ASSERT_EQ(r.lo, covered) << "gap or overlap at split " << s;
            covered = r.hi;
          }
          ASSERT_EQ(covered, hi);
        }
}

// Fixed-token cuts (batch-invariant mode): the splits partition the range, and a sequence's
// cut is the same whatever split count the batch's longest sequence gave the grid, as long as
// that count covers the sequence with the base chunk or both counts make it double.
TEST(CudaIndexing, FixedTokenSplitsPartitionAndDoNotDependOnTheGrid) {
  for (std::int64_t seq_len : {1, 17, 2047, 2048, 2049, 32768, 32769, 100000, 1 << 20})
    for (int splits : {1, 2, 3, 16, 64})
      for (std::int64_t lo : {std::int64_t{0}, seq_len / 3}) {
        std::int64_t covered = lo;
        for (int s = 0; s < splits; ++s) {
          const KeyRange r = split_range_fixed(lo, seq_len, seq_len, splits, s, 2048);
          ASSERT_LE(r.lo, r.hi);
          if (r.hi == r.lo) continue;
          ASSERT_EQ(r.lo, covered) << "gap or overlap at split " << s;
          covered = r.hi;
        }
        ASSERT_EQ(covered, seq_len) << "seq_len " << seq_len << ", " << splits << " splits";
      }
  // The grid's split count as tiled_choose sets it: ceil(max_seq_len / 2048) up to 16. A
  // sequence alone and next to longer ones gets the same chunk.
  auto grid = [](std::int64_t max_len) {
    return static_cast<int>(std::min<std::int64_t>(16, (max_len + 2047) / 2048));
  };
  for (std::int64_t len : {1, 2048, 2049, 20000, 32768, 32769, 500000})
    for (std::int64_t other : {len, len + 1, 2 * len, std::int64_t{40000}, std::int64_t{1} << 21}) {
      const std::int64_t longest = std::max(len, other);
      EXPECT_EQ(tiled_split_chunk(len, 2048, grid(len)), tiled_split_chunk(len, 2048, grid(longest)))
          << "seq_len " << len << " alone and next to " << other;
    }
  EXPECT_EQ(tiled_split_chunk(32769, 2048, 16), 4096);
  EXPECT_EQ(tiled_split_chunk(100, 2048, 1), 2048);
}

// Every key a row may see (causal, window) is inside the CTA's range, and the range never
// reaches past seq_len (keys past it hold NaN in the tests).
TEST(CudaIndexing, CtaKeyRangeCoversEveryRowAndStaysInsideTheSequence) {
  for (int seq_len : {1, 5, 16, 100})
    for (int qlen = 1; qlen <= seq_len && qlen <= 20; qlen += 3)
      for (int q_tokens : {1, 4, 16})
        for (int window : {0, 1, 3, 50}) {
          const std::int64_t q_begin = 10, q_end = q_begin + qlen;
          for (std::int64_t tok0 = q_begin; tok0 < q_end; tok0 += q_tokens) {
            const std::int64_t tok_end = std::min(tok0 + q_tokens, q_end);
            const KeyRange r = cta_key_range(q_begin, q_end, tok0, tok_end, seq_len, window);
            ASSERT_GE(r.lo, 0);
            ASSERT_LE(r.hi, seq_len);
            for (std::int64_t t = tok0; t < tok_end; ++t) {
              const std::int64_t qpos = seq_len - qlen + (t - q_begin);
              ASSERT_TRUE(key_allowed(qpos, qpos, window)) << "a row must see its own key";
              for (std::int64_t j = 0; j < seq_len; ++j)
                if (key_allowed(j, qpos, window)) {
                  ASSERT_TRUE(j >= r.lo && j < r.hi);
                }
            }
          }
        }
}

TEST(CudaIndexing, RowMapCoversEveryQueryHeadOnce) {
  for (int gqa : {1, 4, 5, 8, 16, 32, 64})
    for (int mql : {1, 7, 100}) {
      ProblemDesc pd;
      pd.device = Device::cuda();
      pd.num_kv_heads = 2;
      pd.num_heads = 2 * gqa;
      pd.head_size = 128;
      pd.batch.max_query_len = mql;
      TiledConfig c;
      choose_rows(pd, &c);
      ASSERT_LE(c.rows, c.mmax);
      ASSERT_EQ(c.rows, c.q_tokens * c.heads_per_cta);
      std::set<std::pair<int, int>> seen;
      for (int grp = 0; grp < c.head_groups; ++grp)
        for (int m = 0; m < c.rows; ++m) {
          const RowMap r = row_map(m, c.heads_per_cta, grp);
          if (r.head_in >= gqa) continue;
          ASSERT_TRUE(seen.insert({r.q_tok, r.head_in}).second);
        }
      ASSERT_EQ(static_cast<int>(seen.size()), c.q_tokens * gqa);
    }
}

TEST(CudaIndexing, RowTilesCountCeilPerSequence) {
  const std::int32_t qsl[] = {0, 1, 1, 18, 19, 83};
  EXPECT_EQ(count_row_tiles(qsl, 1, 5, 16), 1 + 0 + 2 + 1 + 4);
  EXPECT_EQ(count_row_tiles(qsl, 1, 5, 1), 83);
  // GQA rows flattened into the tiles (the prefill kernel): ceil(query_len * 4 / 64).
  EXPECT_EQ(count_row_tiles(qsl, 1, 5, 64, 1, 4), 1 + 0 + 2 + 1 + 4);
  EXPECT_EQ(count_row_tiles(qsl, 1, 5, 64, 2, 4), 0 + 0 + 2 + 0 + 4);
  // The decode rows only (max_query_len 1): the batch-invariant tiled decode rows.
  EXPECT_EQ(count_row_tiles(qsl, 1, 5, 16, 1, 1, 1), 1 + 0 + 0 + 1 + 0);
  EXPECT_EQ(count_row_tiles(qsl, 1, 5, 16, 2, 1, 17), 0 + 0 + 2 + 0 + 0);
}

// Every tile of the prefix sums maps to the sequence whose range holds it, sequences without
// tiles skipped (the CTA -> sequence lookup of the tiled and prefill kernels).
TEST(CudaIndexing, TileSequenceFindsTheOwningSequence) {
  std::uint64_t state = 12345;
  auto next = [&](int n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((state >> 33) % static_cast<std::uint64_t>(n));
  };
  for (int trial = 0; trial < 300; ++trial) {
    const int num_seqs = 1 + next(40);
    std::vector<std::int32_t> ts(num_seqs + 1, 0);
    for (int s = 0; s < num_seqs; ++s) ts[s + 1] = ts[s] + (next(3) == 0 ? 0 : next(5));
    for (int tile = 0; tile < ts[num_seqs]; ++tile) {
      int want = -1;
      for (int s = 0; s < num_seqs; ++s)
        if (ts[s] <= tile && tile < ts[s + 1]) want = s;
      ASSERT_EQ(tile_sequence(ts.data(), num_seqs, tile), want) << "trial " << trial;
    }
  }
}

// Selection for an H200-like and a 48 KiB device: the shared memory never exceeds the limit,
// tiles stay <= 64 tokens whatever the block size, forced options are honoured.
TEST(CudaIndexing, ChooseConfigRespectsTheSharedMemoryLimit) {
  for (std::int64_t limit : {std::int64_t{232448}, std::int64_t{49152}}) {
    DeviceInfo info;
    info.device = Device::cuda();
    info.num_units = 132;
    info.max_shared_memory_per_block = limit;
    for (int head : {8, 64, 128, 256})
      for (DType q : {DType::kFloat32, DType::kBFloat16})
        for (int bs : {1, 16, 2048})
          for (int mql : {1, 300}) {
            ProblemDesc pd;
            pd.device = info.device;
            pd.num_heads = 32;
            pd.num_kv_heads = 8;
            pd.head_size = head;
            pd.q_dtype = q;
            pd.cache_dtype = q;
            pd.layout = KVLayout::kSplit;
            pd.block_size = bs;
            pd.batch.num_seqs = 2;
            pd.batch.num_tokens = mql + 1;
            pd.batch.max_query_len = mql;
            pd.batch.num_decode_seqs = 1;
            pd.batch.num_prefill_seqs = mql > 1 ? 1 : 0;
            pd.batch.max_seq_len = 131072;
            auto c = tiled_choose(pd, info, PlanOptions{});
            if (!c.ok()) {
              EXPECT_EQ(c.status().code(), StatusCode::kUnsupported);
              continue;
            }
            EXPECT_LE(c->shared_memory_bytes, limit);
            EXPECT_GE(c->tile_tokens, 1);
            EXPECT_LE(c->tile_tokens, kMaxTileTokens);
            EXPECT_GE(c->num_splits, 1);
            EXPECT_EQ(c->threads_per_block, kTiledThreads);
            EXPECT_EQ(c->kernel, KernelId::kCudaTiled);
          }
  }
  DeviceInfo info;
  info.device = Device::cuda();
  info.num_units = 132;
  info.max_shared_memory_per_block = 232448;
  ProblemDesc pd;
  pd.device = info.device;
  pd.num_heads = 8;
  pd.num_kv_heads = 2;
  pd.head_size = 128;
  pd.q_dtype = pd.cache_dtype = DType::kFloat16;
  pd.batch.num_seqs = 1;
  pd.batch.num_tokens = 1;
  pd.batch.num_decode_seqs = 1;
  pd.batch.max_query_len = 1;
  pd.batch.max_seq_len = 131072;
  auto automatic = tiled_choose(pd, info, PlanOptions{});
  ASSERT_TRUE(automatic.ok());
  EXPECT_GT(automatic->num_splits, 1) << "one long sequence must be split over the SMs";
  PlanOptions forced;
  forced.tile_tokens = 5;
  forced.num_splits = 3;
  auto f = tiled_choose(pd, info, forced);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->tile_tokens, 5);
  EXPECT_EQ(f->num_splits, 3);
}

// The tiled kernel's split choice on an H200-like device (132 SMs): a skewed decode batch
// splits its long sequence although the batch's CTAs fill the device, the same tokens spread
// evenly do not split, and batch-invariant plans take the fixed cut and a tile that does not
// follow the batch's lengths.
namespace skew_select {
ProblemDesc decode_batch(const std::vector<int>& lens) {
  ProblemDesc pd;
  pd.device = Device::cuda();
  pd.num_heads = 32;
  pd.num_kv_heads = 8;
  pd.head_size = 72;
  pd.q_dtype = pd.cache_dtype = DType::kFloat16;
  pd.layout = KVLayout::kNHD;
  pd.block_size = 16;
  pd.batch.num_seqs = static_cast<int>(lens.size());
  pd.batch.num_tokens = static_cast<std::int64_t>(lens.size());
  pd.batch.num_decode_seqs = static_cast<int>(lens.size());
  pd.batch.max_query_len = 1;
  for (int l : lens) {
    pd.batch.max_seq_len = std::max(pd.batch.max_seq_len, l);
    pd.batch.total_kv_tokens += l;
  }
  return pd;
}
}  // namespace skew_select

TEST(CudaIndexing, SkewedDecodeBatchesSplitTheirLongSequence) {
  DeviceInfo info;
  info.device = Device::cuda();
  info.num_units = 132;
  info.max_shared_memory_per_block = 232448;
  std::vector<int> skew(64, 512), even(64, 1016);
  skew[17] = 32768;
  auto s = tiled_choose(skew_select::decode_batch(skew), info, PlanOptions{});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_GE(s->num_splits, 8) << s->reason;
  EXPECT_NE(s->reason.find("skewed"), std::string::npos) << s->reason;
  auto e = tiled_choose(skew_select::decode_batch(even), info, PlanOptions{});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->num_splits, 1) << e->reason;
  // The plan's cut is the one the choice reported.
  const ProblemDesc pd = skew_select::decode_batch(skew);
  auto cfg = make_tiled_config(pd, s->tile_tokens, s->num_splits, info.max_shared_memory_per_block);
  ASSERT_TRUE(cfg.ok());
  apply_split_cut(pd, info, PlanOptions{}, &cfg.value());
  const int share = tiled_skew_split_tokens(pd, info, PlanOptions{}, cfg->head_groups, cfg->tile_tokens);
  EXPECT_EQ(cfg->split_tokens, share);
  EXPECT_GE(static_cast<std::int64_t>(share) * s->num_splits, 32768);
  EXPECT_GE(share, 512) << "the short sequences stay in one split";
  EXPECT_FALSE(cfg->tile_grid);

  PlanOptions inv;
  inv.batch_invariant = true;
  std::vector<int> tiny{20, 7};
  auto t = tiled_choose(skew_select::decode_batch(tiny), info, inv);
  auto t0 = tiled_choose(skew_select::decode_batch(tiny), info, PlanOptions{});
  ASSERT_TRUE(t.ok() && t0.ok());
  EXPECT_EQ(t->tile_tokens, 64) << "batch-invariant tiles do not follow the batch's lengths";
  EXPECT_LT(t0->tile_tokens, 64);
  EXPECT_EQ(t->num_splits, 1);
  auto l = tiled_choose(skew_select::decode_batch(skew), info, inv);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->num_splits, 16) << l->reason;  // ceil(32768 / 2048)
  auto cl = make_tiled_config(pd, l->tile_tokens, l->num_splits, info.max_shared_memory_per_block);
  ASSERT_TRUE(cl.ok());
  apply_split_cut(pd, info, inv, &cl.value());
  EXPECT_EQ(cl->split_tokens, kInvariantSplitTokens);
  EXPECT_TRUE(cl->tile_grid);
}

}  // namespace
}  // namespace pagedattn::cuda
