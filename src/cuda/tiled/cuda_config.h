// Sizing of the CUDA tiled attention kernel: host-only, no CUDA headers, so that the dispatcher
// (src/dispatch/select.cpp), `pagedattn explain` and the host unit tests can call it in any
// build. The kernel (src/cuda/tiled/attention_kernel.cuh) carves its shared memory with exactly the
// offsets computed here (they travel in the kernel parameters), so the size the selection
// reports is the size the launch requests.
#pragma once

#include <climits>
#include <cstdint>
#include <string>

#include "pagedattn/select.h"
#include "pagedattn/status.h"

namespace pagedattn::cuda {

/// Threads per CTA of the tiled kernel (4 warps).
inline constexpr int kTiledThreads = 128;
/// Largest KV tile: the QK step maps one thread to one token of a 64-token tile.
inline constexpr int kMaxTileTokens = 64;
/// Upper bound of KV splits per sequence.
inline constexpr int kMaxSplits = 128;
/// Largest workspace the automatic split choice may ask for (bytes).
inline constexpr std::int64_t kMaxAutoSplitWorkspace = std::int64_t{256} << 20;
/// Batch-invariant mode (PlanOptions::batch_invariant): a sequence's keys are cut into splits
/// of kInvariantSplitTokens tokens, doubled until at most kInvariantMaxSplits cover it
/// (tiled_split_chunk in cache_index.h): a cut fixed by the sequence's own length.
inline constexpr int kInvariantSplitTokens = 2048;
inline constexpr int kInvariantMaxSplits = 16;

/// Shared-memory carve-up of one CTA (bytes; every offset a multiple of 16).
struct TiledSmem {
  int q_stride = 0;      // floats per query row in shared memory (head_size rounded up to 16)
  int k_row_bytes = 0;   // bytes per key token row (odd multiple of 16: conflict-free 16B reads)
  int v_row_bytes = 0;   // bytes per value token row
  int off_q = 0, off_k = 0, off_v = 0, off_s = 0, off_rows = 0;
  int total = 0;
};

/// Everything the launcher needs besides the tensors.
struct TiledConfig {
  int kp = 1;               // head-dim pairs per lane in the PV step: ceil(head_size / 64)
  int mmax = 16;            // rows (query token x head) a CTA can hold: 16, 32 or 64
  int heads_per_cta = 1;    // query heads of one KV head handled together (GQA packing)
  int head_groups = 1;      // ceil(gqa / heads_per_cta)
  int q_tokens = 1;         // query tokens per CTA
  int rows = 1;             // q_tokens * heads_per_cta (<= mmax)
  int tile_tokens = 64;     // KV tokens per tile (1..64), independent of block_size
  int tile_rows = 64;       // tile_tokens rounded up to a multiple of 4
  int num_splits = 1;
  /// > 0: fixed-token split cut (AttnParams::split_tokens); 0: ceil(seq_len / num_splits).
  int split_tokens = 0;
  /// Tiles on the absolute tile grid (AttnParams::tile_grid): batch-invariant mode.
  bool tile_grid = false;
  TiledSmem smem;
};

/// Split size in tokens for a skewed all-decode batch whose CTAs would fill the device but
/// whose longest sequence is more than twice a balanced CTA's share of the work: that share
/// (total KV tokens x KV heads x head groups / (2 x SMs), rounded up to a tile, at least four
/// tiles), so that long sequences get many splits and short ones one, wherever they sit in
/// the batch. 0 when the batch is not skewed that way (or has prefill rows, or splits or
/// tiles are forced): the uniform split count applies.
int tiled_skew_split_tokens(const ProblemDesc& problem, const DeviceInfo& device_info,
                            const PlanOptions& options, int head_groups, int tile_tokens);

/// The split cut of the tiled kernel (TiledConfig::split_tokens / tile_grid), the one
/// tiled_choose reported: batch-invariant mode without forced splits cuts at
/// kInvariantSplitTokens; a skewed decode batch at tiled_skew_split_tokens; otherwise
/// ceil(seq_len / num_splits) (a forced split count included, which depends on the sequence
/// alone too).
void apply_split_cut(const ProblemDesc& problem, const DeviceInfo& device_info,
                     const PlanOptions& options, TiledConfig* config);

/// The most rows (query token x head) a CTA holds for `kp` head-dim pairs per lane: 64 for
/// head <= 128, 32 for <= 256, 16 for <= 512 (decode-only batches with GQA <= 16 hold 16).
int tiled_max_rows(int kp);

/// rows/heads/tokens per CTA for a problem (independent of the tile size).
void choose_rows(const ProblemDesc& problem, TiledConfig* config);

/// Shared memory for a configuration. `cache_elem_bytes` is the cache dtype's element size.
TiledSmem tiled_smem(int head_size, int cache_elem_bytes, KVLayout layout, int mmax,
                     int tile_tokens);

/// Row tiles of a batch, the grid of a kernel that maps CTAs to (sequence, rows) through the
/// tile_start prefix sums (launch_tile_prefix, tile_sequence): the sum over sequences with
/// query_len >= max(1, min_query_len) and <= max_query_len of
/// ceil(query_len * rows_per_token / rows_per_tile).
/// The tiled kernel has one row per query token (rows_per_token 1, rows_per_tile = its query
/// tokens per CTA); the prefill kernel flattens the GQA group into the rows (rows_per_token =
/// GQA ratio, 64 rows per CTA). min_query_len 2 leaves the decode rows to the decode path;
/// max_query_len 1 takes the decode rows only (batch-invariant mode's tiled decode rows beside
/// a prefill kernel).
/// `query_start_loc` is int32 [num_seqs + 1] with element stride `stride`.
std::int64_t count_row_tiles(const std::int32_t* query_start_loc, std::int64_t stride,
                             int num_seqs, int rows_per_tile, int min_query_len = 1,
                             int rows_per_token = 1, int max_query_len = INT_MAX);

/// Launch the one-CTA kernel that writes tile_start[s] = the row tiles (as count_row_tiles
/// counts them) of sequences < s, and tile_start[num_seqs] = the total, on `stream`
/// (deterministic, no atomics; values clamped to INT_MAX). `query_start_loc` is the device
/// copy. Errors: kInternal for a launch error. CUDA builds only.
Status launch_tile_prefix(const std::int32_t* query_start_loc, std::int64_t stride, int num_seqs,
                          int rows_per_tile, int rows_per_token, int min_query_len,
                          int max_query_len, std::int32_t* tile_start, void* stream);

/// Workspace layout of a run: the per-sequence tile prefix sums, and when num_splits > 1 the
/// per-split partial outputs (fp32) and log-sum-exps.
struct TiledWorkspace {
  std::size_t off_tile_start = 0;   // int32 [num_seqs + 1]
  std::size_t off_part_lse = 0;     // fp32 [num_splits, num_tokens, num_heads]
  std::size_t off_part_out = 0;     // fp32 [num_splits, num_tokens, num_heads, head_size]
  std::size_t total = 0;
};
TiledWorkspace tiled_workspace(int num_seqs, std::int64_t num_tokens, int num_heads,
                               int head_size, int num_splits);

/// The full configuration for `problem` with an explicit tile size and split count (both
/// already validated >= 1). Errors: kUnsupported when the shared memory exceeds
/// `max_shared_memory` (bytes).
Result<TiledConfig> make_tiled_config(const ProblemDesc& problem, int tile_tokens,
                                      int num_splits, std::int64_t max_shared_memory);

/// The selection rule for CUDA devices (select_kernel calls it through cuda::choose_config):
/// tile size from the device's opt-in shared-memory limit (halved from 64 until it fits),
/// KV splits when the batch has too few CTAs to fill the SMs, overrides from `options`.
/// With options.batch_invariant: a tile that does not depend on the batch's lengths (sized
/// for the largest row count), and kInvariantSplitTokens splits (at most
/// kInvariantMaxSplits per sequence, fewer while the workspace would exceed
/// kMaxAutoSplitWorkspace) instead of a count from the device's size. `splits_why`: when
/// non-null, options.num_splits is 1 and was set by the caller's own rule, not the user's;
/// the reason then gives this text for it instead of "forced by options".
Result<KernelChoice> tiled_choose(const ProblemDesc& problem, const DeviceInfo& device_info,
                                  const PlanOptions& options,
                                  const char* splits_why = nullptr);

}  // namespace pagedattn::cuda

