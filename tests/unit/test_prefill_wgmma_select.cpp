// Selection of the Hopper wgmma prefill kernel (src/cuda/prefill/prefill_wgmma.h): its support
// rules and sizing are host code compiled in every build, and select_kernel is checked on
// synthetic devices (an H200, an sm_80 device, smaller shared-memory limits). No GPU needed.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/cuda/backend/side_stream.h"
#include "src/cuda/prefill/prefill_wgmma.h"
#include "tests/unit/synthetic_device.h"

namespace pagedattn::cuda {
namespace {

constexpr std::int64_t kH200Smem = testing::kH200SharedMemoryPerBlock;
using testing::synthetic_cuda_device;

/// Four 2048-token chunks ending an 8192 context, 32/8 heads, head 128, bf16, block 16.
ProblemDesc chunk_problem() {
  ProblemDesc p;
  p.device = Device::cuda(0);
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_size = 128;
  p.q_dtype = p.cache_dtype = DType::kBFloat16;
  p.layout = KVLayout::kNHD;
  p.block_size = 16;
  p.num_blocks = 100000;
  p.access = CacheAccess::kNative;
  p.batch.num_seqs = 4;
  p.batch.num_prefill_seqs = 4;
  p.batch.num_tokens = 4 * 2048;
  p.batch.max_query_len = 2048;
  p.batch.max_seq_len = 8192;
  p.batch.total_kv_tokens = 4 * 8192;
  return p;
}

TEST(PrefillWgmmaSelect, SupportedProblems) {
  const DeviceInfo h200 = synthetic_cuda_device();
  for (int head : {64, 128, 256})
    for (DType dt : {DType::kFloat16, DType::kBFloat16})
      for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND})
        for (int kv_heads : {32, 16, 8, 4, 2, 1})
          for (int bs : {1, 16, 17, 128, 2048}) {
            ProblemDesc p = chunk_problem();
            p.head_size = head;
            p.q_dtype = p.cache_dtype = dt;
            p.layout = layout;
            p.num_kv_heads = kv_heads;
            p.block_size = bs;
            p.sliding_window = bs == 17 ? 100 : 0;
            p.lse = bs == 16;
            p.softcap = bs == 128 ? 30.f : 0.f;
            p.alibi = bs == 1;
            p.sinks = bs == 2048;
            std::string why;
            EXPECT_TRUE(prefill_wgmma_supported(p, h200, &why))
                << "head " << head << " " << to_string(dt) << " " << to_string(layout)
                << " gqa " << p.gqa_ratio() << " bs " << bs << ": " << why;
          }
}

