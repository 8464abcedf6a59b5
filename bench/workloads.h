// Benchmark workloads as data (DESIGN.md §6; issue "Decode at the H200's memory-bandwidth
// limit"): the standard decode workloads W1-W7, batches taken from the shipped serving traces,
// and the context-length / batch-size sweeps behind the bandwidth plot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedattn/kv_cache.h"
#include "pagedattn/status.h"
#include "pagedattn/tensor.h"

namespace pagedattn::bench {

struct Workload {
  std::string name;         // "W1", "T-conv-decode", "ctx-4096", ...
  std::string description;  // one line for the table
  std::string group;        // "standard", "trace", "trace-parts", "sweep-ctx", "sweep-batch", "prefill"
  int num_heads = 32;
  int num_kv_heads = 8;
  int head_size = 128;
  int block_size = 16;
  KVLayout layout = KVLayout::kNHD;
  DType dtype = DType::kBFloat16;
  DType kv_dtype = DType::kBFloat16;
  std::int64_t page_pad = 0;     // elements after each cache block (padded pages)
  std::vector<int> seq_lens;
  std::vector<int> query_lens;   // empty = all 1 (pure decode)
  bool graph = false;            // also time under CUDA-graph replay
  // Attention features (`bench --config` takes them from the verify flags; the standard
  // workloads use none). The ALiBi slopes and sink logits are drawn from the seed.
  float softcap = 0.0f;          // 0 = off
  int sliding_window = 0;        // keys per row, 0 = off
  bool alibi = false;
  bool sinks = false;
  float k_scale = 1.0f;          // fp8 caches: dequantisation scales
  float v_scale = 1.0f;
  /// Softmax scale; 0 = default_scale(head_size). `--config` and `--matrix` use the test
  /// harness's boosted scale (testing::case_scale), whose peaked softmax makes the output
  /// check sensitive to a missing or extra key.
  float scale = 0.0f;
  /// Also write the log-sum-exp output (`[num_tokens, num_heads]` fp32; `bench --lse`).
  bool lse = false;
};

/// W1-W7 exactly as DESIGN.md §6 and the issue define them, bf16, in `layout`. W4's lengths
/// come from a seeded generator (uniform 128..8192) that is the same on every platform.
std::vector<Workload> standard_workloads(KVLayout layout, std::uint64_t seed);

/// Steps taken from the shipped traces: a decode step and a mixed (chunked prefill + decode)
/// step from the Azure conversation trace, and a long-context decode step from Mooncake.
/// Each sequence's length = prompt + a seeded fraction of its output (mid-generation).
Result<std::vector<Workload>> trace_workloads(KVLayout layout, std::uint64_t seed);

/// Sweeps for the bandwidth plot: context 512..32768 at batch 64, and batch 1..256 at 4096
/// (W1's heads and head size).
std::vector<Workload> sweep_workloads(KVLayout layout);

/// Prefill workloads (issue 23), Llama-3-8B-like heads (32/8) in bf16, every chunk causal
/// with its last query token at the end of its sequence (bottom-right aligned):
/// P-chunks-8k (4 x 2048-token chunks ending an 8192 context) and P-fresh-8k (1 x 8192
/// tokens, no cached prefix) at head 128 with block 16 and block 128, and both at head 64
/// and head 256 (block 16).
std::vector<Workload> prefill_workloads(KVLayout layout);

/// Attention FLOPs of one call: 4 x the (query, key) pairs the causal mask allows (query
/// token i of a chunk of q tokens in a sequence of n sees n - q + i + 1 keys; no window) x
/// head_size x num_heads. Decode rows count too (each sees its whole sequence).
std::int64_t attention_flops(const Workload& w);

/// Useful bytes of one call (DESIGN.md §6): the K and V of every token covered by seq_lens
/// (each read once, shared across a GQA group; at dtype_size(kv_dtype) bytes, so 1 per fp8
/// element) + the query rows + the output rows. A sequence with query_len 0 reads nothing; with
/// a sliding window W a sequence reads only its last min(seq_len, W + query_len - 1) keys.
/// With `lse`, the fp32 log-sum-exp output (4 bytes per query row and head) is counted too;
/// the ALiBi slopes and sink logits (a few bytes per head) are not.
std::int64_t useful_bytes(const Workload& w);

/// Deterministic 64-bit generator (splitmix64) so workloads are identical everywhere.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next();
  /// Uniform integer in [lo, hi].
  std::int64_t uniform(std::int64_t lo, std::int64_t hi);
};

}  // namespace pagedattn::bench
