// Fixtures of the host-only tests of the CUDA decode fast path's plan (test_decode_select.cpp,
// test_decode_support.cpp): a decode problem and a synthetic H200.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "tests/unit/synthetic_device.h"

namespace pagedattn::cuda {

inline constexpr std::int64_t kH200Smem = testing::kH200SharedMemoryPerBlock;
using testing::kH200Units;

/// A bf16 nhd decode batch (block size 16) of one decode row per entry of `seq_lens` (keys
/// each), `heads` query heads over `kv_heads` KV heads of head size `head`.
inline ProblemDesc decode_problem(const std::vector<int>& seq_lens, int heads, int kv_heads, int head) {
  ProblemDesc p;
  p.device = Device::cuda(0);
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_size = head;
  p.q_dtype = p.cache_dtype = DType::kBFloat16;
  p.layout = KVLayout::kNHD;
  p.block_size = 16;
  p.num_blocks = 1 << 20;
  p.access = CacheAccess::kNative;
  p.batch.num_seqs = p.batch.num_decode_seqs = static_cast<int>(seq_lens.size());
  p.batch.num_tokens = p.batch.num_seqs;
  p.batch.max_query_len = 1;
  p.batch.max_seq_len = *std::max_element(seq_lens.begin(), seq_lens.end());
  p.batch.total_kv_tokens = std::accumulate(seq_lens.begin(), seq_lens.end(), std::int64_t{0});
  return p;
}

/// CUDA device 0 as an H200 with `units` SMs and compute capability `cc_major`.x.
inline DeviceInfo synthetic_h200(int units = kH200Units, int cc_major = 9) {
  return testing::synthetic_cuda_device(kH200Smem, units, cc_major);
}

}  // namespace pagedattn::cuda