TEST(PrefillWgmmaSelect, RejectsWithReason) {
  struct Case {
    const char* what;
    const char* fragment;
  };
  auto check = [](ProblemDesc p, const DeviceInfo& d, const char* fragment) {
    std::string why;
    EXPECT_FALSE(prefill_wgmma_supported(p, d, &why)) << fragment;
    EXPECT_NE(why.find(fragment), std::string::npos) << why;
  };
  const DeviceInfo h200 = synthetic_cuda_device();
  ProblemDesc p = chunk_problem();
  check(p, synthetic_cuda_device(kH200Smem, 132, 8), "compute capability 8.0");
  {
    DeviceInfo blackwell = synthetic_cuda_device(kH200Smem, 148, 10);
    check(p, blackwell, "compute capability 10.0");
  }
  check(p, synthetic_cuda_device(100 * 1024), "shared memory limit");
  p = chunk_problem(); p.device = Device::cpu(); check(p, h200, "not a CUDA device");
  p = chunk_problem(); p.batch.num_prefill_seqs = 0; check(p, h200, "no prefill chunks");
  p = chunk_problem(); p.q_dtype = p.cache_dtype = DType::kFloat32; check(p, h200, "fp16/bf16");
  p = chunk_problem(); p.cache_dtype = DType::kFloat16; check(p, h200, "cache dtype differs");
  // fp8 caches: the warp-specialised kernel converts them; the first version does not.
  for (DType kv : {DType::kFloat8E4M3, DType::kFloat8E5M2})
    for (DType q : {DType::kFloat16, DType::kBFloat16}) {
      p = chunk_problem();
      p.q_dtype = q;
      p.cache_dtype = kv;
      std::string why;
      EXPECT_TRUE(prefill_wgmma_supported(p, h200, &why)) << why;
      EXPECT_FALSE(prefill_wgmma_supported(p, h200, &why, /*warp_specialized=*/false));
      EXPECT_NE(why.find("the first version has none"), std::string::npos) << why;
      p.head_size = 96;  // masked, too
      EXPECT_TRUE(prefill_wgmma_supported(p, h200, &why)) << why;
    }
  // Warp-specialised: every multiple of 8 up to 256 (masked heads); the first version: 64, 128
  // and 256 only.
  for (int head : {4, 12, 100, 252, 264, 512}) {
    p = chunk_problem();
    p.head_size = head;
    check(p, h200, "not a multiple of 8 up to 256");
  }
  for (int head : {8, 80, 96, 192, 248}) {
    p = chunk_problem();
    p.head_size = head;
    std::string why;
    EXPECT_TRUE(prefill_wgmma_supported(p, h200, &why)) << head << ": " << why;
    EXPECT_FALSE(prefill_wgmma_supported(p, h200, &why, /*warp_specialized=*/false)) << head;
    EXPECT_NE(why.find("the first version has no masked heads"), std::string::npos) << why;
  }
  // The split layout: on the warp-specialised kernel for block sizes that are multiples of 8.
  p = chunk_problem(); p.layout = KVLayout::kSplit; p.block_size = 12;
  check(p, h200, "split layout with block_size 12");
  for (int bs : {8, 16, 32, 128, 544}) {
    p = chunk_problem();
    p.layout = KVLayout::kSplit;
    p.block_size = bs;
    std::string why;
    EXPECT_TRUE(prefill_wgmma_supported(p, h200, &why)) << bs << ": " << why;
    EXPECT_FALSE(prefill_wgmma_supported(p, h200, &why, /*warp_specialized=*/false)) << bs;
    EXPECT_NE(why.find("the first version has none"), std::string::npos) << why;
  }
  // fp8 caches in the split layout: no instance (the tiled kernel).
  for (DType kv : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    p = chunk_problem();
    p.layout = KVLayout::kSplit;
    p.cache_dtype = kv;
    check(p, h200, "fp8 cache in the split layout");
  }
  p = chunk_problem(); p.num_kv_heads = 70000; p.num_heads = 70000; check(p, h200, "65535");
}

TEST(PrefillWgmmaSelect, MaskedHeadsRunOnTheNextLargerInstance) {
  EXPECT_EQ(prefill_ws_instance_head(64), 64);
  EXPECT_EQ(prefill_ws_instance_head(128), 128);
  EXPECT_EQ(prefill_ws_instance_head(256), 256);
  for (int head = -8; head <= 520; ++head) {
    const int inst = prefill_ws_instance_head(head);
    if (head <= 0 || head % 8 != 0 || head > 256) {
      EXPECT_EQ(inst, 0) << head;
      continue;
    }
    // The smallest instance that holds the head (the GEMMs' extra dims are zeros).
    EXPECT_GE(inst, head);
    EXPECT_TRUE(inst == 64 || inst == 128 || inst == 256) << head;
    EXPECT_TRUE(inst == 64 || head > inst / 2) << head << " -> " << inst;
  }
}

TEST(PrefillWgmmaSelect, SharedMemoryFitsOneCtaPerSm) {
  for (int head : {64, 128, 256}) {
    EXPECT_LE(prefill_wgmma_smem_bytes(head), kH200Smem) << head;
    // Query tile + stages of K and V + ids + alignment slack.
    const int tok = prefill_wgmma_tile_tokens(head);
    const std::int64_t tile = std::int64_t{tok} * head * 2;
    EXPECT_EQ(prefill_wgmma_smem_bytes(head),
              1024 + kWgmmaRowsPerCta * head * 2 + prefill_wgmma_stages(head) * (2 * tile + tok * 8));
  }
  EXPECT_EQ(prefill_wgmma_stages(64), 3);
  EXPECT_EQ(prefill_wgmma_stages(128), 2);
  EXPECT_EQ(prefill_wgmma_stages(256), 2);
  EXPECT_EQ(prefill_wgmma_tile_tokens(128), 128);
  EXPECT_EQ(prefill_wgmma_tile_tokens(256), 64);
  // The warp-specialised version: rings that fit one CTA per SM in 227 KB (232448 bytes).
  for (int head : {64, 128, 256}) {
    const std::int64_t tile = std::int64_t{prefill_ws_tile_tokens(head)} * head * 2;
    EXPECT_EQ(prefill_ws_smem_bytes(head),
              1024 + kWgmmaRowsPerCta * head * 2 + prefill_ws_stages(head) * 2 * tile + 256);
    EXPECT_LE(prefill_ws_smem_bytes(head), 232448) << head;
  }
}

