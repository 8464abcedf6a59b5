// `pagedattn explain --assume-device`: the presets (tools/device_presets.h) are the devices the
// selection tests assume, and select_kernel answers for them in every build, a CPU-only one
// included (src/cuda/backend/choose_config.cpp is host code): the W1 decode (32/8 heads, head
// 128, bf16, block 16, 64 x 4096) takes the decode fast path on an assumed H200.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "tests/unit/synthetic_device.h"
#include "tools/device_presets.h"

namespace pagedattn {
namespace {

ProblemDesc w1_problem(DType cache_dtype, int head_size) {
  ProblemDesc p;
  p.device = Device::cuda(0);
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_size = head_size;
  p.q_dtype = DType::kBFloat16;
  p.cache_dtype = cache_dtype;
  p.layout = KVLayout::kNHD;
  p.block_size = 16;
  p.num_blocks = 64 * 256;
  p.access = CacheAccess::kNative;
  p.batch.num_seqs = p.batch.num_decode_seqs = 64;
  p.batch.num_tokens = 64;
  p.batch.max_query_len = 1;
  p.batch.max_seq_len = 4096;
  p.batch.total_kv_tokens = 64 * 4096;
  return p;
}

TEST(AssumeDevice, PresetsMatchTheSyntheticDeviceOfTheSelectionTests) {
  for (const char* name : {"h200", "h100"}) {
    auto info = cli::assumed_device(name);
    ASSERT_TRUE(info.ok()) << name;
    const DeviceInfo synthetic = testing::synthetic_cuda_device();
    EXPECT_EQ(info->device, Device::cuda(0));
    EXPECT_EQ(info->num_units, synthetic.num_units) << name;
    EXPECT_EQ(info->cc_major, synthetic.cc_major) << name;
    EXPECT_EQ(info->cc_minor, 0) << name;
    EXPECT_EQ(info->max_shared_memory_per_block, testing::kH200SharedMemoryPerBlock) << name;
    EXPECT_NE(info->name.find("assumed"), std::string::npos) << info->name;
  }
  // The L2 sizes the CUDA runtime reports: 60 MiB (the H200's bench JSON: 62914560), 50 MiB.
  EXPECT_EQ(cli::assumed_device("h200")->l2_bytes, 62914560);
  EXPECT_EQ(cli::assumed_device("h100")->l2_bytes, 52428800);
}

TEST(AssumeDevice, UnknownNameIsAnErrorNamingTheFlag) {
  auto info = cli::assumed_device("h300");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find("--assume-device 'h300'"), std::string::npos);
  EXPECT_NE(info.status().message().find("h200"), std::string::npos);
  EXPECT_FALSE(cli::assumed_device("").ok());
  EXPECT_FALSE(cli::assumed_device("H200 ").ok());
}

TEST(AssumeDevice, W1Bf16Head128DecodeTakesTheDecodeFastPathInEveryBuild) {
  auto info = cli::assumed_device("h200");
  ASSERT_TRUE(info.ok());
  auto c = select_kernel(w1_problem(DType::kBFloat16, 128), *info);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->kernel, KernelId::kCudaDecodeMMA) << c->reason;
  EXPECT_NE(c->reason.find("decode fast path"), std::string::npos) << c->reason;
  EXPECT_GE(c->num_splits, 1);
  EXPECT_LE(c->shared_memory_bytes, info->max_shared_memory_per_block);
  // A forced tile keeps the tiled kernel, and says why: the decision follows the options.
  PlanOptions forced;
  forced.tile_tokens = 32;
  auto tiled = select_kernel(w1_problem(DType::kBFloat16, 128), *info, forced);
  ASSERT_TRUE(tiled.ok()) << tiled.status().to_string();
  EXPECT_EQ(tiled->kernel, KernelId::kCudaTiled);
  EXPECT_NE(tiled->reason.find("decode fast path not used"), std::string::npos) << tiled->reason;
  // A device with too little shared memory for the decode path's stages does not get it.
  DeviceInfo small = *info;
  small.max_shared_memory_per_block = 16 * 1024;
  auto no_smem = select_kernel(w1_problem(DType::kBFloat16, 128), small);
  if (no_smem.ok()) {
    EXPECT_NE(no_smem->kernel, KernelId::kCudaDecodeMMA) << no_smem->reason;
    EXPECT_LE(no_smem->shared_memory_bytes, small.max_shared_memory_per_block);
  } else {
    EXPECT_EQ(no_smem.status().code(), StatusCode::kUnsupported);
  }
}

