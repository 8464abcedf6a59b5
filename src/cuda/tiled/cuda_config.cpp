// Host-only sizing of the CUDA tiled attention kernel (see cuda_config.h). Compiled in every
// build (with or without CUDA) so that selection, `explain` and the unit tests see one rule.
#include "src/cuda/tiled/cuda_config.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "pagedattn/tensor.h"

namespace pagedattn::cuda {

namespace {
int round_up(int v, int m) { return (v + m - 1) / m * m; }
std::size_t align256(std::size_t v) { return (v + 255) / 256 * 256; }

/// What a forced split count becomes for the longest sequence (split_range's cut: ceil(seq_len
/// / splits) keys rounded up to whole tiles), when that leaves some of the grid's splits
/// without keys; empty when every split gets keys. A user who asked for more splits than the
/// sequence has tiles otherwise reads the grid's count as the number of key ranges.
std::string forced_splits_used(std::int64_t longest, int splits, int tile) {
  if (splits <= 1 || longest <= 0 || tile <= 0) return "";
  const std::int64_t per = (longest + splits - 1) / splits;
  const std::int64_t chunk = (per + tile - 1) / tile * tile;
  const std::int64_t used = (longest + chunk - 1) / chunk;
  if (used >= splits) return "";
  return "; a split is ceil(seq_len / " + std::to_string(splits) + ") keys rounded up to whole " +
         std::to_string(tile) + "-token tiles, so the longest sequence (" +
         std::to_string(longest) + " tokens) has keys in " + std::to_string(used) + " of the " +
         std::to_string(splits) + " splits and the other " + std::to_string(splits - used) +
         " are empty";
}
}  // namespace

int tiled_max_rows(int kp) {
  // Rows of fp32 accumulators per warp x head-dim pairs per lane stay near 64 registers: head
  // 264..512 (kp 5..8, one kp-8 instance) hold 16 rows.
  return kp <= 2 ? 64 : kp <= 4 ? 32 : 16;
}

void choose_rows(const ProblemDesc& problem, TiledConfig* c) {
  const int d = problem.head_size;
  const int gqa = std::max(1, problem.gqa_ratio());
  c->kp = std::max(1, (d + 63) / 64);
  const bool decode_only = problem.batch.max_query_len <= 1;
  const int big = tiled_max_rows(c->kp);
  c->mmax = (decode_only && gqa <= 16) ? 16 : big;
  c->heads_per_cta = std::min(gqa, c->mmax);
  c->head_groups = (gqa + c->heads_per_cta - 1) / c->heads_per_cta;
  c->q_tokens = c->mmax / c->heads_per_cta;
  if (decode_only) c->q_tokens = 1;
  c->q_tokens = std::max(1, std::min(c->q_tokens, std::max(1, problem.batch.max_query_len)));
  c->rows = c->q_tokens * c->heads_per_cta;
}

TiledSmem tiled_smem(int head_size, int es, KVLayout layout, int mmax, int tile_tokens) {
  TiledSmem s;
  const int t4 = round_up(std::max(1, tile_tokens), 4);
  s.q_stride = round_up(head_size, 16);
  const int row16 = round_up(head_size * es, 16);
  // An odd number of 16-byte units per key row: the 8 threads of one 16-byte shared-memory
  // phase (consecutive tokens, same column) then hit 8 distinct bank groups.
  s.k_row_bytes = ((row16 / 16) % 2 == 0) ? row16 + 16 : row16;
  // The split layout's value is loaded with element-wise transposing stores (consecutive
  // threads = consecutive tokens): pad by one word so that they spread over the banks, keeping
  // the alignment of an element pair (the PV step reads pairs).
  s.v_row_bytes = layout == KVLayout::kSplit ? row16 + (es == 4 ? 8 : 4) : row16;
  int off = 0;
  s.off_q = off;
  off += mmax * s.q_stride * 4;
  off = round_up(off, 16);
  s.off_k = off;
  off += 2 * t4 * s.k_row_bytes;
  off = round_up(off, 16);
  s.off_v = off;
  off += 2 * t4 * s.v_row_bytes;
  off = round_up(off, 16);
  s.off_s = off;
  off += mmax * t4 * 4;
  off = round_up(off, 16);
  s.off_rows = off;
  off += mmax * 4 * 6;  // token, head, q_pos, slope, running max, running sum
  s.total = round_up(off, 16);
  return s;
}

std::int64_t count_row_tiles(const std::int32_t* qsl, std::int64_t stride, int num_seqs,
                             int rows_per_tile, int min_query_len, int rows_per_token,
                             int max_query_len) {
  std::int64_t tiles = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const std::int64_t ql =
        static_cast<std::int64_t>(qsl[(s + 1) * stride]) - static_cast<std::int64_t>(qsl[s * stride]);
    if (ql > 0 && ql >= min_query_len && ql <= max_query_len)
      tiles += (ql * rows_per_token + rows_per_tile - 1) / rows_per_tile;
  }
  return tiles;
}