TEST(PrefillWgmmaSelect, TmaBoxIsOnePageSegmentOfATile) {
  // Pages that divide the 128-token tile of head 64/128: one box per page.
  for (int bs : {8, 16, 32, 64, 128}) {
    EXPECT_EQ(prefill_ws_tma_box(64, bs), bs) << bs;
    EXPECT_EQ(prefill_ws_tma_box(128, bs), bs) << bs;
  }
  // Pages of whole tiles: a box is the tile.
  EXPECT_EQ(prefill_ws_tma_box(128, 256), 128);
  EXPECT_EQ(prefill_ws_tma_box(128, 2048), 128);
  EXPECT_EQ(prefill_ws_tma_box(256, 128), 64);  // head 256: 64-token tiles
  EXPECT_EQ(prefill_ws_tma_box(256, 64), 64);
  EXPECT_EQ(prefill_ws_tma_box(256, 32), 32);
  // No box: not a multiple of 8 tokens, or a page that straddles tiles.
  for (int bs : {0, -16, 1, 2, 4, 12, 20, 100}) EXPECT_EQ(prefill_ws_tma_box(128, bs), 0) << bs;
  EXPECT_EQ(prefill_ws_tma_box(128, 24), 0);   // 128 % 24 != 0
  EXPECT_EQ(prefill_ws_tma_box(128, 192), 0);  // 192 % 128 != 0
  EXPECT_EQ(prefill_ws_tma_box(256, 96), 0);
  // Every box tiles its tile and starts at a multiple of 8 rows.
  for (int head : {64, 128, 256})
    for (int bs = 1; bs <= 4096; ++bs) {
      const int box = prefill_ws_tma_box(head, bs);
      if (box == 0) continue;
      EXPECT_EQ(box % 8, 0);
      EXPECT_EQ(prefill_ws_tile_tokens(head) % box, 0);
      EXPECT_TRUE(bs % box == 0) << head << " " << bs;
    }
}

TEST(PrefillWgmmaSelect, RowTiles) {
  const std::int32_t qsl[] = {0, 1, 1, 65, 82, 182};  // query lengths 1, 0, 64, 17, 100
  EXPECT_EQ(prefill_wgmma_row_tiles(qsl, 1, 5, 4, 1), 1 + 0 + 2 + 1 + 4);
  EXPECT_EQ(prefill_wgmma_row_tiles(qsl, 1, 5, 4, 2), 0 + 0 + 2 + 1 + 4);
  EXPECT_EQ(prefill_wgmma_row_tiles(qsl, 1, 5, 1, 2), 0 + 0 + 1 + 1 + 1);
  EXPECT_EQ(prefill_wgmma_row_tiles(qsl, 1, 5, 16, 2), 0 + 0 + 8 + 3 + 13);
}

