// The named cases aimed at each CUDA kernel path (case_builders.h, add_kernel_path_cases).
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

void add_kernel_path_cases(Device dev, bool quick, std::vector<CaseConfig>* out) {
  auto add = [&](CaseConfig c) { out->push_back(finish(std::move(c))); };
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16, b16 = DType::kBFloat16;
  const DType e4m3 = DType::kFloat8E4M3, e5m2 = DType::kFloat8E5M2;

  // The CUDA decode fast path (all-decode batches, fp16/bf16, head 64/128, GQA <= 16): every
  // layout and block size it takes, each GQA packing, split counts from 1 to many (the merge),
  // windows whose start falls inside a 64-token tile, skipped sequences, padded pages (aligned:
  // the fast path; odd: the tiled fallback), and every feature. On the CPU these are ordinary
  // decode cases.
  {
    const DecodeCase ds[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 0, 0},
        {KVLayout::kHND, 16, 128, 32, 8, f16, 1, 0, 0},
        {KVLayout::kSplit, 16, 128, 32, 8, b16, 2, 0, 0},
        {KVLayout::kNHD, 1, 64, 16, 16, f16, 0, 0, 5},
        {KVLayout::kHND, 2048, 128, 64, 4, b16, 3, 64, 0},
        {KVLayout::kSplit, 544, 64, 8, 1, f16, 1, 0, 3},
        {KVLayout::kNHD, 544, 64, 40, 5, b16, 2, 8, 0},
        {KVLayout::kSplit, 32, 128, 16, 2, f16, 0, 24, 1},
        {KVLayout::kHND, 16, 64, 32, 8, b16, 0, 3, 0},  // odd pad: tiled fallback
        // Head 64 with 16 query columns (GQA 9-16): its own register budget (3 CTAs per SM
        // where GQA <= 8 runs 4), a group that fills neither 8 nor 16 columns, and 16 of 16.
        {KVLayout::kNHD, 16, 64, 24, 2, b16, 1, 0, 0},
        {KVLayout::kSplit, 16, 64, 16, 1, f16, 2, 0, 4},
    };
    int i = 0;
    for (const DecodeCase& d : ds) {
      ++i;
      if (quick && i != 1 && i != 7) continue;
      CaseConfig c = base(dev, d.layout, d.block, d.head, d.heads, d.kv_heads, d.dt, d.dt);
      set_lengths(&c, {{3000, 1}, {1, 1}, {64, 1}, {20, 0}, {65, 1}, {700, 1}, {d.block + 1, 1}});
      set_decode_features(&c, d.feature, d.pad, d.splits);
      c.tag = "dmma" + std::to_string(i);
      add(c);
    }
    // More splits than the merge kernel folds in one batch (8 per thread: 64 splits for head
    // 128, 128 for head 64), so its running (max, sum) carries across batches, with a sink and
    // a split count that is not a multiple of its split groups.
    for (int head : {128, 64}) {
      CaseConfig c = base(dev, head == 128 ? KVLayout::kNHD : KVLayout::kHND, 16, head, 16, 4,
                          b16, b16);
      set_lengths(&c, {{9000, 1}, {130, 1}, {4100, 1}});
      c.sinks = true;
      c.softcap = 30.0f;
      c.plan.num_splits = 141;  // 64-token splits of the 9000-token sequence
      c.tag = "dmmamany";
      add(c);
    }
  }

  // fp8 caches on the decode fast path (e4m3 and e5m2 with fp16 and bf16 queries, head 64 and
  // 128, every layout): the kernel stages the fp8 bytes and dequantises after ldmatrix, with
  // the head dims permuted in the S^T k-steps, the value dims permuted in O^T (nhd/hnd) and the
  // tokens permuted in the P V k-steps (split), so each layout, GQA 1 to 16 (one and two
  // column tiles), blocks 1 and 7 (cursor carries; nhd/hnd only: fp8 split needs blocks of 16
  // tokens), 16 and 32, a window start inside a tile, padded pages, every merge mode and
  // feature, with non-unit k_scale / v_scale (folded into the scores and the normalisation).
  // On the CPU these are ordinary fp8 decode cases.
  {
    struct F8Case {
      KVLayout layout;
      int block, head, heads, kv_heads;
      DType dt, kv;
      int feature;
      std::int64_t pad;
      int splits;
    };
    const F8Case fs[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, e4m3, 0, 0, 0},
        {KVLayout::kHND, 16, 128, 32, 8, f16, e5m2, 1, 0, 0},
        {KVLayout::kSplit, 16, 128, 32, 8, b16, e4m3, 2, 0, 3},
        {KVLayout::kNHD, 1, 64, 16, 16, f16, e4m3, 0, 0, 5},
        {KVLayout::kHND, 7, 128, 48, 3, b16, e5m2, 3, 0, 0},
        {KVLayout::kSplit, 32, 64, 8, 1, f16, e5m2, 1, 0, 2},
        {KVLayout::kNHD, 16, 64, 40, 5, b16, e5m2, 2, 16, 0},
        {KVLayout::kSplit, 16, 128, 16, 2, f16, e4m3, 0, 32, 1},
        {KVLayout::kHND, 32, 64, 24, 2, b16, e4m3, 1, 0, 4},
        {KVLayout::kNHD, 7, 128, 12, 4, f16, e4m3, 3, 0, 0},
    };
    int i = 0;
    for (const F8Case& d : fs) {
      ++i;
      if (quick && i != 1 && i != 3) continue;  // the sanitizer subset: nhd and split
      CaseConfig c = base(dev, d.layout, d.block, d.head, d.heads, d.kv_heads, d.dt, d.kv);
      set_lengths(&c, {{3000, 1}, {1, 1}, {64, 1}, {20, 0}, {65, 1}, {700, 1}, {d.block + 1, 1}});
      set_decode_features(&c, d.feature, d.pad, d.splits);
      c.k_scale = 0.125f;
      c.v_scale = 0.0625f;
      c.tag = "dfp8" + std::to_string(i);
      add(c);
    }
  }

  // Head 256 on the decode fast path (GQA <= 8, one CTA per SM, 512-byte rows for 16-bit caches
  // whose swizzle reaches address bit 8): every layout, 16-bit and fp8 caches, GQA 1 to 8,
  // blocks 1, 7, 16 and 32, the merge modes and features. Ordinary decode cases on the CPU.
  if (!quick) {
    struct H256 {
      KVLayout layout;
      int block, heads, kv_heads;
      DType dt, kv;
      int feature, splits;
    };
    const H256 hs[] = {
        {KVLayout::kNHD, 16, 16, 2, b16, b16, 0, 0},
        {KVLayout::kHND, 7, 24, 8, f16, f16, 1, 3},
        {KVLayout::kSplit, 32, 8, 1, b16, b16, 2, 0},
        {KVLayout::kNHD, 1, 6, 2, b16, e4m3, 3, 2},
        {KVLayout::kSplit, 16, 32, 4, f16, e5m2, 1, 0},
    };
    int i = 0;
    for (const H256& d : hs) {
      CaseConfig c = base(dev, d.layout, d.block, 256, d.heads, d.kv_heads, d.dt, d.kv);
      set_lengths(&c, {{3000, 1}, {1, 1}, {64, 1}, {20, 0}, {65, 1}, {700, 1}, {d.block + 1, 1}});
      set_decode_features(&c, d.feature, 0, d.splits);
      if (is_fp8(d.kv)) {
        c.k_scale = 0.25f;
        c.v_scale = 0.125f;
      }
      c.tag = "dh256_" + std::to_string(++i);
      add(c);
    }
  }

  // The decode kernel's heads between 64, 128 and 256 (80, 96, 112, 192: 16-bit caches; rows
  // of 80-112 padded to 128 elements in shared memory, 192 in 384-byte rows) and head 512 (2
  // warps, 32-token tiles): every layout,
  // GQA 1 to 16 (192: to 8), blocks 1, 7, 8, 16 and 32, the merge modes and features. The
  // quick set (the sanitizer subset) keeps three (heads 80, 192 and 512, nhd). Ordinary
  // decode cases on the CPU.
  {
    struct HMid {
      int head;
      KVLayout layout;
      int block, heads, kv_heads;
      DType dt;
      int feature, splits;
    };
    const HMid hs[] = {
        {80, KVLayout::kNHD, 16, 32, 8, b16, 0, 0},    {80, KVLayout::kSplit, 8, 6, 2, f16, 2, 3},
        {96, KVLayout::kHND, 7, 16, 1, b16, 1, 0},     {96, KVLayout::kNHD, 1, 8, 8, f16, 3, 2},
        {112, KVLayout::kSplit, 32, 32, 2, b16, 1, 0}, {112, KVLayout::kNHD, 16, 12, 4, f16, 2, 0},
        {192, KVLayout::kNHD, 32, 16, 2, b16, 3, 0},   {192, KVLayout::kHND, 16, 3, 1, f16, 2, 3},
        {192, KVLayout::kSplit, 16, 8, 8, b16, 1, 0},
        {512, KVLayout::kNHD, 16, 16, 2, b16, 1, 3},   {512, KVLayout::kSplit, 8, 4, 4, f16, 2, 0},
        // Split layout at block size 1, run as nhd rows (decode_mma_split_as_rows).
        {80, KVLayout::kSplit, 1, 8, 2, b16, 3, 0},    {128, KVLayout::kSplit, 1, 32, 8, f16, 0, 0},
    };
    int i = 0;
    for (const HMid& d : hs) {
      ++i;
      if (quick && i != 1 && i != 7 && i != 10) continue;
      CaseConfig c = base(dev, d.layout, d.block, d.head, d.heads, d.kv_heads, d.dt, d.dt);
      set_lengths(&c, {{3000, 1}, {1, 1}, {64, 1}, {20, 0}, {65, 1}, {700, 1}, {d.block + 1, 1}});
      set_decode_features(&c, d.feature, 0, d.splits);
      c.tag = "dhmid_" + std::to_string(i);
      add(c);
    }
  }

  // Masked heads (decode_mma_instance_head): a head without an instance of its own on the next
  // larger maskable one, its dims past the head masked at run time (fp8 80/96/112 on 128,
  // fp8 144-240 on 256; 16-bit 144-176 on 192, 208-240 on 256): every layout, GQA 1 to 16
  // (to 8 above 128), the merge modes and features. The quick set keeps fp8 80 and bf16 160.
  {
    struct HMask {
      int head;
      KVLayout layout;
      int block, heads, kv_heads;
      DType q, kv;
      int feature, splits;
    };
    const HMask hs[] = {
        {80, KVLayout::kNHD, 16, 32, 8, b16, e4m3, 0, 0},
        {96, KVLayout::kSplit, 16, 32, 2, f16, e5m2, 2, 3},
        {112, KVLayout::kHND, 7, 12, 4, b16, e4m3, 1, 0},
        {192, KVLayout::kNHD, 16, 16, 2, b16, e5m2, 3, 2},
        {144, KVLayout::kSplit, 32, 8, 8, f16, e4m3, 1, 0},
        {160, KVLayout::kNHD, 16, 32, 8, b16, b16, 0, 0},
        {176, KVLayout::kSplit, 8, 6, 2, f16, f16, 2, 3},
        {224, KVLayout::kHND, 1, 16, 2, b16, b16, 3, 0},
        {240, KVLayout::kNHD, 16, 3, 1, f16, f16, 1, 2},
    };
    int i = 0;
    for (const HMask& d : hs) {
      ++i;
      if (quick && i != 1 && i != 6) continue;
      CaseConfig c = base(dev, d.layout, d.block, d.head, d.heads, d.kv_heads, d.q, d.kv);
      set_lengths(&c, {{3000, 1}, {1, 1}, {64, 1}, {20, 0}, {65, 1}, {700, 1}, {d.block + 1, 1}});
      set_decode_features(&c, d.feature, 0, d.splits);
      if (is_fp8(d.kv)) {
        c.k_scale = 0.25f;
        c.v_scale = 0.125f;
      }
      c.tag = "dhmask_" + std::to_string(i);
      add(c);
    }
  }

  // A table of decode cases tagged <tag><index from 1>; `quick` keeps the listed indices;
  // `fault` sets a fault class on each.
  auto add_decode_table = [&](const auto& table, const char* tag, std::initializer_list<int> keep,
                              void (*fault)(CaseConfig*) = nullptr) {
    int i = 0;
    for (const DecodeCase& d : table) {
      ++i;
      if (quick && std::find(keep.begin(), keep.end(), i) == keep.end()) continue;
      CaseConfig c = base(dev, d.layout, d.block, d.head, d.heads, d.kv_heads, d.dt, d.dt);
      set_lengths(&c, d.lens);
      c.planned_seq_lens = d.planned;
      set_decode_features(&c, d.feature, d.pad, d.splits);
      if (fault) fault(&c);
      c.tag = tag + std::to_string(i);
      add(c);
    }
  };

  // The tiled kernel with its split merge: split layout, fp32, head 96, 12/4 heads, a long
  // decode row and a short prefill chunk, 3 forced splits (each fault class below runs it).
  auto tiled_three_splits = [&](const char* tag) {
    CaseConfig c = base(dev, KVLayout::kSplit, 16, 96, 12, 4, f32, f32);
    set_lengths(&c, {{400, 1}, {70, 9}});
    c.plan.num_splits = 3;
    c.tag = tag;
    return c;
  };

  // The small-call kernel (src/cuda/decode/decode_small.cu): one-wave cluster calls on nhd/hnd caches
  // whose splits are at most 128 tokens (8 warps, one tile of 16 or 8 tokens each). Cluster
  // sizes 2-8, among them 3, 5, 6 and 7 (uneven output shares per CTA), GQA 1 (MQA per head),
  // 3 and 12 (odd head pairs), 8 and 16 (full columns), head 64 and 128, blocks 1 to 2048 with
  // padded pages, every feature, splits a short sequence lacks, a window whose start leaves
  // whole splits empty, skipped sequences, and sequences longer than the plan (a replayed
  // graph: the last split loops over many tiles). On the CPU these are ordinary decode cases.
  {
    const DecodeCase ss[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 0, 0, {{1024, 1}}, {}},  // W7
        {KVLayout::kHND, 16, 128, 16, 2, f16, 1, 0, 3, {{300, 1}, {1, 1}, {20, 0}, {130, 1}}, {}},
        {KVLayout::kNHD, 1, 64, 8, 8, b16, 2, 0, 5, {{600, 1}, {64, 1}}, {}},
        {KVLayout::kHND, 2048, 128, 64, 4, b16, 3, 64, 7, {{800, 1}, {5, 1}}, {}},
        {KVLayout::kNHD, 544, 64, 40, 5, f16, 1, 8, 2, {{200, 1}, {129, 1}, {20, 0}}, {}},
        {KVLayout::kNHD, 16, 128, 24, 2, b16, 0, 0, 4, {{512, 1}, {17, 1}}, {}},
        {KVLayout::kHND, 32, 64, 24, 8, b16, 1, 0, 6, {{700, 1}}, {}},
        {KVLayout::kNHD, 16, 128, 32, 8, f16, 1, 0, 8, {{500, 1}}, {}},  // 64-token splits
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 1, 0, 0, {{3000, 1}}, {1024}},
        {KVLayout::kHND, 544, 64, 32, 2, f16, 3, 0, 0, {{2500, 1}, {90, 1}}, {700, 90}},
        // Head 64 with 8 splits: 8 output units, one per CTA (one sequence: with more, 8
        // splits make a work-list call).
        {KVLayout::kNHD, 16, 64, 16, 2, f16, 1, 0, 0, {{1024, 1}}, {}},
    };
    // The sanitizer subset: W7, GQA 16 with a 2048-token block, and a replay past the plan.
    add_decode_table(ss, "dsmall", {1, 4, 9});
  }

  // Head 64 with KV heads paired (decode_mma_pairs_heads: nhd, head strides of 64 elements,
  // an even number of KV heads, GQA <= 4): two KV heads per CTA through the head-128 pipeline
  // with a block-diagonal query. Every merge mode of the pipelined kernel (on an H200: the work
  // list, the cluster merge, one split with a direct store, a single sequence's splits through
  // the merge kernel), GQA 1-4, padded pages (strided access, heads still adjacent: the plan
  // pairs where select_kernel could not know it would), blocks 1 to 2048, every feature (a
  // window only with one forced split: windows of 100 tokens make small calls, which stay
  // unpaired), skipped sequences and a mixed batch (a prefill chunk beside the paired decode
  // rows). test_decode_select.cpp checks that each of these plans paired. On the CPU these are
  // ordinary decode cases.
  {
    const std::vector<std::pair<int, int>> dl = {{3000, 1}, {1, 1},   {64, 1}, {20, 0},
                                                 {65, 1},   {700, 1}, {17, 1}};
    const DecodeCase ps[] = {
        {KVLayout::kNHD, 16, 64, 32, 8, b16, 0, 0, 0, dl, {}},                        // work list
        {KVLayout::kNHD, 1, 64, 16, 8, f16, 1, 0, 3, {{900, 1}, {300, 1}, {1, 1}}, {}},  // cluster
        {KVLayout::kNHD, 2048, 64, 12, 4, b16, 1, 64, 0, {{5000, 1}, {3, 1}, {2100, 1}}, {}},
        {KVLayout::kNHD, 16, 64, 8, 8, b16, 2, 0, 1, dl, {}},  // one split: direct store
        {KVLayout::kNHD, 32, 64, 32, 8, f16, 1, 0, 12, {{3000, 1}, {130, 1}, {20, 0}, {1500, 1}}, {}},
        {KVLayout::kNHD, 16, 64, 24, 8, b16, 1, 0, 0, {{3000, 1}}, {}},  // the merge kernel
        {KVLayout::kNHD, 16, 64, 8, 2, b16, 1, 8, 0, {{3000, 1}, {40, 7}, {700, 1}}, {}},  // mixed
    };
    add_decode_table(ps, "dpair", {1, 2, 6});
  }

  // An upstream NaN in the query (CaseConfig::nan_query) through every kernel: on an H200 the
  // small-call kernel (W7's shape), the pipelined kernel with one split (direct store), with a
  // cluster merge and with the merge kernel (one long sequence, many forced splits), head-64
  // pairs, the prefill kernel (query chunks, no sink: a sink starts the running maximum at a
  // number), the tiled kernel with its split merge (head 96, fp32 queries), and sinks, which
  // join the denominator that NaN must still reach. The rows' scores are all NaN, so a kernel
  // that skips a row whose running maximum is still -inf writes 0 and -inf there instead of
  // NaN. On the CPU these are ordinary cases too.
  {
    const DecodeCase ns[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 0, 0, {{1024, 1}}, {}},
        {KVLayout::kNHD, 16, 128, 32, 8, f16, 1, 0, 1, {{3000, 1}, {1, 1}, {20, 0}, {700, 1}}, {}},
        {KVLayout::kHND, 16, 128, 16, 4, b16, 3, 0, 4, {{900, 1}}, {}},
        {KVLayout::kNHD, 16, 128, 16, 4, b16, 1, 0, 70, {{9000, 1}}, {}},
        {KVLayout::kNHD, 16, 64, 32, 8, b16, 0, 0, 0, {{3000, 1}, {64, 1}, {17, 1}}, {}},
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 2, 0, 0, {{300, 40}, {50, 50}, {33, 1}}, {}},
    };
    add_decode_table(ns, "nan", {1, 3, 5}, [](CaseConfig* c) { c->nan_query = true; });
    CaseConfig c = tiled_three_splits("nan7");
    c.sinks = true;
    c.nan_query = true;
    add(c);
  }
  // No finite logit (CaseConfig::neg_inf_keys): the rows of KV head 0 have only -inf logits.
  // The same kernels and merges; every path must give NaN (0/0) where it used to give 0 and
  // -inf on some paths and NaN on others, and the sink's own softmax with a sink.
  {
    const DecodeCase ns[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 0, 0, {{1024, 1}}, {}},             // small-call
        {KVLayout::kNHD, 16, 128, 32, 8, f16, 0, 0, 1, {{3000, 1}, {1, 1}, {700, 1}}, {}},
        {KVLayout::kHND, 16, 128, 16, 4, b16, 3, 0, 4, {{900, 1}}, {}},              // cluster, sinks
        {KVLayout::kNHD, 16, 128, 16, 4, b16, 0, 0, 70, {{9000, 1}}, {}},            // merge kernel
        {KVLayout::kNHD, 16, 64, 32, 8, b16, 0, 0, 0, {{3000, 1}, {64, 1}, {17, 1}}, {}},  // pairs
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 2, 0, 0, {{300, 40}, {50, 50}, {33, 1}}, {}},  // prefill
    };
    // The sanitizer subset: the small-call kernel and (below) the tiled kernel.
    add_decode_table(ns, "ninf", {1}, [](CaseConfig* c) { c->neg_inf_keys = true; });
    CaseConfig c = tiled_three_splits("ninf7");
    c.neg_inf_keys = true;
    add(c);
  }

  // A sink of -inf (CaseConfig::neg_inf_sinks: the even query heads have none) through every
  // kernel with a window: a -inf sink must weigh nothing. The tiled kernel puts the sink in
  // split 0 only; with a window, split 0 of a long decode row can hold none of its keys
  // (ninfsink7: 3 forced splits of 192 keys, the row sees [336, 400)), and a running sum started
  // at 1 for the -inf sink then gives that empty split the weight of a logit 0 in the merge.
  // The prefill kernel starts the running sum at 1 too and keeps it while the row's maximum
  // stays -inf: with only -inf logits (neg_inf_keys) it wrote output 0 and LSE 0 where the
  // oracle has 0/0 = NaN (ninfsink6). The decode kernels: small-call, one split, cluster merge,
  // merge kernel, head-64 rows. On the CPU these are ordinary sink cases.
  {
    const DecodeCase ns[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 3, 0, 0, {{1024, 1}}, {}},             // small-call
        {KVLayout::kNHD, 16, 128, 32, 8, f16, 3, 0, 1, {{3000, 1}, {1, 1}, {700, 1}}, {}},
        {KVLayout::kHND, 16, 128, 16, 4, b16, 3, 0, 4, {{900, 1}}, {}},              // cluster
        {KVLayout::kNHD, 16, 128, 16, 4, b16, 3, 0, 70, {{9000, 1}}, {}},            // merge kernel
        {KVLayout::kNHD, 16, 64, 32, 8, b16, 3, 0, 0, {{3000, 1}, {64, 1}, {17, 1}}, {}},
    };
    // The sanitizer subset: the tiled kernel's empty split 0 (ninfsink7 below) only.
    add_decode_table(ns, "ninfsink", {}, [](CaseConfig* c) { c->neg_inf_sinks = true; });
    CaseConfig pf = base(dev, KVLayout::kNHD, 16, 128, 32, 8, b16, b16);
    set_lengths(&pf, {{300, 40}, {50, 50}, {33, 1}});
    set_decode_features(&pf, 3, 0, 0);
    pf.neg_inf_sinks = true;
    pf.neg_inf_keys = true;
    pf.tag = "ninfsink6";
    if (!quick) add(pf);
    CaseConfig c = tiled_three_splits("ninfsink7");
    c.sliding_window = 64;
    c.sinks = true;
    c.neg_inf_sinks = true;
    add(c);
    c.neg_inf_keys = true;
    c.tag = "ninfsink8";
    if (!quick) add(c);
  }

  // The largest window (INT32_MAX, which covers every sequence: no window in effect) on the
  // decode fast path (its split cut added a tile to the window in int and wrapped negative:
  // a negative split size), a mixed batch (decode rows beside the prefill kernel) and the
  // tiled kernel with forced splits.
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 128, 32, 8, b16, b16);
    set_lengths(&c, {{3000, 1}, {1, 1}, {700, 1}});
    c.sliding_window = std::numeric_limits<std::int32_t>::max();
    c.sinks = true;
    c.tag = "winmax1";
    add(c);
    set_lengths(&c, {{300, 40}, {50, 50}, {33, 1}});
    c.tag = "winmax2";
    add(c);
    c = tiled_three_splits("winmax3");
    c.sliding_window = std::numeric_limits<std::int32_t>::max();
    add(c);
  }

  // Kernel boundaries the CPU cannot show (a review of the CUDA kernels; tags edge<kernel><i>,
  // so `--cases '*_edge*'` runs them all). On the CPU they are ordinary cases; on an H200 each
  // reaches the kernel named below (the host rules decode_mma_config, prefill_mma_supported
  // and tiled_choose route them there).
  //  - edgepf: the tensor-core prefill kernel (prefill_mma.cu). GQA ratios that do not divide
  //    its 64 rows (5, 3, 6, 7, 48: a row tile then starts inside a token's head group, rem > 0,
  //    and a warp's 16 rows span several tokens), a group wider than a whole row tile (80 heads
  //    of one KV head: a token's rows cross two CTAs), a tile with a single valid row (13 x 5 =
  //    65 rows), windows whose start falls inside a block, a 64-token tile and, for the split
  //    layout, an 8-token value chunk (ld_lo < kv_lo), blocks of 8 (one value chunk per block)
  //    and 24 (a multiple of 8 that does not divide 64), a chunk crossing a 2048-token block.
  //    Decode rows of GQA > 16 run on the prefill kernel too (min_query_len 1).
  //  - edgedec: the decode fast path (decode_mma.cu, decode_small.cu). The pipelined kernel
  //    unpaired with block 1 (cursor step 64 blocks), blocks 48 and 24 (a tile advances whole
  //    blocks plus a remainder: the cursor's carry), block 8 in the split layout, windows whose
  //    start lands on, just before and just after a 64-token tile edge, window 1; cluster
  //    merges of 2, 4 and 7 splits (7 splits of head 64, GQA 1: the last CTA combines no
  //    output element, only LSEs); the small-call kernel with 5 and 7 splits (uneven units per
  //    CTA) and GQA 5 and 10 (a partly padded head quad).
  //  - edgetl: the tiled kernel (attention_kernel.cuh). fp8 with head 8 (8-byte copies, a key
  //    row shorter than one 16-byte QK chunk: zeroed tail) and head 40 with odd padding
  //    (element-wise fp8 copies); heads 136 and 200 (not multiples of 16; 3 and 4 dim pairs
  //    per lane) with a 7-token block, a 5-token tile (tile_rows 8) and forced splits; a 33-token
  //    tile on the split layout; GQA 48 with head 256 (two head groups of 32 rows, the second
  //    half empty).
  if (!quick) {
    struct Edge {
      const char* tag;
      KVLayout layout;
      int block, head, heads, kv_heads;
      DType dt, kv;
      int window;
      int feature;  // 0 none, 1 softcap + ALiBi + sinks, 2 ALiBi + sinks, 3 softcap
      std::int64_t pad;
      int splits, tile;
      std::vector<std::pair<int, int>> lens;
    };
    const KVLayout nhd = KVLayout::kNHD, hnd = KVLayout::kHND, spl = KVLayout::kSplit;
    const std::vector<std::pair<int, int>> win64 = {{64, 1}, {65, 1}, {128, 1}, {129, 1},
                                                    {127, 1}, {1000, 1}, {1025, 1}, {20, 0}};
    const Edge es[] = {
        // ---- prefill kernel
        {"edgepf1", nhd, 16, 128, 20, 4, b16, b16, 0, 2, 0, 0, 0,
         {{300, 40}, {77, 13}, {64, 1}, {20, 0}, {130, 64}}},
        {"edgepf2", hnd, 16, 128, 20, 4, f16, f16, 43, 3, 0, 0, 0,
         {{300, 40}, {77, 13}, {64, 1}, {130, 64}}},
        {"edgepf3", spl, 16, 128, 48, 1, f16, f16, 37, 2, 0, 0, 0, {{200, 21}, {45, 45}, {9, 1}}},
        {"edgepf4", nhd, 16, 64, 80, 1, b16, b16, 0, 2, 0, 0, 0,
         {{100, 7}, {65, 1}, {1, 1}, {40, 0}, {33, 3}}},
        {"edgepf5", hnd, 32, 64, 24, 8, f16, f16, 0, 3, 0, 0, 0, {{150, 70}, {5, 5}, {64, 1}}},
        {"edgepf6", spl, 24, 64, 12, 2, b16, b16, 45, 0, 0, 0, 0, {{500, 100}, {90, 11}, {49, 1}}},
        {"edgepf7", spl, 8, 128, 16, 2, b16, b16, 20, 1, 0, 0, 0, {{130, 30}, {17, 17}, {8, 1}}},
        {"edgepf8", nhd, 2048, 64, 7, 1, f16, f16, 1000, 0, 64, 0, 0, {{2100, 40}, {2050, 1}}},
        // ---- decode fast path
        {"edgedec1", hnd, 1, 128, 32, 4, b16, b16, 0, 0, 0, 0, 0,
         {{700, 1}, {1, 1}, {65, 1}, {20, 0}, {130, 1}}},
        {"edgedec2", nhd, 48, 128, 24, 2, f16, f16, 0, 1, 0, 0, 0,
         {{1000, 1}, {48, 1}, {49, 1}, {47, 1}, {20, 0}}},
        {"edgedec3", spl, 24, 128, 16, 4, b16, b16, 64, 0, 0, 0, 0, win64},
        {"edgedec4", spl, 8, 64, 8, 2, f16, f16, 0, 2, 0, 3, 0, {{300, 1}, {8, 1}, {9, 1}, {7, 1}}},
        {"edgedec5", nhd, 16, 128, 32, 8, b16, b16, 64, 2, 0, 2, 0, win64},
        {"edgedec6", nhd, 16, 64, 30, 3, f16, f16, 0, 0, 0, 7, 0, {{800, 1}}},
        {"edgedec7", nhd, 16, 128, 20, 4, b16, b16, 0, 1, 0, 5, 0, {{600, 1}, {90, 1}}},
        {"edgedec8", hnd, 16, 64, 8, 8, f16, f16, 0, 0, 0, 7, 0, {{3000, 1}, {1, 1}}},
        {"edgedec9", nhd, 16, 128, 32, 8, f16, f16, 0, 2, 0, 2, 0, {{2000, 1}, {1500, 1}}},
        {"edgedec10", spl, 16, 128, 32, 2, b16, b16, 0, 1, 0, 4, 0, {{1100, 1}, {3, 1}}},
        {"edgedec11", nhd, 16, 128, 32, 8, b16, b16, 1, 2, 0, 0, 0,
         {{1, 1}, {64, 1}, {65, 1}, {1000, 1}, {20, 0}}},
        // ---- tiled kernel
        {"edgetl1", nhd, 16, 8, 8, 2, f16, e4m3, 0, 0, 0, 0, 0, {{40, 1}, {33, 5}, {1, 1}}},
        {"edgetl2", hnd, 16, 40, 10, 2, b16, e5m2, 20, 2, 3, 0, 0, {{70, 1}, {50, 9}}},
        {"edgetl3", nhd, 7, 136, 10, 2, f32, f32, 0, 1, 0, 3, 0, {{200, 1}, {70, 9}, {7, 1}}},
        {"edgetl4", hnd, 7, 200, 8, 2, f16, f16, 0, 3, 0, 0, 5, {{60, 1}, {33, 6}, {5, 1}}},
        {"edgetl5", spl, 16, 72, 8, 2, f32, f32, 30, 0, 0, 0, 33, {{100, 1}, {70, 12}}},
        {"edgetl6", nhd, 16, 256, 48, 1, b16, b16, 0, 2, 0, 0, 0, {{90, 1}, {40, 3}, {1, 1}}},
    };
    for (const Edge& e : es) {
      CaseConfig c = base(dev, e.layout, e.block, e.head, e.heads, e.kv_heads, e.dt, e.kv);
      set_lengths(&c, e.lens);
      c.sliding_window = e.window;
      c.softcap = e.feature == 1 || e.feature == 3 ? 30.0f : 0.0f;
      c.alibi = e.feature == 1 || e.feature == 2;
      c.sinks = e.feature == 1 || e.feature == 2;
      c.page_pad = e.pad;
      c.plan.num_splits = e.splits;
      c.plan.tile_tokens = e.tile;
      if (is_fp8(e.kv)) {
        c.k_scale = 0.5f;
        c.v_scale = 0.25f;
      }
      c.tag = e.tag;
      add(c);
    }
  }

  // Heavy cases for the GPU only (DESIGN.md §4: run without the sanitizer).
  if (dev.type == DeviceType::kCUDA && !quick) {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 128, 32, 8, b16, b16);
    set_lengths(&c, {{131072, 1}, {4097, 1}});
    c.tag = "len131072";
    add(c);
    // Block ids times the block stride past 2^31 elements: 16 * 8 * 128 = 16384 elements per
    // block, so ids above 131072 address beyond int32.
    CaseConfig big = base(dev, KVLayout::kNHD, 16, 128, 8, 8, f16, f16);
    set_lengths(&big, {{1000, 1}, {600, 8}, {17, 1}});
    big.extra_blocks = 140000;
    big.tag = "idx2e31";
    add(big);
  }
}

}  // namespace pagedattn::testing::detail