/// One decode sequence of `len` tokens in the W1 shape.
ProblemDesc one_decode(int len) {
  ProblemDesc p = w1_problem(DType::kBFloat16, 128);
  p.batch.num_seqs = p.batch.num_decode_seqs = 1;
  p.batch.num_tokens = 1;
  p.batch.max_seq_len = len;
  p.batch.total_kv_tokens = len;
  p.num_blocks = (len + 15) / 16;
  return p;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A forced split count (--num-splits) that the kernel's cut turns into another one is not
// changed silently: the reason says the forced count, what it became and by which rule. The
// kernel and the count themselves are the selection's, as before.
TEST(AssumeDevice, ForcedSplitsSayWhatTheyBecame) {
  const DeviceInfo h200 = *cli::assumed_device("h200");
  auto with_splits = [&](const ProblemDesc& p, int n, int tile = 0) {
    PlanOptions o;
    o.num_splits = n;
    o.tile_tokens = tile;
    auto c = select_kernel(p, h200, o);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? *c : KernelChoice{};
  };
  // Decode fast path: 4096 keys in 100 parts of 41, rounded up to 64-token tiles: 64 splits.
  KernelChoice c = with_splits(one_decode(4096), 100);
  EXPECT_EQ(c.kernel, KernelId::kCudaDecodeMMA);
  EXPECT_EQ(c.num_splits, 64);
  EXPECT_TRUE(has(c.reason, "num_splits 100, which became 64: the longest key range, 4096 "
                            "tokens, in 100 parts is 41 tokens each, rounded up to whole "
                            "64-token tiles: 64 tokens"))
      << c.reason;
  // Rounding alone: 9 parts of 456 tokens are 512-token tiles, 8 splits.
  c = with_splits(one_decode(4096), 9);
  EXPECT_EQ(c.num_splits, 8);
  EXPECT_TRUE(has(c.reason, "num_splits 9, which became 8")) << c.reason;
  // A count the cut keeps says only that it was forced.
  c = with_splits(one_decode(4096), 4);
  EXPECT_EQ(c.num_splits, 4);
  EXPECT_TRUE(has(c.reason, "(forced by options: num_splits 4)")) << c.reason;
  EXPECT_FALSE(has(c.reason, "became")) << c.reason;
  // The per-sequence bound of the decode kernel.
  c = with_splits(one_decode(1000000), 1000);
  EXPECT_EQ(c.kernel, KernelId::kCudaDecodeMMA);
  EXPECT_LT(c.num_splits, 1000);
  EXPECT_TRUE(has(c.reason, "num_splits 1000, which became " + std::to_string(c.num_splits)))
      << c.reason;
  EXPECT_TRUE(has(c.reason, "as a sequence has at most 512 splits")) << c.reason;
  // A sliding window shortens the range that is cut.
  ProblemDesc windowed = one_decode(100000);
  windowed.sliding_window = 1000;
  c = with_splits(windowed, 100);
  EXPECT_EQ(c.num_splits, 17);
  EXPECT_TRUE(has(c.reason, "1063 tokens (the sliding window of 1000 and the tile it starts in)"))
      << c.reason;

  // Tiled kernel (a forced tile keeps it): the grid's count is clamped to the kernel maximum,
  // and splits rounded up to whole tiles can leave some without keys.
  c = with_splits(one_decode(4096), 1000, 32);
  EXPECT_EQ(c.kernel, KernelId::kCudaTiled);
  EXPECT_EQ(c.num_splits, 128);
  EXPECT_TRUE(has(c.reason, "128 KV split(s) (forced by options: num_splits 1000, clamped to "
                            "the kernel's maximum of 128)"))
      << c.reason;
  c = with_splits(one_decode(4096), 100, 64);
  EXPECT_EQ(c.num_splits, 100);
  EXPECT_TRUE(has(c.reason, "the longest sequence (4096 tokens) has keys in 64 of the 100 "
                            "splits and the other 36 are empty"))
      << c.reason;
  c = with_splits(one_decode(4096), 4, 64);
  EXPECT_TRUE(has(c.reason, "4 KV split(s) (forced by options)")) << c.reason;

  // A mixed batch: forced splits keep the decode rows off the decode fast path too, and the
  // reason names the option rather than the batch's prefill chunks.
  ProblemDesc mixed = w1_problem(DType::kBFloat16, 128);
  mixed.batch.num_seqs = 3;
  mixed.batch.num_decode_seqs = 2;
  mixed.batch.num_prefill_seqs = 1;
  mixed.batch.num_tokens = 2 + 512;
  mixed.batch.max_query_len = 512;
  mixed.batch.total_kv_tokens = 2 * 4096 + 2048;
  c = with_splits(mixed, 3);
  EXPECT_EQ(c.kernel, KernelId::kCudaTiled);
  EXPECT_FALSE(c.decode_rows_fast_path);
  EXPECT_FALSE(c.prefill_rows_mma);
  EXPECT_EQ(c.num_splits, 3);
  EXPECT_TRUE(has(c.reason, "decode fast path not used: num_splits 3 forced (it configures the "
                            "tiled kernel)"))
      << c.reason;
  EXPECT_TRUE(has(c.reason, "tensor-core prefill kernel not used: num_splits 3 forced"))
      << c.reason;
}

}  // namespace
}  // namespace pagedattn