TEST(PrefillWgmmaSelect, SelectKernelRoutesPrefillRows) {
  const DeviceInfo info = synthetic_cuda_device();
  auto c = select_kernel(chunk_problem(), info);
  if (!built_with_cuda()) {
    ASSERT_EQ(c.status().code(), StatusCode::kDeviceUnavailable);
    return;
  }
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->kernel, KernelId::kCudaTiled);  // the fallback for unaligned tensors
  EXPECT_TRUE(c->prefill_rows_mma) << c->reason;
  EXPECT_TRUE(c->prefill_rows_wgmma) << c->reason;
  EXPECT_NE(c->reason.find("cuda_prefill_wgmma"), std::string::npos) << c->reason;
  EXPECT_TRUE(c->prefill_rows_wgmma_ws) << c->reason;  // the warp-specialised version
  EXPECT_NE(c->reason.find("warp-specialised"), std::string::npos) << c->reason;
  // explain names the producer's loader: TMA boxes of a 16-token page, cp.async for pages
  // that are no box.
  EXPECT_NE(c->reason.find("TMA boxes of 16 tokens"), std::string::npos) << c->reason;
  // explain says which heads take turns at the tensor cores (head 128 only).
  EXPECT_NE(c->reason.find("taking turns at the tensor cores"), std::string::npos) << c->reason;
  for (int head : {64, 256}) {
    ProblemDesc q = chunk_problem();
    q.head_size = head;
    auto cq = select_kernel(q, info);
    ASSERT_TRUE(cq.ok());
    ASSERT_TRUE(cq->prefill_rows_wgmma_ws) << cq->reason;
    EXPECT_NE(cq->reason.find("no turn-taking for head " + std::to_string(head)),
              std::string::npos)
        << cq->reason;
  }
  // Masked heads: explain names the instance and the masking; exact heads say nothing of it.
  EXPECT_EQ(c->reason.find("masked on it"), std::string::npos) << c->reason;
  for (auto [head, inst] : {std::pair{80, 128}, {96, 128}, {112, 128}, {40, 64}, {192, 256}}) {
    ProblemDesc q = chunk_problem();
    q.head_size = head;
    auto cq = select_kernel(q, info);
    ASSERT_TRUE(cq.ok());
    EXPECT_TRUE(cq->prefill_rows_wgmma_ws) << cq->reason;
    EXPECT_NE(cq->reason.find("the head-" + std::to_string(inst) + " instance with head " +
                              std::to_string(head) + " masked on it"),
              std::string::npos)
        << cq->reason;
    // The first version has no masked heads: prefill_mma (heads 64/128) or the tiled kernel.
    PlanOptions v1;
    v1.wgmma_prefill_v1 = true;
    auto c1 = select_kernel(q, info, v1);
    ASSERT_TRUE(c1.ok());
    EXPECT_FALSE(c1->prefill_rows_wgmma) << c1->reason;
  }
  for (int bs : {12, 24}) {
    ProblemDesc q = chunk_problem();
    q.block_size = bs;
    auto cq = select_kernel(q, info);
    ASSERT_TRUE(cq.ok());
    ASSERT_TRUE(cq->prefill_rows_wgmma_ws) << cq->reason;
    EXPECT_EQ(cq->reason.find("TMA boxes of"), std::string::npos) << cq->reason;
    EXPECT_NE(cq->reason.find("no TMA boxes, as block_size " + std::to_string(bs)),
              std::string::npos)
        << cq->reason;
  }
  {
    PlanOptions v1;
    v1.wgmma_prefill_v1 = true;
    auto c1 = select_kernel(chunk_problem(), info, v1);
    ASSERT_TRUE(c1.ok());
    EXPECT_TRUE(c1->prefill_rows_wgmma) << c1->reason;
    EXPECT_FALSE(c1->prefill_rows_wgmma_ws) << c1->reason;
    EXPECT_NE(c1->reason.find("first version"), std::string::npos) << c1->reason;
  }

  // Mixed batch: decode rows on the decode fast path, chunks on the wgmma kernel.
  ProblemDesc p = chunk_problem();
  p.batch.num_seqs = 100;
  p.batch.num_decode_seqs = 96;
  p.batch.num_tokens += 96;
  c = select_kernel(p, info);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->prefill_rows_wgmma) << c->reason;
  EXPECT_TRUE(c->decode_rows_fast_path) << c->reason;

  // The option keeps prefill_mma, and explain says so.
  PlanOptions o;
  o.no_wgmma_prefill = true;
  c = select_kernel(chunk_problem(), info, o);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->prefill_rows_mma) << c->reason;
  EXPECT_FALSE(c->prefill_rows_wgmma) << c->reason;
  EXPECT_NE(c->reason.find("wgmma prefill kernel not used: no_wgmma_prefill"), std::string::npos)
      << c->reason;

  // Another compute capability, or a feature it lacks: prefill_mma, with the reason.
  c = select_kernel(chunk_problem(), synthetic_cuda_device(kH200Smem, 132, 8));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->prefill_rows_mma) << c->reason;
  EXPECT_FALSE(c->prefill_rows_wgmma) << c->reason;
  EXPECT_NE(c->reason.find("compute capability 8.0"), std::string::npos) << c->reason;
  p = chunk_problem();
  p.layout = KVLayout::kSplit;
  c = select_kernel(p, info);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->prefill_rows_wgmma_ws) << c->reason;
  EXPECT_NE(c->reason.find("the value tile kept transposed (V^T"), std::string::npos)
      << c->reason;
  p.block_size = 5;  // not a multiple of 8: neither tensor-core kernel (the tiled one)
  c = select_kernel(p, info);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->prefill_rows_mma) << c->reason;
  EXPECT_NE(c->reason.find("wgmma prefill kernel: split layout with block_size 5"),
            std::string::npos)
      << c->reason;

  // Head 256: prefill_mma does not take it, the wgmma kernel does.
  p = chunk_problem();
  p.head_size = 256;
  c = select_kernel(p, info);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->prefill_rows_wgmma) << c->reason;
  c = select_kernel(p, info, o);  // no_wgmma_prefill: the tiled kernel
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->prefill_rows_mma) << c->reason;

  // Forced tiles keep the tiled kernel for the prefill rows: neither tensor-core kernel.
  o = {};
  o.tile_tokens = 16;
  c = select_kernel(chunk_problem(), info, o);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->prefill_rows_mma);
  EXPECT_FALSE(c->prefill_rows_wgmma);
}

