// Host side of the CUDA attention backend: plan_attention (sizes everything on the host;
// nothing is allocated at run time) and run_attention (launches on the caller's stream, no
// host synchronisation, so it can be captured in a graph): the decode fast path
// (src/cuda/decode/) for decode rows, the tensor-core prefill kernel (src/cuda/prefill/) for
// prefill rows, and the tiled kernel (src/cuda/tiled/: tile prefix sums, the kernel, the
// deterministic split merge) for everything they do not take. choose_config, the CUDA half of
// select_kernel, is host code built in every build: choose_config.cpp.
#include <algorithm>
#include <climits>
#include <memory>

#include "src/cuda/backend/cuda_backend.h"
#include "src/cuda/backend/side_stream.h"
#include "src/cuda/common/cuda_common.cuh"
#include "src/cuda/decode/decode_mma.h"
#include "src/cuda/prefill/prefill_mma.h"
#include "src/cuda/prefill/prefill_wgmma.h"
#include "src/cuda/tiled/cuda_config.h"
#include "src/cuda/tiled/tiled_launch.h"

namespace pagedattn::cuda {

namespace {

/// Backend data of a plan (AttentionPlan::State::backend).
struct CudaPlan {
  TiledConfig config;
  std::int64_t total_tiles = 0;
  TiledWorkspace workspace;
  /// Decode fast path (KernelId::kCudaDecodeMMA): split size and grid split count. The tiled
  /// configuration above is always planned too, so that run() can take the tiled path for
  /// tensors whose base pointers turn out not to be 16-byte aligned.
  bool decode_mma = false;
  DecodeMmaConfig decode;
  /// Mixed batch with decode rows on the fast path: tiles of the prefill rows only, and the
  /// decode path's workspace offset (after the tiled path's).
  bool mixed = false;
  std::int64_t prefill_tiles = 0;
  std::size_t decode_ws_offset = 0;
  /// Tensor-core prefill kernel (KernelChoice::prefill_rows_mma): pipeline stages, and its
  /// grid for the rows of sequences with query_len >= 2 (the decode rows on the decode fast
  /// path) and with query_len >= 1 (every row: no decode fast path, or it cannot run this
  /// call). Its row-tile prefix sums use the tiled workspace's tile_start slot (the tiled
  /// kernel does not run in the same call).
  bool prefill_mma = false;
  int prefill_stages = 0;
  std::int64_t prefill_mma_tiles = 0;
  std::int64_t prefill_mma_all_tiles = 0;
  /// The rows above go to the wgmma prefill kernel (KernelChoice::prefill_rows_wgmma); the
  /// tile counts are then its 128-row tiles.
  bool prefill_wgmma = false;
  /// ... on its warp-specialised version (KernelChoice::prefill_rows_wgmma_ws).
  bool prefill_wgmma_ws = false;
  /// Mixed batch on the decode fast path and a tensor-core prefill kernel: 0 = the two kernels
  /// one after the other; 1 / 2 = concurrently on two streams, the prefill / decode rows on
  /// the second one (run_forked; mixed_concurrent_mode).
  int mixed_concurrent = 0;
  /// Batch-invariant mode (PlanOptions::batch_invariant) with a prefill kernel: decode rows the
  /// decode fast path does not take run on the tiled kernel (its fixed split cut, as alone)
  /// before the prefill kernel takes the prefill rows; the tiled kernel's tiles of them.
  bool decode_rows_tiled = false;
  std::int64_t decode_tiles = 0;
};

}  // namespace

Status plan_attention(const AttentionArgs& args, const HostMetadata& host,
                      AttentionPlan::State* state) {
  const ProblemDesc& problem = state->problem;
  auto info = query_device(args.query.device.index);
  if (!info.ok()) return info.status();
  auto plan = std::make_shared<CudaPlan>();
  KernelChoice tiled = state->choice;
  if (state->choice.kernel == KernelId::kCudaDecodeMMA) {
    if (decode_mma_aligned_strides(args)) {
      plan->decode_mma = true;
      plan->decode = decode_mma_config(problem, *info, state->options.num_splits,
                                       decode_mma_heads_adjacent(args),
                                       state->options.batch_invariant);
      KernelChoice& pc = state->choice;
      if (plan->decode.pair_heads !=
          decode_mma_config(problem, *info, state->options).pair_heads) {
        // The tensors' strides decide the head pairing, which select_kernel could only assume
        // from the problem (dense nhd or not): report the cut that runs.
        pc.num_splits = plan->decode.num_splits;
        pc.shared_memory_bytes =
            plan->decode.pair_heads
                ? decode_mma_smem_bytes(128)
                : decode_mma_smem_bytes(problem.head_size, decode_mma_kv_bytes(problem),
                                        problem.gqa_ratio(), !plan->decode.fp8_untuned);
        pc.reason += std::string(plan->decode.pair_heads
                                     ? "; KV heads paired after all (the cache's head stride is "
                                       "64; the two query groups side by side in the 8 columns)"
                                     : "; KV heads not paired after all") +
                     ": splits of " + std::to_string(plan->decode.chunk_tokens) +
                     " tokens, at most " + std::to_string(pc.num_splits) + " per sequence";
      }
      if (plan->decode.small_kernel) {
        KernelChoice& c = state->choice;
        c.threads_per_block = kSmallMaxWarps * 32;
        c.shared_memory_bytes = decode_small_smem_bytes(problem.head_size, problem.gqa_ratio(),
                                                        plan->decode.num_splits);
        c.reason += "; latency-bound (one wave): the small-call kernel, " +
                    std::to_string(plan->decode.num_splits) + " splits of " +
                    std::to_string(plan->decode.chunk_tokens) + " tokens, " +
                    std::to_string(kSmallMaxWarps) +
                    " warps per split with one tile each, K/V/Q loaded into registers, the "
                    "splits of each (sequence, KV head) merged in a thread-block cluster";
      }
    }
    // The tiled configuration: the fallback for unaligned pointers, or the path itself when
    // the strides do not allow 16-byte copies.
    auto t = tiled_choose(problem, *info, state->options);
    if (!t.ok()) return t.status();
    tiled = *t;
    if (!plan->decode_mma) {
      tiled.reason += "; decode fast path not used: strides are not multiples of 8 elements";
      state->choice = tiled;
    }
  } else if (state->choice.kernel == KernelId::kCudaTiled && state->choice.decode_rows_fast_path &&
             decode_mma_aligned_strides(args)) {
    plan->mixed = true;
    plan->decode_mma = true;
    plan->decode = decode_mma_config(problem, *info, 0, decode_mma_heads_adjacent(args),
                                     state->options.batch_invariant);
  } else if (state->choice.decode_rows_fast_path && !decode_mma_aligned_strides(args)) {
    state->choice.decode_rows_fast_path = false;
    state->choice.reason += " (not taken: strides are not multiples of 8 elements)";
  } else if (state->choice.kernel != KernelId::kCudaTiled) {
    return Status(StatusCode::kInternal, std::string("cuda::plan_attention got kernel ") +
                                             to_string(state->choice.kernel));
  }
  if (state->choice.prefill_rows_mma) {
    const int num_seqs = static_cast<int>(args.seq_lens.shape[0]);
    const auto* qsl = static_cast<const std::int32_t*>(host.query_start_loc.data);
    const std::int64_t qs = host.query_start_loc.strides[0];
    const int gqa = problem.gqa_ratio();
    plan->prefill_wgmma = state->choice.prefill_rows_wgmma;
    plan->prefill_wgmma_ws = state->choice.prefill_rows_wgmma_ws;
    plan->prefill_stages = prefill_mma_stages(problem.head_size, info->max_shared_memory_per_block);
    if (plan->prefill_wgmma) {
      plan->prefill_mma_tiles = prefill_wgmma_row_tiles(qsl, qs, num_seqs, gqa, 2);
      plan->prefill_mma_all_tiles = prefill_wgmma_row_tiles(qsl, qs, num_seqs, gqa, 1);
    } else {
      plan->prefill_mma_tiles = prefill_mma_row_tiles(qsl, qs, num_seqs, gqa, 2);
      plan->prefill_mma_all_tiles = prefill_mma_row_tiles(qsl, qs, num_seqs, gqa, 1);
    }
    std::string why;
    if (!prefill_mma_aligned_strides(args))
      why = "strides are not multiples of 8 elements";
    else if (plan->prefill_mma_all_tiles > INT_MAX)
      why = std::to_string(plan->prefill_mma_all_tiles) + " row tiles exceed the grid limit";
    else if (!plan->prefill_wgmma && plan->prefill_stages == 0)
      why = "the device's shared memory is too small";
    if (why.empty()) {
      plan->prefill_mma = true;
      plan->mixed_concurrent = plan->mixed && plan->decode_mma ? mixed_concurrent_mode() : 0;
    } else {
      state->choice.prefill_rows_mma = false;
      state->choice.prefill_rows_wgmma = false;
      plan->prefill_wgmma = false;
      plan->prefill_wgmma_ws = false;
      state->choice.prefill_rows_wgmma_ws = false;
      state->choice.reason += " (tensor-core prefill kernel not taken: " + why + ")";
    }
  }
  auto cfg = make_tiled_config(problem, std::max(1, tiled.tile_tokens),
                               std::max(1, tiled.num_splits), info->max_shared_memory_per_block);
  if (!cfg.ok()) return cfg.status();
  plan->config = *cfg;
  apply_split_cut(problem, *info, state->options, &plan->config);
  const int num_seqs = static_cast<int>(args.seq_lens.shape[0]);
  plan->total_tiles = num_seqs > 0 ? count_row_tiles(static_cast<const std::int32_t*>(
                                                         host.query_start_loc.data),
                                                     host.query_start_loc.strides[0], num_seqs,
                                                     cfg->q_tokens)
                                   : 0;
  if (plan->total_tiles > INT_MAX)
    return Status(StatusCode::kUnsupported, "cuda attention: " +
                                                std::to_string(plan->total_tiles) +
                                                " query-row tiles exceed the grid limit");
  const std::int64_t grid_y =
      static_cast<std::int64_t>(problem.num_kv_heads) * cfg->head_groups;
  if (grid_y > 65535)
    return Status(StatusCode::kUnsupported,
                  "cuda attention: num_kv_heads * head groups = " + std::to_string(grid_y) +
                      " exceeds 65535");
  if (plan->prefill_mma && state->options.batch_invariant &&
      problem.batch.num_decode_seqs > 0) {
    // Also when the decode fast path turns out unaligned at run time (decode_mma_aligned).
    plan->decode_rows_tiled = true;
    plan->decode_tiles = count_row_tiles(static_cast<const std::int32_t*>(host.query_start_loc.data),
                                         host.query_start_loc.strides[0], num_seqs,
                                         cfg->q_tokens, 1, 1, /*max_query_len=*/1);
    state->choice.decode_rows_tiled = !plan->decode_mma;
  } else {
    state->choice.decode_rows_tiled = false;
  }
  if (plan->mixed)
    plan->prefill_tiles = count_row_tiles(static_cast<const std::int32_t*>(host.query_start_loc.data),
                                          host.query_start_loc.strides[0], num_seqs,
                                          cfg->q_tokens, /*min_query_len=*/2);
  plan->workspace = tiled_workspace(num_seqs, args.query.shape[0], problem.num_heads,
                                    problem.head_size, cfg->num_splits);
  state->workspace_bytes = plan->workspace.total;
  if (plan->decode_mma) {
    const std::size_t dws =
        decode_mma_workspace(num_seqs, plan->decode.num_splits, problem.num_heads, problem.head_size);
    // Mixed: both paths run in one call, so their workspaces must not overlap.
    plan->decode_ws_offset = plan->mixed ? (plan->workspace.total + 255) / 256 * 256 : 0;
    state->workspace_bytes = std::max(state->workspace_bytes, plan->decode_ws_offset + dws);
  }
  state->backend = std::static_pointer_cast<const void>(
      std::shared_ptr<const CudaPlan>(std::move(plan)));
  return Status::Ok();
}

Status run_attention(const AttentionPlan::State& plan, const AttentionArgs& args, void* workspace,
                     std::size_t workspace_bytes, Stream stream) {
  const auto* cp = static_cast<const CudaPlan*>(plan.backend.get());
  if (!cp) return Status(StatusCode::kInternal, "cuda::run_attention: the plan has no CUDA data");
  if (workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes > 0 && !workspace))
    return Status(StatusCode::kInvalidArgument,
                  "workspace: " + std::to_string(workspace_bytes) + " bytes; the plan needs " +
                      std::to_string(plan.workspace_bytes));
  const bool fast = cp->decode_mma && decode_mma_aligned(args);
  if (fast && !cp->mixed)
    return decode_mma_run(args, plan.geometry.block_size, cp->decode, workspace, stream);
  // The decode rows on the fast path (mixed batches): beside or before the prefill rows.
  // Plain lambdas: a std::function (run_forked's StreamWork) is made only when forking.
  auto decode = [&](Stream s) -> Status {
    return decode_mma_run(args, plan.geometry.block_size, cp->decode,
                          static_cast<unsigned char*>(workspace) + cp->decode_ws_offset, s);
  };
  // The tiled kernel for the rows of sequences with min_ql <= query_len <= max_ql.
  auto tiled = [&](int min_ql, int max_ql, std::int64_t tiles) -> Status {
    if (tiles == 0 || args.query.shape[0] == 0) return Status::Ok();
    const int device = args.query.device.index;
    DeviceGuard guard(device);
    if (guard.status() != cudaSuccess)
      return cuda_error(guard.status(), "run_attention: set device");
    const TiledConfig& cfg = cp->config;
    int optin = 0;
    PA_CUDA_RETURN(device_smem_optin(device, &optin), "cudaDeviceGetAttribute(smem opt-in)");
    if (cfg.smem.total > optin)
      return Status(StatusCode::kUnsupported,
                    "cuda attention: the plan needs " + std::to_string(cfg.smem.total) +
                        " bytes of shared memory; this device allows " + std::to_string(optin));
    return tiled_run(args, plan.geometry, cfg, cp->workspace, tiles, min_ql, max_ql, optin,
                     workspace, stream);
  };
  if (cp->prefill_mma && prefill_mma_aligned(args)) {
    // Decode rows on the decode fast path when it runs, else on the tiled kernel in
    // batch-invariant mode, else on the prefill kernel with the prefill rows: disjoint output
    // rows, disjoint workspaces.
    const bool decode_elsewhere = fast || cp->decode_rows_tiled;
    auto prefill = [&](Stream s) -> Status {
      const std::int64_t tiles =
          decode_elsewhere ? cp->prefill_mma_tiles : cp->prefill_mma_all_tiles;
      const int min_ql = decode_elsewhere ? 2 : 1;
      unsigned char* tile_start = static_cast<unsigned char*>(workspace) + cp->workspace.off_tile_start;
      if (cp->prefill_wgmma)
        return prefill_wgmma_run(args, plan.geometry.block_size, tiles, min_ql, tile_start, s,
                                 cp->prefill_wgmma_ws);
      return prefill_mma_run(args, plan.geometry.block_size, cp->prefill_stages, tiles, min_ql,
                             tile_start, s);
    };
    if (!fast) {
      // In stream order: the prefill kernel's tile prefix sums reuse the tiled kernel's slot,
      // which the tiled split merge reads.
      if (cp->decode_rows_tiled) PAGEDATTN_RETURN_IF_ERROR(tiled(1, 1, cp->decode_tiles));
      return prefill(stream);
    }
    if (cp->mixed_concurrent != 0 && cp->prefill_mma_tiles > 0) {
      // The kernel enqueued first has its CTAs dispatched first; the other's CTAs take the
      // SMs its tail leaves idle instead of waiting for its last CTA.
      DeviceGuard guard(args.query.device.index);
      if (guard.status() != cudaSuccess)
        return cuda_error(guard.status(), "run_attention: set device");
      return cp->mixed_concurrent == 1
                 ? run_forked(stream, args.query.device.index, prefill, decode)
                 : run_forked(stream, args.query.device.index, decode, prefill);
    }
    PAGEDATTN_RETURN_IF_ERROR(decode(stream));
    return prefill(stream);
  }
  // Mixed batch: decode rows on the fast path, then the prefill rows (disjoint output rows).
  if (fast) PAGEDATTN_RETURN_IF_ERROR(decode(stream));
  return fast ? tiled(2, INT_MAX, cp->prefill_tiles) : tiled(1, INT_MAX, cp->total_tiles);
}

}  // namespace pagedattn::cuda
