// The single selection function (DESIGN.md §3). Pure: it looks only at the problem, the
// device facts and the options, so `pagedattn explain`, plan_attention and the tests all see
// the same decision.
#include "pagedattn/select.h"

#include <sstream>

#include "src/cpu/cpu_backend.h"

namespace pagedattn {

namespace cuda {
// Defined by the CUDA backend (src/cuda/), or by the stub in builds without CUDA.
Result<KernelChoice> choose_config(const ProblemDesc& problem, const DeviceInfo& device_info,
                                   const PlanOptions& options);
}  // namespace cuda

const char* to_string(KernelId kernel) {
  switch (kernel) {
    case KernelId::kCpuTiled: return "cpu_tiled_online_softmax";
    case KernelId::kCudaTiled: return "cuda_tiled_online_softmax";
    case KernelId::kCudaDecodeMMA: return "cuda_decode_mma_splitkv";
  }
  return "unknown";
}

Result<KernelChoice> select_kernel(const ProblemDesc& problem, const DeviceInfo& device_info,
                                   const PlanOptions& options) {
  if (options.tile_tokens < 0 || options.num_splits < 0 || options.num_threads < 0)
    return Status(StatusCode::kInvalidArgument,
                  "PlanOptions: tile_tokens, num_splits and num_threads must be >= 0 (0 = auto)");
  // One rule for every kernel: batch invariance fixes the split points itself (in tokens), so
  // a forced split count would be honoured by one kernel and overridden by another.
  if (options.batch_invariant && options.num_splits > 0)
    return Status(StatusCode::kInvalidArgument,
                  "PlanOptions: num_splits = " + std::to_string(options.num_splits) +
                      " with batch_invariant: the invariant mode chooses its own split points; "
                      "leave num_splits at 0");
  if (problem.device != device_info.device)
    return Status(StatusCode::kInvalidArgument,
                  "select_kernel: problem device " + to_string(problem.device) +
                      " differs from device_info " + to_string(device_info.device));
  if (problem.device.type == DeviceType::kCUDA)
    return cuda::choose_config(problem, device_info, options);

  KernelChoice c;
  c.kernel = KernelId::kCpuTiled;
  c.access = problem.access;
  c.tile_tokens = options.tile_tokens > 0
                      ? options.tile_tokens
                      : cpu::choose_tile_tokens(problem.head_size, problem.cache_dtype);
  // The CPU backend parallelises over (sequence, KV head, query chunk); splitting the KV
  // range would only add a merge, so it never splits.
  c.num_splits = 1;
  c.shared_memory_bytes = 0;
  c.threads_per_block = 0;
  std::ostringstream why;
  why << "CPU backend: tiled online softmax over " << c.tile_tokens << "-token KV tiles ("
      << (options.tile_tokens > 0 ? "forced by options" : "sized from head_size and cache dtype")
      << ", independent of block_size " << problem.block_size << "); all "
      << problem.gqa_ratio() << " query heads of a KV head share each tile; "
      << (problem.access == CacheAccess::kNative ? "dense" : "strided") << " cache addressing";
  if (options.num_splits > 1)
    why << "; num_splits " << options.num_splits << " ignored (the CPU backend never splits)";
  if (options.batch_invariant)
    why << "; batch-invariant: always (each (sequence, KV head, query chunk) is one item summed "
           "in key order from the sequence's own first key, never split, so a sequence's bits "
           "do not depend on the batch or the thread count)";
  c.reason = why.str();
  return c;
}

WriterChoice select_writer(const KVCache& cache, Device device) {
  const CacheAccessDecision d = decide_cache_access(cache);
  WriterChoice w;
  w.access = d.access;
  const bool gpu = device.type == DeviceType::kCUDA;
  if (d.access == CacheAccess::kNative && cache.layout == KVLayout::kSplit) {
    w.kernel = gpu ? "cuda_write_kv_split_native" : "cpu_write_kv";
  } else {
    w.kernel = gpu ? "cuda_write_kv_strided" : "cpu_write_kv";
  }
  w.reason = d.reason;
  return w;
}

}  // namespace pagedattn