// A mixed batch (decode rows on the decode fast path, chunks on a tensor-core prefill kernel)
// says whether the two kernels run one after the other or concurrently on two streams,
// and which goes to the second stream (PAGEDATTN_MIXED_CONCURRENT, forced here); a batch
// without decode rows says none of it.
TEST(PrefillWgmmaSelect, MixedBatchSaysWhetherTheKernelsRunConcurrently) {
  const DeviceInfo info = synthetic_cuda_device();
  ProblemDesc p = chunk_problem();
  p.batch.num_seqs = 6;
  p.batch.num_decode_seqs = 4;
  p.batch.num_prefill_seqs = 2;
  p.batch.num_tokens = 2 * 512 + 4;
  p.batch.max_query_len = 512;
  struct Restore {
    ~Restore() { set_mixed_concurrent_for_testing(-1); }
  } restore;
  for (int mode : {0, 1, 2}) {
    set_mixed_concurrent_for_testing(mode);
    EXPECT_EQ(mixed_concurrent_mode(), mode);
    auto c = select_kernel(p, info);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_TRUE(c->decode_rows_fast_path && c->prefill_rows_wgmma) << c->reason;
    const bool prefill_forked =
        c->reason.find("concurrently with the prefill kernel where the call allows (its rows on "
                       "a second stream") !=
        std::string::npos;
    const bool decode_forked =
        c->reason.find("concurrently with the prefill kernel where the call allows (the decode "
                       "rows on a second stream") != std::string::npos;
    const bool serial =
        c->reason.find("before the prefill kernel on the call's stream") != std::string::npos;
    EXPECT_EQ(serial, mode == 0) << c->reason;
    EXPECT_EQ(prefill_forked, mode == 1) << c->reason;
    EXPECT_EQ(decode_forked, mode == 2) << c->reason;
  }
  set_mixed_concurrent_for_testing(7);  // out of range: back to the environment's choice
  const char* env = std::getenv("PAGEDATTN_MIXED_CONCURRENT");
  const std::string v = env != nullptr ? env : "";
  EXPECT_EQ(mixed_concurrent_mode(), v == "0" ? 0 : v == "1" ? 1 : 2);
  set_mixed_concurrent_for_testing(1);
  auto c = select_kernel(chunk_problem(), info);  // chunks only
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->reason.find("concurrently"), std::string::npos) << c->reason;
}

}  // namespace
}  // namespace pagedattn::cuda
