// The single selection function (DESIGN.md §3): which kernel runs a problem, with which tile,
// how many KV splits and how much shared memory, and why. It serves the run path, the
// "is this supported" query, workspace sizing and `pagedattn explain`.
#pragma once

#include <cstdint>
#include <string>

#include "pagedattn/kv_cache.h"
#include "pagedattn/status.h"
#include "pagedattn/tensor.h"

namespace pagedattn {

/// Knobs for tests and experiments; the defaults let the selection function decide.
struct PlanOptions {
  /// KV splits per sequence; 0 = chosen by select_kernel.
  int num_splits = 0;
  /// Tokens per KV tile; 0 = chosen by select_kernel. Tests force small tiles so that tiles
  /// cross block boundaries, and blocks larger than tiles.
  int tile_tokens = 0;
  /// CPU worker threads; 0 = std::thread::hardware_concurrency().
  int num_threads = 0;
  /// Batch-invariant results: every kernel cuts a sequence's KV range at split points fixed in
  /// tokens (independent of the batch's other sequences and of the device's size), so one
  /// sequence's output and LSE are the same bits alone or in any batch. Costs some speed on
  /// small batches (fewer splits than the device could use). Limits: on the CUDA decode fast
  /// path the cut is every 1024 tokens for batches whose longest sequence is at most
  /// 512 x 1024 = 524288 tokens (the merge kernel's split limit); a longer sequence in the batch
  /// widens every sequence's cut, so bits match only between batches on the same side of that
  /// bound. A batch that moves a sequence to another kernel (a prefill chunk beside it, another
  /// head size) is not covered. With num_splits > 0 planning fails (kInvalidArgument).
  bool batch_invariant = false;
  /// Keep the mma.sync prefill kernel (KernelChoice::prefill_rows_mma) on compute capability
  /// 9.0 devices instead of the wgmma one (KernelChoice::prefill_rows_wgmma): for tests of
  /// that kernel and benchmark comparisons.
  bool no_wgmma_prefill = false;
  /// On the wgmma prefill path, run its first version (two warpgroups, a CTA barrier per key
  /// tile) instead of the warp-specialised one (KernelChoice::prefill_rows_wgmma_ws): for
  /// benchmark comparisons and as a fallback. Ignored when the wgmma kernel is not chosen.
  bool wgmma_prefill_v1 = false;
};

/// Facts about a device that selection depends on, queried at run time (never hard-coded).
struct DeviceInfo {
  Device device{};
  std::string name;
  /// Streaming multiprocessors (CUDA) or hardware threads (CPU).
  int num_units = 1;
  int cc_major = 0;
  int cc_minor = 0;
  /// Largest dynamic shared memory one CUDA block may opt in to (bytes); 0 for the CPU.
  std::int64_t max_shared_memory_per_block = 0;
  std::int64_t l2_bytes = 0;
};

/// Query `device`. Errors: kDeviceUnavailable if this build has no CUDA backend or the GPU is
/// absent (message says which).
Result<DeviceInfo> query_device(Device device);

/// Batch-level facts computed from the host metadata.
struct BatchSummary {
  int num_seqs = 0;
  std::int64_t num_tokens = 0;
  int num_decode_seqs = 0;   // query_len == 1
  int num_prefill_seqs = 0;  // query_len > 1
  int num_empty_seqs = 0;    // query_len == 0
  int max_seq_len = 0;
  int max_query_len = 0;
  /// Sum of seq_len over sequences with query_len > 0: the KV tokens attention must read.
  std::int64_t total_kv_tokens = 0;
};

/// Everything selection needs to know about one attention call.
struct ProblemDesc {
  Device device{};
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_size = 0;
  DType q_dtype = DType::kFloat16;
  DType cache_dtype = DType::kFloat16;
  KVLayout layout = KVLayout::kNHD;
  int block_size = 0;
  std::int64_t num_blocks = 0;
  CacheAccess access = CacheAccess::kStrided;
  float softcap = 0.0f;
  int sliding_window = 0;
  bool alibi = false;
  bool sinks = false;
  bool lse = false;
  BatchSummary batch;
  int gqa_ratio() const { return num_kv_heads > 0 ? num_heads / num_kv_heads : 0; }
};

/// Kernels pagedattn can run.
enum class KernelId : std::uint8_t {
  /// CPU backend: tiled online softmax, threads over (sequence, KV head, query chunk).
  kCpuTiled,
  /// CUDA general path: tiled online softmax, any layout and stride, split-KV + merge.
  kCudaTiled,
  /// CUDA decode fast path: all-decode batches, fp16/bf16 cache equal to the query dtype,
  /// head_size 64 or 128, GQA ratio <= 16; cp.async multi-stage K/V pipeline, tensor-core
  /// (mma.sync) QK and PV with the GQA group packed into the MMA rows, split-KV balanced
  /// over the SMs, deterministic merge.
  kCudaDecodeMMA,
};
const char* to_string(KernelId kernel);

/// The decision and its justification.
struct KernelChoice {
  KernelId kernel = KernelId::kCpuTiled;
  CacheAccess access = CacheAccess::kStrided;
  /// KV tokens per tile; independent of block_size.
  int tile_tokens = 0;
  /// KV splits per sequence (1 = no split, no merge).
  int num_splits = 1;
  /// Dynamic shared memory per CUDA block in bytes (0 on the CPU); never above the device's
  /// max_shared_memory_per_block.
  std::int64_t shared_memory_bytes = 0;
  int threads_per_block = 0;
  /// CUDA batches mixing decode rows and prefill chunks: the decode rows run on the decode
  /// fast path (KernelId::kCudaDecodeMMA) and only the prefill chunks on `kernel`. False in
  /// every other plan, an all-decode one whose `kernel` is kCudaDecodeMMA included (there
  /// `kernel` runs every row).
  bool decode_rows_fast_path = false;
  /// CUDA batches with prefill chunks: the prefill rows (query_len >= 2), and the decode rows
  /// too unless decode_rows_fast_path, run on the tensor-core prefill kernel (fp16/bf16 query
  /// and cache of one dtype, head_size 64 or 128, any GQA ratio; mma.sync with 64 (token,
  /// head) rows per CTA and a cp.async K/V pipeline). `kernel` (kCudaTiled) and its tile,
  /// splits and shared memory then describe the tiled kernel that run_attention falls back
  /// to for tensors whose base pointers turn out not to be 16-byte aligned.
  bool prefill_rows_mma = false;
  /// The rows prefill_rows_mma describes (it is then true too) run on the Hopper (compute
  /// capability 9.0) prefill kernel instead: wgmma with 128 (token, head) rows per CTA in two
  /// warpgroups, fp16/bf16, head_size 64, 128 or 256 (the warp-specialised version also every
  /// other multiple of 8 up to 256, masked on the next larger of them, fp8 caches in nhd/hnd,
  /// and the split layout at block sizes that are multiples of 8), nhd/hnd layouts, every
  /// score modifier (src/cuda/prefill/prefill_wgmma.h); same fallbacks.
  bool prefill_rows_wgmma = false;
  /// prefill_rows_wgmma runs the warp-specialised version (a producer warpgroup filling
  /// mbarrier-guarded K/V rings, two consumer warpgroups taking turns at the tensor cores);
  /// false with it: the first version (PlanOptions::wgmma_prefill_v1).
  bool prefill_rows_wgmma_ws = false;
  /// Batch-invariant plans (PlanOptions::batch_invariant) with prefill_rows_mma: the decode
  /// rows the decode fast path does not take run on the tiled kernel `kernel` describes (its
  /// fixed split cut, as when they run alone), before the prefill kernel takes the prefill
  /// rows, instead of unsplit on the prefill kernel.
  bool decode_rows_tiled = false;
  std::string reason;
};

/// Choose how to run `problem` on `device_info`. Errors: kUnsupported with the reason when no
/// path can run it (never a silent fallback to a path that would compute something else).
Result<KernelChoice> select_kernel(const ProblemDesc& problem, const DeviceInfo& device_info,
                                   const PlanOptions& options = {});

/// How write_kv writes a cache; derived from decide_cache_access(), the same decision the
/// attention reader takes.
struct WriterChoice {
  std::string kernel;
  CacheAccess access = CacheAccess::kStrided;
  std::string reason;
};
/// Choose the writer for `cache` on `device`. Never fails for a cache describe_kv_cache accepts.
WriterChoice select_writer(const KVCache& cache, Device device);

}  // namespace pagedattn
