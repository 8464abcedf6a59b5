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

}  // namespace
}  // namespace pagedattn