TiledWorkspace tiled_workspace(int num_seqs, std::int64_t num_tokens, int num_heads,
                               int head_size, int num_splits) {
  TiledWorkspace w;
  std::size_t off = 0;
  w.off_tile_start = off;
  off = align256(off + (static_cast<std::size_t>(num_seqs) + 1) * 4);
  if (num_splits > 1) {
    const std::size_t rows = static_cast<std::size_t>(num_splits) *
                             static_cast<std::size_t>(num_tokens) *
                             static_cast<std::size_t>(num_heads);
    w.off_part_lse = off;
    off = align256(off + rows * 4);
    w.off_part_out = off;
    off = align256(off + rows * static_cast<std::size_t>(head_size) * 4);
  }
  w.total = off;
  return w;
}

Result<TiledConfig> make_tiled_config(const ProblemDesc& problem, int tile_tokens,
                                      int num_splits, std::int64_t max_shared_memory) {
  TiledConfig c;
  choose_rows(problem, &c);
  c.tile_tokens = std::max(1, std::min(tile_tokens, kMaxTileTokens));
  c.tile_rows = round_up(c.tile_tokens, 4);
  c.num_splits = std::max(1, std::min(num_splits, kMaxSplits));
  c.smem = tiled_smem(problem.head_size, static_cast<int>(dtype_size(problem.cache_dtype)),
                      problem.layout, c.mmax, c.tile_tokens);
  if (c.smem.total > max_shared_memory)
    return Status(StatusCode::kUnsupported,
                  "cuda tiled attention: " + std::to_string(c.smem.total) +
                      " bytes of shared memory for tile_tokens " + std::to_string(c.tile_tokens) +
                      ", head_size " + std::to_string(problem.head_size) +
                      "; the device allows " + std::to_string(max_shared_memory));
  return c;
}

int tiled_skew_split_tokens(const ProblemDesc& problem, const DeviceInfo& info,
                            const PlanOptions& options, int head_groups, int tile_tokens) {
  const BatchSummary& b = problem.batch;
  if (options.num_splits > 0 || options.tile_tokens > 0 || options.batch_invariant) return 0;
  if (b.num_prefill_seqs > 0 || b.num_decode_seqs == 0) return 0;
  const int tile = std::max(1, tile_tokens);
  const std::int64_t slots = 2 * std::int64_t{std::max(1, info.num_units)};
  const std::int64_t work = b.total_kv_tokens * std::max(1, problem.num_kv_heads) *
                            std::max(1, head_groups);
  std::int64_t share = (work + slots - 1) / slots;
  share = std::max<std::int64_t>(share, 4 * tile);
  share = (share + tile - 1) / tile * tile;
  if (b.max_seq_len <= 2 * share || share > (std::int64_t{1} << 30)) return 0;
  return static_cast<int>(share);
}

void apply_split_cut(const ProblemDesc& problem, const DeviceInfo& info,
                     const PlanOptions& options, TiledConfig* c) {
  c->tile_grid = options.batch_invariant;
  c->split_tokens = 0;
  if (options.batch_invariant && options.num_splits == 0) {
    c->split_tokens = kInvariantSplitTokens;
  } else if (c->num_splits > 1) {
    c->split_tokens =
        tiled_skew_split_tokens(problem, info, options, c->head_groups, c->tile_tokens);
  }
}

