// The context-parallel decode step (include/pagedattn/context_parallel.h): plan the local
// attention over this rank's shard, run it into the rank's slot of the exchange buffer,
// all-gather the slots, merge the W partial states by log-sum-exp.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "pagedattn/context_parallel.h"
#include "pagedattn/kv_cache.h"
#include "src/core/numeric.h"
#include "src/cuda/backend/cuda_backend.h"
#include "src/dist/cp_merge.h"

namespace pagedattn::dist {
namespace {

using detail::align_up;
using detail::SlotLayout;

Status invalid(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
Status unsupported(std::string message) {
  return Status(StatusCode::kUnsupported, std::move(message));
}

std::int32_t read_i32(const TensorView& v, std::int64_t i, std::int64_t j = 0) {
  const std::int64_t off = i * v.strides[0] + (v.ndim > 1 ? j * v.strides[1] : 0);
  return static_cast<const std::int32_t*>(v.data)[off];
}

bool host_i32(const TensorView& v, int ndim) {
  return v.ndim == ndim && v.dtype == DType::kInt32 && v.device.type == DeviceType::kCPU &&
         v.data != nullptr;
}

Status check_outputs(const AttentionArgs& args, std::int64_t s, std::int64_t h, std::int64_t d,
                     const Device& dev) {
  const TensorView& out = args.out;
  if (out.ndim != 3 || out.shape[0] != s || out.shape[1] != h || out.shape[2] != d ||
      out.dtype != args.query.dtype || out.device != dev || out.strides[2] != 1)
    return invalid("out " + out.describe() + ": expected [" + std::to_string(s) + ", " +
                   std::to_string(h) + ", " + std::to_string(d) + "] " +
                   to_string(args.query.dtype) + " on " + to_string(dev) +
                   " with a contiguous last dimension");
  const TensorView& lse = args.lse;
  if (lse.defined() && (lse.ndim != 2 || lse.shape[0] != s || lse.shape[1] != h ||
                        lse.dtype != DType::kFloat32 || lse.device != dev))
    return invalid("lse " + lse.describe() + ": expected [" + std::to_string(s) + ", " +
                   std::to_string(h) + "] fp32 on " + to_string(dev));
  const TensorView& sinks = args.params.sinks;
  if (sinks.defined() && (sinks.ndim != 1 || sinks.shape[0] != h ||
                          sinks.dtype != DType::kFloat32 || sinks.device != dev))
    return invalid("params.sinks " + sinks.describe() + ": expected [" + std::to_string(h) +
                   "] fp32 on " + to_string(dev));
  return Status::Ok();
}

// The local call: this rank's planned lengths, outputs in its slot, no sink (the merge adds
// it once).
AttentionArgs local_call(const AttentionArgs& args, const SlotLayout& l, const Device& dev,
                         void* adjusted, unsigned char* slot) {
  AttentionArgs local = args;
  local.seq_lens = TensorView::contiguous(adjusted, DType::kInt32, {l.num_seqs}, dev);
  local.out = TensorView::contiguous(slot, l.dtype, {l.num_seqs, l.num_heads, l.head_size}, dev);
  local.lse = TensorView::contiguous(slot ? slot + l.lse_offset : nullptr, DType::kFloat32,
                                     {l.num_seqs, l.num_heads}, dev);
  local.params.sinks = TensorView{};
  return local;
}

void cpu_merge(const unsigned char* gathered, const SlotLayout& l, const TensorView& sinks,
               const TensorView& out, const TensorView& lse) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> w(static_cast<std::size_t>(l.world));
  std::vector<char> empty(static_cast<std::size_t>(l.world));
  for (std::int64_t t = 0; t < l.num_seqs; ++t) {
    for (std::int64_t h = 0; h < l.num_heads; ++h) {
      const std::int64_t row = t * l.num_heads + h;
      float m = neg_inf;
      bool nan = false;
      for (int r = 0; r < l.world; ++r) {
        const unsigned char* slot = gathered + r * l.slot_bytes;
        if (reinterpret_cast<const std::int32_t*>(slot + l.lens_offset)[t] == 0) continue;
        const float x = reinterpret_cast<const float*>(slot + l.lse_offset)[row];
        nan |= x != x;
        if (x > m) m = x;
      }
      const float sink = sinks.defined() ? static_cast<const float*>(sinks.data)[h * sinks.strides[0]]
                                         : neg_inf;
      if (sink > m) m = sink;
      const std::int64_t out_base = t * out.strides[0] + h * out.strides[1];
      float row_lse = 0.0f;
      if (nan || m == neg_inf) {
        // A NaN state poisons the row (as the oracle's NaN query); no key anywhere gives the
        // neutral state.
        const float v = nan ? NAN : 0.0f;
        for (std::int64_t d = 0; d < l.head_size; ++d)
          numeric::store_from_float(out.data, out.dtype, out_base + d, v);
        row_lse = nan ? NAN : neg_inf;
      } else {
        // The same operations in the same order as the CUDA merge (cp_kernels.cu).
        float den = sink == neg_inf ? 0.0f : std::exp(sink - m);
        for (int r = 0; r < l.world; ++r) {
          const unsigned char* slot = gathered + r * l.slot_bytes;
          empty[r] = reinterpret_cast<const std::int32_t*>(slot + l.lens_offset)[t] == 0;
          w[r] = empty[r] ? 0.0f
                          : std::exp(reinterpret_cast<const float*>(slot + l.lse_offset)[row] - m);
          if (!empty[r]) den += w[r];
        }
        const float inv = 1.0f / den;
        for (std::int64_t d = 0; d < l.head_size; ++d) {
          float acc = 0.0f;
          for (int r = 0; r < l.world; ++r) {
            if (empty[r]) continue;
            acc += w[r] * numeric::load_as_float(gathered + r * l.slot_bytes, l.dtype,
                                                 row * l.head_size + d);
          }
          numeric::store_from_float(out.data, out.dtype, out_base + d, acc * inv);
        }
        row_lse = m + std::log(den);
      }
      if (lse.defined())
        static_cast<float*>(lse.data)[t * lse.strides[0] + h * lse.strides[1]] = row_lse;
    }
  }
}

}  // namespace

Result<ContextParallelPlan> plan_context_parallel_decode(const Communicator& comm,
                                                         const AttentionArgs& args,
                                                         const HostMetadata& host,
                                                         const PlanOptions& options) {
  const Device dev = comm.device();
  if (args.params.sliding_window != 0)
    return unsupported("context parallel decode does not support sliding_window (" +
                       std::to_string(args.params.sliding_window) +
                       "): a window depends on absolute key positions, which a shard's "
                       "local positions are not");
  if (args.params.alibi_slopes.defined())
    return unsupported("context parallel decode does not support alibi_slopes: ALiBi depends "
                       "on absolute key positions, which a shard's local positions are not");
  if (args.query.ndim != 3)
    return invalid("query " + args.query.describe() + ": expected [num_seqs, num_heads, head_size]");
  if (args.query.device != dev)
    return invalid("query is on " + to_string(args.query.device) +
                   " but the communicator exchanges buffers on " + to_string(dev));
  if (!host_i32(host.seq_lens, 1) || !host_i32(host.block_table, 2) ||
      !host_i32(host.query_start_loc, 1))
    return invalid("local_host: expected CPU int32 block_table [num_seqs, max_blocks], "
                   "seq_lens [num_seqs] and query_start_loc [num_seqs + 1] with data");
  const std::int64_t s = host.seq_lens.shape[0];
  const std::int64_t h = args.query.shape[1], d = args.query.shape[2];
  if (args.query.shape[0] != s)
    return unsupported("query has " + std::to_string(args.query.shape[0]) + " rows for " +
                       std::to_string(s) +
                       " sequences: context parallel decode runs one query token per sequence");
  if (host.query_start_loc.shape[0] != s + 1)
    return invalid("query_start_loc has " + std::to_string(host.query_start_loc.shape[0]) +
                   " entries: expected num_seqs + 1 = " + std::to_string(s + 1));
  for (std::int64_t i = 0; i <= s; ++i) {
    if (read_i32(host.query_start_loc, i) != i)
      return unsupported("query_start_loc[" + std::to_string(i) + "] = " +
                         std::to_string(read_i32(host.query_start_loc, i)) +
                         ": context parallel decode runs one query token per sequence "
                         "(query_start_loc = [0, 1, ..., num_seqs])");
  }
  PAGEDATTN_RETURN_IF_ERROR(check_outputs(args, s, h, d, dev));
  auto geometry = describe_kv_cache(args.cache);
  if (!geometry.ok()) return geometry.status();
  if (host.block_table.shape[1] < 1)
    return invalid("block_table has no columns: expected max_blocks >= 1");

  std::vector<std::int32_t> adjusted(static_cast<std::size_t>(s));
  for (std::int64_t i = 0; i < s; ++i) {
    const std::int32_t len = read_i32(host.seq_lens, i);
    if (len < 0)
      return invalid("seq_lens[" + std::to_string(i) + "] = " + std::to_string(len) +
                     ": expected >= 0 (0 = an empty shard)");
    if (len == 0) {
      const std::int32_t id = read_i32(host.block_table, i, 0);
      if (id < 0 || id >= geometry->num_blocks)
        return invalid("block_table[" + std::to_string(i) + "][0] = " + std::to_string(id) +
                       " for an empty shard (seq_lens[" + std::to_string(i) +
                       "] = 0): expected a valid block id (< " +
                       std::to_string(geometry->num_blocks) +
                       "), which the step reads and discards; shard_block_table writes 0");
    }
    adjusted[static_cast<std::size_t>(i)] = len > 0 ? len : 1;
  }

  const SlotLayout layout = SlotLayout::make(s, h, d, args.query.dtype, comm.world_size());
  HostMetadata local_host = host;
  local_host.seq_lens = TensorView::contiguous(adjusted.data(), DType::kInt32, {s});
  auto local = plan_attention(local_call(args, layout, dev, nullptr, nullptr), local_host, options);
  if (!local.ok()) return local.status();

  ContextParallelPlan plan;
  plan.local = *local;
  plan.num_seqs = s;
  plan.num_heads = h;
  plan.head_size = d;
  plan.dtype = args.query.dtype;
  plan.world_size = comm.world_size();
  plan.rank = comm.rank();
  plan.workspace_bytes = align_up(plan.local.workspace_bytes()) +
                         align_up(static_cast<std::size_t>(s) * 4) +
                         static_cast<std::size_t>(comm.world_size()) * layout.slot_bytes;
  return plan;
}

Status run_context_parallel_decode(const ContextParallelPlan& plan, Communicator& comm,
                                   const AttentionArgs& args, void* workspace,
                                   std::size_t workspace_bytes, Stream stream) {
  if (comm.world_size() != plan.world_size || comm.rank() != plan.rank)
    return invalid("communicator is rank " + std::to_string(comm.rank()) + " of " +
                   std::to_string(comm.world_size()) + " but the plan was made for rank " +
                   std::to_string(plan.rank) + " of " + std::to_string(plan.world_size));
  if (workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes > 0 && workspace == nullptr))
    return invalid("workspace of " + std::to_string(workspace_bytes) + " bytes: the plan needs " +
                   std::to_string(plan.workspace_bytes));
  if (reinterpret_cast<std::uintptr_t>(workspace) % kWorkspaceAlignment != 0)
    return invalid("workspace address is not a multiple of " +
                   std::to_string(kWorkspaceAlignment) + " bytes");
  const Device dev = comm.device();
  if (args.query.device != dev || args.query.ndim != 3 || args.query.shape[0] != plan.num_seqs ||
      args.query.shape[1] != plan.num_heads || args.query.shape[2] != plan.head_size ||
      args.query.dtype != plan.dtype)
    return invalid("query " + args.query.describe() + " differs from the planned [" +
                   std::to_string(plan.num_seqs) + ", " + std::to_string(plan.num_heads) + ", " +
                   std::to_string(plan.head_size) + "] " + to_string(plan.dtype) + " on " +
                   to_string(dev));
  if (args.seq_lens.ndim != 1 || args.seq_lens.shape[0] != plan.num_seqs ||
      args.seq_lens.dtype != DType::kInt32 || args.seq_lens.device != dev)
    return invalid("seq_lens " + args.seq_lens.describe() + ": expected [" +
                   std::to_string(plan.num_seqs) + "] int32 on " + to_string(dev));
  PAGEDATTN_RETURN_IF_ERROR(
      check_outputs(args, plan.num_seqs, plan.num_heads, plan.head_size, dev));

