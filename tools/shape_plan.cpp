#include "tools/shape_plan.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#if defined(__unix__)
#include <unistd.h>
#endif

namespace pagedattn::cli {

namespace {

double physical_memory_bytes() {
#if defined(__unix__)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) return static_cast<double>(pages) * static_cast<double>(page);
#endif
  return 0.0;  // unknown: no bound
}

/// Bytes of the tensors `c` describes: query and output (and LSE), and K and V of a cache of
/// `num_blocks` blocks with their page padding. In double: the point is to compare absurd
/// sizes, which overflow int64.
double tensor_bytes(const testing::CaseConfig& c, std::int64_t tokens, std::int64_t num_blocks,
                    bool with_lse) {
  const double rows = static_cast<double>(tokens) * c.num_heads;
  double bytes = 2.0 * rows * c.head_size * static_cast<double>(dtype_size(c.dtype));
  if (with_lse) bytes += rows * 4.0;
  const double block_elems = static_cast<double>(c.block_size) * c.num_kv_heads * c.head_size +
                             static_cast<double>(std::max<std::int64_t>(0, c.page_pad));
  bytes += 2.0 * static_cast<double>(num_blocks) * block_elems *
           static_cast<double>(dtype_size(c.kv_dtype));
  return bytes;
}

}  // namespace

Result<ShapePlan> plan_on_shapes(const testing::CaseConfig& c, bool with_lse, bool check_memory) {
  const auto num_seqs = static_cast<std::int64_t>(c.seq_lens.size());
  if (num_seqs >= INT32_MAX)
    return Status(StatusCode::kInvalidArgument, "--seq-lens: more than 2^31 - 2 sequences");
  std::vector<std::int32_t> seq_lens(c.seq_lens.begin(), c.seq_lens.end());
  std::vector<std::int32_t> starts(static_cast<std::size_t>(num_seqs) + 1, 0);
  std::int64_t width = 1, num_blocks = 0, tokens = 0;
  for (std::size_t s = 0; s < c.seq_lens.size(); ++s) {
    tokens += c.query_lens[s];
    if (tokens > INT32_MAX)
      return Status(StatusCode::kInvalidArgument,
                    "--query-lens: " + std::to_string(tokens) +
                        " query tokens in all, more than query_start_loc (int32) holds");
    starts[s + 1] = static_cast<std::int32_t>(tokens);
    // 64-bit: seq_len + block_size - 1 may pass INT32_MAX.
    const std::int64_t nb = (std::int64_t{c.seq_lens[s]} + c.block_size - 1) / c.block_size;
    width = std::max(width, nb);
    num_blocks += nb;
  }
  num_blocks = std::max<std::int64_t>(num_blocks, 1);

  ShapePlan out;
  auto cache = make_kv_cache(testing::kv_cache_spec(c, num_blocks), nullptr, nullptr, c.device,
                             c.k_scale > 0 ? c.k_scale : 1.0f, c.v_scale > 0 ? c.v_scale : 1.0f);
  if (!cache.ok()) return cache.status();
  out.cache = *cache;

  // The cache's own checks (head size, layout) come first. A configuration whose tensors
  // could not exist on this machine is rejected before the planner, whose own work lists
  // grow with the token count, is asked about it.
  const double physical = physical_memory_bytes();
  const double need = tensor_bytes(c, tokens, num_blocks, with_lse);
  if (check_memory && physical > 0 && need > physical)
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the configuration's query, output and KV cache ({} blocks) would "
                              "need {:.1f} GiB, more than this machine's {:.1f} GiB of memory: "
                              "reduce --seq-lens / --query-lens, --num-heads, --num-kv-heads, "
                              "--head-size or --page-pad",
                              num_blocks, need / 1073741824.0, physical / 1073741824.0));

  const Device d = c.device;
  const std::int64_t T = tokens;
  AttentionArgs args;
  args.query = TensorView::contiguous(nullptr, c.dtype, {T, c.num_heads, c.head_size}, d);
  args.out = args.query;
  if (with_lse) args.lse = TensorView::contiguous(nullptr, DType::kFloat32, {T, c.num_heads}, d);
  args.cache = out.cache;
  args.block_table = TensorView::contiguous(nullptr, DType::kInt32, {num_seqs, width}, d);
  args.seq_lens = TensorView::contiguous(nullptr, DType::kInt32, {num_seqs}, d);
  args.query_start_loc = TensorView::contiguous(nullptr, DType::kInt32, {num_seqs + 1}, d);
  args.params.scale = testing::case_scale(c);
  args.params.softcap = c.softcap;
  args.params.sliding_window = c.sliding_window;
  if (c.alibi)
    args.params.alibi_slopes = TensorView::contiguous(nullptr, DType::kFloat32, {c.num_heads}, d);
  if (c.sinks)
    args.params.sinks = TensorView::contiguous(nullptr, DType::kFloat32, {c.num_heads}, d);

  std::int32_t block_zero = 0;
  HostMetadata host;
  host.block_table =
      TensorView::strided(&block_zero, DType::kInt32, {num_seqs, width}, {0, 0});
  host.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {num_seqs});
  host.query_start_loc = TensorView::contiguous(starts.data(), DType::kInt32, {num_seqs + 1});
  auto plan = plan_attention(args, host, c.plan);
  if (!plan.ok()) return plan.status();
  out.plan = *plan;
  return out;
}

}  // namespace pagedattn::cli