Result<KernelChoice> tiled_choose(const ProblemDesc& problem, const DeviceInfo& info,
                                  const PlanOptions& options, const char* splits_why) {
  if (problem.device.type != DeviceType::kCUDA)
    return Status(StatusCode::kInvalidArgument, "cuda::choose_config: not a CUDA problem");
  if (problem.num_kv_heads <= 0 || problem.num_heads <= 0 ||
      problem.num_heads % problem.num_kv_heads != 0)
    return Status(StatusCode::kInvalidArgument,
                  "num_heads = " + std::to_string(problem.num_heads) +
                      " must be a positive multiple of num_kv_heads = " +
                      std::to_string(problem.num_kv_heads));
  if (problem.head_size < 8 || problem.head_size > 512 || problem.head_size % 8 != 0)
    return Status(StatusCode::kUnsupported,
                  "head_size = " + std::to_string(problem.head_size) +
                      ": the CUDA kernel supports the multiples of 8 from 8 to 512");
  const bool q_ok = problem.q_dtype == DType::kFloat32 || problem.q_dtype == DType::kFloat16 ||
                    problem.q_dtype == DType::kBFloat16;
  const bool kv_ok = problem.cache_dtype == problem.q_dtype || is_fp8(problem.cache_dtype);
  if (!q_ok || !kv_ok)
    return Status(StatusCode::kUnsupported,
                  std::string("query dtype ") + to_string(problem.q_dtype) + " with cache dtype " +
                      to_string(problem.cache_dtype) + ": the CUDA kernel needs fp32/fp16/bf16 "
                      "queries and a cache of the same dtype or fp8");
  const std::int64_t limit =
      info.max_shared_memory_per_block > 0 ? info.max_shared_memory_per_block : 48 * 1024;
  const int es = static_cast<int>(dtype_size(problem.cache_dtype));

  TiledConfig rows;
  choose_rows(problem, &rows);
  std::ostringstream why;

  // ---- tile size: from the shared-memory limit, never from block_size
  int tile = kMaxTileTokens;
  if (options.tile_tokens > 0) {
    tile = std::min(options.tile_tokens, kMaxTileTokens);
    why << "tile " << tile << " tokens (forced by options"
        << (options.tile_tokens > kMaxTileTokens ? ", clamped to the kernel maximum 64" : "")
        << ")";
  } else if (options.batch_invariant) {
    why << "tile " << tile << " tokens (batch-invariant: not fitted to the batch's lengths)";
  } else {
    const int longest = problem.batch.max_seq_len;
    if (longest > 0 && longest < tile) tile = std::max(8, round_up(longest, 8));
    why << "tile " << tile << " tokens";
  }
  const int wanted = tile;
  // Batch-invariant: the tile must fit the largest row count of this head size (a prefill
  // batch's), so that a decode row gets the same tile alone or next to prefill chunks.
  const int fit_rows = options.batch_invariant ? tiled_max_rows(rows.kp) : rows.mmax;
  while (tiled_smem(problem.head_size, es, problem.layout, fit_rows, tile).total > limit &&
         tile > 1)
    tile = std::max(1, tile / 2);
  if (tile != wanted)
    why << " (reduced from " << wanted << " to fit " << limit << " bytes of shared memory)";
  auto cfg0 = make_tiled_config(problem, tile, 1, limit);
  if (!cfg0.ok()) return cfg0.status();
  why << ", independent of block_size " << problem.block_size << "; " << rows.rows
      << " rows per CTA (" << rows.q_tokens << " query token(s) x " << rows.heads_per_cta
      << " of " << problem.gqa_ratio() << " GQA heads" << (rows.head_groups > 1 ? ", " : "")
      << (rows.head_groups > 1 ? std::to_string(rows.head_groups) + " head groups" : "") << ")";

  // ---- KV splits: only when the batch has too few CTAs to fill the device
  int splits = 1;
  const auto& b = problem.batch;
  if (options.num_splits > 0 && splits_why != nullptr) {
    splits = 1;
    why << "; 1 KV split (" << splits_why << ")";
  } else if (options.num_splits > 0) {
    splits = std::min(options.num_splits, kMaxSplits);
    why << "; " << splits << " KV split(s) (forced by options"
        << (options.num_splits > kMaxSplits
                ? ": num_splits " + std::to_string(options.num_splits) +
                      ", clamped to the kernel's maximum of " + std::to_string(kMaxSplits)
                : std::string())
        << forced_splits_used(b.max_seq_len, splits, tile)
        << (options.batch_invariant ? "; batch-invariant: ceil(seq_len / splits) per sequence"
                                    : "")
        << ")";
  } else if (options.batch_invariant) {
    const std::int64_t want =
        (std::int64_t{b.max_seq_len} + kInvariantSplitTokens - 1) / kInvariantSplitTokens;
    std::int64_t s = std::clamp<std::int64_t>(want, 1, kInvariantMaxSplits);
    const std::int64_t planned = s;
    while (s > 1 && tiled_workspace(b.num_seqs, b.num_tokens, problem.num_heads,
                                    problem.head_size, static_cast<int>(s))
                            .total > static_cast<std::size_t>(kMaxAutoSplitWorkspace))
      --s;
    splits = static_cast<int>(s);
    why << "; batch-invariant split cut: " << kInvariantSplitTokens
        << "-token splits (doubled until at most " << splits
        << " cover a sequence), fixed by each sequence's own length; " << splits
        << " split(s) in the grid";
    if (s < planned)
      why << " (reduced from " << planned << " to keep the workspace under "
          << (kMaxAutoSplitWorkspace >> 20) << " MiB: sequences longer than " << splits << " x "
          << kInvariantSplitTokens << " tokens are then cut as in any batch of this size)";
  } else if (const int skew = tiled_skew_split_tokens(problem, info, options, rows.head_groups, tile);
             skew > 0) {
    // A skewed decode batch: fixed-size splits of a balanced CTA's share, so that the long
    // sequences get many and the short ones one (the uniform count below would give every
    // sequence the same number, none when the CTAs already fill the device).
    std::int64_t s = std::min<std::int64_t>((b.max_seq_len + skew - 1) / skew, kMaxSplits);
    while (s > 1 && tiled_workspace(b.num_seqs, b.num_tokens, problem.num_heads,
                                    problem.head_size, static_cast<int>(s))
                            .total > static_cast<std::size_t>(kMaxAutoSplitWorkspace))
      --s;
    splits = static_cast<int>(std::max<std::int64_t>(1, s));
    if (splits > 1)
      why << "; skewed batch (longest sequence " << b.max_seq_len << " tokens, a balanced CTA's "
          << "share " << skew << "): splits of " << skew << " tokens (doubled where " << splits
          << " do not cover a sequence), up to " << splits
          << " per sequence, one for the short ones, merged by log-sum-exp";
    else
      why << "; no KV split";
  } else {
    const std::int64_t single = b.num_decode_seqs + b.num_prefill_seqs;
    const std::int64_t extra = std::max<std::int64_t>(0, b.num_tokens - single) / rows.q_tokens;
    const std::int64_t ctas =
        std::max<std::int64_t>(1, (single + extra) * problem.num_kv_heads * rows.head_groups);
    const int sms = std::max(1, info.num_units);
    const int min_keys_per_split = 4 * tile;
    if (ctas < sms && b.max_seq_len >= 2 * min_keys_per_split) {
      std::int64_t s = (2 * sms + ctas - 1) / ctas;
      s = std::min<std::int64_t>(s, b.max_seq_len / min_keys_per_split);
      s = std::min<std::int64_t>(s, kMaxSplits);
      while (s > 1 && tiled_workspace(b.num_seqs, b.num_tokens, problem.num_heads,
                                      problem.head_size, static_cast<int>(s))
                              .total > static_cast<std::size_t>(kMaxAutoSplitWorkspace))
        --s;
      splits = static_cast<int>(std::max<std::int64_t>(1, s));
    }
    if (splits > 1)
      why << "; " << splits << " KV splits (" << ctas << " CTAs for " << sms
          << " SMs) merged by log-sum-exp";
    else
      why << "; no KV split";
  }
  auto cfg = make_tiled_config(problem, tile, splits, limit);
  if (!cfg.ok()) return cfg.status();

  KernelChoice c;
  c.kernel = KernelId::kCudaTiled;
  c.access = problem.access;
  c.tile_tokens = cfg->tile_tokens;
  c.num_splits = cfg->num_splits;
  c.shared_memory_bytes = cfg->smem.total;
  c.threads_per_block = kTiledThreads;
  why << "; " << c.shared_memory_bytes << " bytes of shared memory, " << c.threads_per_block
      << " threads; " << (problem.access == CacheAccess::kNative ? "dense" : "strided")
      << " cache addressing from the tensors' strides";
  c.reason = "CUDA tiled online softmax: " + why.str();
  return c;
}

}  // namespace pagedattn::cuda

#ifndef PAGEDATTN_WITH_CUDA
// Builds without CUDA: the test-support entry points report that no device exists.
namespace pagedattn::cuda::testsupport {
namespace {
Status no_cuda() {
  return Status(StatusCode::kDeviceUnavailable, "this pagedattn build has no CUDA backend");
}
}  // namespace
Result<void*> stream_create() { return no_cuda(); }
void stream_destroy(void*) {}
Status stream_synchronize(void*) { return no_cuda(); }
Status memset_device(void*, int, std::size_t) { return no_cuda(); }
Status capture_begin(void*, bool) { return no_cuda(); }
Result<void*> capture_end(void*, int*) { return no_cuda(); }
Status graph_launch(void*, void*) { return no_cuda(); }
void graph_destroy(void*) {}
int device_count() { return 0; }
int current_device() { return -1; }
Status set_device(int) { return no_cuda(); }
}  // namespace pagedattn::cuda::testsupport
#endif