  const SlotLayout layout =
      SlotLayout::make(plan.num_seqs, plan.num_heads, plan.head_size, plan.dtype, plan.world_size);
  unsigned char* base = static_cast<unsigned char*>(workspace);
  void* attn_ws = plan.local.workspace_bytes() > 0 ? base : nullptr;
  auto* adjusted = reinterpret_cast<std::int32_t*>(base + align_up(plan.local.workspace_bytes()));
  unsigned char* gathered = reinterpret_cast<unsigned char*>(adjusted) +
                            align_up(static_cast<std::size_t>(plan.num_seqs) * 4);
  unsigned char* mine = gathered + static_cast<std::size_t>(plan.rank) * layout.slot_bytes;
  auto* lens = reinterpret_cast<std::int32_t*>(mine + layout.lens_offset);

  const bool cuda = dev.type == DeviceType::kCUDA;
  if (cuda) {
    PAGEDATTN_RETURN_IF_ERROR(detail::cuda_prepare(args.seq_lens, adjusted, lens, stream));
  } else {
    for (std::int64_t i = 0; i < plan.num_seqs; ++i) {
      const std::int32_t len = read_i32(args.seq_lens, i);
      lens[i] = len;
      adjusted[i] = len > 0 ? len : 1;
    }
  }
  const AttentionArgs local = local_call(args, layout, dev, adjusted, mine);
  PAGEDATTN_RETURN_IF_ERROR(
      run_attention(plan.local, local, attn_ws, plan.local.workspace_bytes(), stream));
  PAGEDATTN_RETURN_IF_ERROR(comm.all_gather(mine, gathered, layout.slot_bytes, stream));
  if (cuda) return detail::cuda_merge(gathered, layout, args.params.sinks, args.out, args.lse, stream);
  cpu_merge(gathered, layout, args.params.sinks, args.out, args.lse);
  return Status::Ok();
}

Status context_parallel_decode(Communicator& comm, const AttentionArgs& args,
                               const HostMetadata& host, Stream stream,
                               const PlanOptions& options) {
  // Planning errors come back before the collective; the ranks that planned fine still enter
  // it, so a caller must not let one rank fail alone (the same holds for any collective).
  auto plan = plan_context_parallel_decode(comm, args, host, options);
  if (!plan.ok()) return plan.status();
  const std::size_t bytes = plan->workspace_bytes;
  const Device dev = comm.device();
  if (dev.type == DeviceType::kCUDA) {
    void* ws = nullptr;
    if (bytes > 0) {
      auto mem = cuda::device_malloc(bytes, dev.index);
      if (!mem.ok()) return mem.status();
      ws = *mem;
    }
    Status st = run_context_parallel_decode(*plan, comm, args, ws, bytes, stream);
    Status sync = cuda::device_synchronize(dev.index);
    if (ws) cuda::device_free(ws);
    return st.ok() ? sync : st;
  }
  // std::vector's memory is aligned for max_align_t (16), which kWorkspaceAlignment asks for.
  std::vector<std::max_align_t> ws((bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
  return run_context_parallel_decode(*plan, comm, args, ws.data(), bytes, stream);
}

}  // namespace pagedattn::dist