// ---- test support (implemented in src/cuda/backend/runtime.cu; kDeviceUnavailable without CUDA) ----
namespace pagedattn::cuda::testsupport {
/// A new non-blocking stream (opaque cudaStream_t) / destroy it.
Result<void*> stream_create();
void stream_destroy(void* stream);
Status stream_synchronize(void* stream);
/// Fill `bytes` of device memory with `byte`.
Status memset_device(void* ptr, int byte, std::size_t bytes);
/// Begin capturing `stream` into a graph: global capture mode, or relaxed (the capturing
/// thread may also run and synchronise work on other streams meanwhile).
Status capture_begin(void* stream, bool relaxed = false);
/// End the capture and instantiate the graph; returns an opaque cudaGraphExec_t. When
/// `programmatic_edges` is given, it receives the number of the graph's edges of type
/// cudaGraphDependencyTypeProgrammatic (a kernel launched as a programmatic dependent launch
/// of the one before it).
Result<void*> capture_end(void* stream, int* programmatic_edges = nullptr);
Status graph_launch(void* graph_exec, void* stream);
void graph_destroy(void* graph_exec);
/// Number of CUDA devices (0 when none or without CUDA).
int device_count();
/// The calling thread's current device (-1 when none or without CUDA) / make `index` current.
int current_device();
Status set_device(int index);
}  // namespace pagedattn::cuda::testsupport
