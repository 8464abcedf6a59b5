// Paged attention over a batch that mixes decode rows and chunked-prefill chunks, as plan/run
// (DESIGN.md §3), and the merge of two partial attention states (DESIGN.md §8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "pagedattn/kv_cache.h"
#include "pagedattn/select.h"
#include "pagedattn/status.h"
#include "pagedattn/tensor.h"

namespace pagedattn {

/// Opaque stream handle: a `cudaStream_t` for CUDA tensors (nullptr = the legacy default
/// stream); ignored by the CPU backend. Kept as `void*` so that public headers need no CUDA.
using Stream = void*;

/// Softmax scale used by most models: 1 / sqrt(head_size).
float default_scale(int head_size);

/// Scalar and per-head options of the attention math (DESIGN.md §2).
struct AttentionParams {
  /// Multiplies <q, k>. Must be finite and > 0.
  float scale = 0.0f;
  /// `z = softcap * tanh(z / softcap)` after scaling (DESIGN.md §2.2). 0 = off; < 0 is an error.
  float softcap = 0.0f;
  /// Keep keys with `q_pos - j < sliding_window` (the window counts the current token).
  /// 0 = off; < 0 is an error.
  std::int32_t sliding_window = 0;
  /// Optional `[num_heads]` fp32: `z_j += slope_h * (j - q_pos)` (DESIGN.md §2.4). Values
  /// must be finite: run_attention checks them when they live on the host (kInvalidArgument
  /// naming the element, nothing written); on the GPU they are read only by the kernels, and
  /// a NaN gives NaN rows.
  TensorView alibi_slopes;
  /// Optional `[num_heads]` fp32: a raw logit per query head that joins the softmax
  /// denominator only (DESIGN.md §2.5). Finite or -inf (= no sink); checked as above.
  TensorView sinks;
};

/// Everything one attention call reads and writes. All tensors live on one device.
struct AttentionArgs {
  /// `[num_tokens, num_heads, head_size]`, fp32/fp16/bf16; heads and tokens may be strided,
  /// the last dimension must be contiguous. Rows are packed per sequence (varlen) in the order
  /// of `query_start_loc`.
  TensorView query;
  /// The layer's paged cache. Its dtype equals the query dtype, or is fp8 (dequantised with
  /// its scales). num_heads % cache num_kv_heads == 0; query head h reads KV head
  /// h / (num_heads / num_kv_heads).
  KVCache cache;
  /// `[num_seqs, max_blocks_per_seq]` int32: logical block j of sequence s -> physical block.
  /// Only the first ceil(seq_len / block_size) entries of a row are read.
  TensorView block_table;
  /// `[num_seqs]` int32: KV length of each sequence including this step's new tokens (which
  /// must already be in the cache, see write_kv).
  TensorView seq_lens;
  /// `[num_seqs + 1]` int32: prefix sum of the query lengths; query_start_loc[0] == 0 and
  /// query_start_loc[num_seqs] == num_tokens. query_len == 0 skips a sequence.
  TensorView query_start_loc;
  /// `[num_tokens, num_heads, head_size]`, same dtype as the query; last dim contiguous; no two
  /// elements at one address (kInvalidArgument otherwise). May be exactly the query view
  /// (in place); sharing memory with any input in another way (a shifted or reshaped view of
  /// the query, a view into the cache) is kInvalidArgument. `lse` must share memory with no
  /// other argument.
  TensorView out;
  /// Optional `[num_tokens, num_heads]` fp32: natural-log log-sum-exp of each row's logits
  /// (after scale, softcap, ALiBi; including the sink term when sinks are given).
  TensorView lse;
  AttentionParams params;
};

/// Host-resident copies of the batch metadata (DESIGN.md §3 "plan, then run"): the same
/// values as AttentionArgs' block_table, seq_lens and query_start_loc, on the CPU. Serving
/// engines keep these; plan() validates their values (lengths consistent, block ids in range)
/// so that run() needs no host synchronisation.
struct HostMetadata {
  TensorView block_table;
  TensorView seq_lens;
  TensorView query_start_loc;
  /// The host copies that `args` itself holds, for CPU tensors.
  static HostMetadata from_args(const AttentionArgs& args);
};

/// The outcome of planning: which kernel runs, how much workspace it needs, and the batch
/// shape it was made for. Cheap to copy; one plan serves every layer of a step.
class AttentionPlan {
 public:
  struct State;  // backend-specific; defined in src/
  AttentionPlan() = default;
  explicit AttentionPlan(std::shared_ptr<const State> state) : state_(std::move(state)) {}

  const KernelChoice& choice() const;
  const ProblemDesc& problem() const;
  /// Bytes of device (or host, for the CPU) memory run() needs; may be 0.
  std::size_t workspace_bytes() const;
  const State* state() const { return state_.get(); }

 private:
  std::shared_ptr<const State> state_;
};

/// Alignment in bytes that run_attention needs of a non-empty workspace (cudaMalloc and
/// framework allocators give at least 256).
inline constexpr std::size_t kWorkspaceAlignment = 16;

/// Validate `args` (shapes, dtypes, strides, devices; data pointers may be null) and the values
/// of `host` (query_start_loc monotone, starting at 0 and ending at num_tokens; 1 <= query_len
/// <= seq_len for non-skipped sequences; block table wide enough; block ids in
/// [0, num_blocks)), then choose the kernel.
/// Errors: kInvalidArgument naming the argument (e.g. "seq_lens[2] = 3 < query_len 5"; also
/// num_heads or num_seqs beyond int32, which the kernels index with 32-bit integers),
/// kUnsupported for configurations no path can run, kDeviceUnavailable when args live on a
/// device this build or machine does not have.
Result<AttentionPlan> plan_attention(const AttentionArgs& args, const HostMetadata& host,
                                     const PlanOptions& options = {});

/// Run a plan. `args` must have the shapes, dtypes and device the plan was made for (checked;
/// kInvalidArgument otherwise); metadata values are not re-read on the host, so the device
/// copies must describe the planned batch, except that sequence lengths may have grown (a CUDA
/// graph of a decode step replayed at later steps, with block tables covering the new
/// lengths): the kernels read the lengths on the device and cover every key with the plan's
/// split sizes, the decode fast path putting the remainder on each sequence's last split
/// (src/cuda/decode/decode_split.h) so that it never leaves its workspace. `workspace` must
/// hold plan.workspace_bytes() bytes on the plan's device, at an address that is a multiple
/// of kWorkspaceAlignment (kInvalidArgument otherwise); it may be null when that is 0.
/// CUDA: asynchronous on `stream` (a stream of the tensors' device), no allocation, no host
/// synchronisation, capturable in a CUDA graph; deterministic (no atomics in reductions). The
/// kernels run on the tensors' device whatever the calling thread's current device is, and
/// the current device is left as it was. A query element that is NaN makes that (token, head)
/// row's output and LSE NaN, as in reference_attention.
Status run_attention(const AttentionPlan& plan, const AttentionArgs& args, void* workspace,
                     std::size_t workspace_bytes, Stream stream = nullptr);

/// Convenience: plan, allocate the workspace (on the tensors' device), run, wait for that
/// device, free it. Allocates, so it is not meant for CUDA-graph capture; errors as
/// plan_attention and run_attention.
Status paged_attention(const AttentionArgs& args, const HostMetadata& host, Stream stream = nullptr,
                       const PlanOptions& options = {});

/// Merge two partial attention states over disjoint key sets (split-KV, cascade prefixes,
/// attention split across GPUs): with `lse = log(e^lse_a + e^lse_b)`,
/// `out = e^(lse_a - lse) * out_a + e^(lse_b - lse) * out_b`.
/// A state whose lse is -inf contributes nothing; if both are -inf, out = 0 and lse = -inf.
/// LSE values must be finite or -inf (+inf and NaN give NaN results).
/// out_a, out_b, out: `[num_tokens, num_heads, head_size]` fp32/fp16/bf16 (one dtype; last dim
/// contiguous); lse_a, lse_b: `[num_tokens, num_heads]` fp32; lse_out optional (absent view =
/// not written). `out` may be exactly the view out_a or out_b, `lse_out` exactly lse_a or
/// lse_b (in place); any other sharing of memory between an output and an input is
/// kInvalidArgument. Source: the log-sum-exp identity of the
/// online softmax (Milakov & Gimelshein 2018; FlashAttention-2 §3.1).
/// Errors: kInvalidArgument on shape, dtype or device mismatch.
Status merge_attention_states(const TensorView& out_a, const TensorView& lse_a,
                              const TensorView& out_b, const TensorView& lse_b,
                              const TensorView& out, const TensorView& lse_out,
                              Stream stream = nullptr);

}  // namespace pagedattn
