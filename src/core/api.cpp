// Public entry points: validate everything first (so a failing call changes nothing), then
// route to the backend of the tensors' device.
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "pagedattn/attention.h"
#include "pagedattn/select.h"
#include "pagedattn/write_kv.h"
#include "src/core/internal.h"
#include "src/core/validate.h"
#include "src/cpu/cpu_backend.h"
#include "src/cuda/backend/cuda_backend.h"

namespace pagedattn {

using validate::invalid;

float default_scale(int head_size) {
  return head_size > 0 ? 1.0f / std::sqrt(static_cast<float>(head_size)) : 0.0f;
}

HostMetadata HostMetadata::from_args(const AttentionArgs& args) {
  return HostMetadata{args.block_table, args.seq_lens, args.query_start_loc};
}

namespace {
const AttentionPlan::State& require_state(const AttentionPlan::State* s) {
  static const AttentionPlan::State empty{};
  return s ? *s : empty;
}

/// The parts of a ProblemDesc that follow from the argument shapes alone.
ProblemDesc problem_from_args(const AttentionArgs& args, const KVCacheGeometry& g) {
  ProblemDesc p;
  p.device = args.query.device;
  p.num_heads = static_cast<int>(args.query.shape[1]);
  p.num_kv_heads = g.num_kv_heads;
  p.head_size = g.head_size;
  p.q_dtype = args.query.dtype;
  p.cache_dtype = g.dtype;
  p.layout = args.cache.layout;
  p.block_size = g.block_size;
  p.num_blocks = g.num_blocks;
  p.access = decide_cache_access(args.cache).access;
  p.softcap = args.params.softcap;
  p.sliding_window = args.params.sliding_window;
  p.alibi = args.params.alibi_slopes.defined();
  p.sinks = args.params.sinks.defined();
  p.lse = args.lse.defined();
  return p;
}

/// run() must get the batch shape its plan was made for: the kernel, tile and workspace were
/// sized for it.
Status check_matches_plan(const ProblemDesc& planned, const ProblemDesc& now,
                          std::int64_t num_tokens, std::int64_t num_seqs,
                          std::int64_t block_table_width, std::int64_t planned_width) {
  auto mismatch = [](const std::string& what) {
    return invalid("run_attention: " + what + " differs from the plan (plan again for a new "
                   "batch shape)");
  };
  if (planned.device != now.device) return mismatch("device");
  if (planned.num_heads != now.num_heads) return mismatch("num_heads");
  if (planned.num_kv_heads != now.num_kv_heads) return mismatch("num_kv_heads");
  if (planned.head_size != now.head_size) return mismatch("head_size");
  if (planned.q_dtype != now.q_dtype) return mismatch("query dtype");
  if (planned.cache_dtype != now.cache_dtype) return mismatch("cache dtype");
  if (planned.layout != now.layout) return mismatch("cache layout");
  if (planned.block_size != now.block_size) return mismatch("block_size");
  if (planned.num_blocks != now.num_blocks) return mismatch("num_blocks");
  if (planned.access != now.access) return mismatch("cache access (block strides)");
  if (planned.softcap != now.softcap) return mismatch("softcap");
  if (planned.sliding_window != now.sliding_window) return mismatch("sliding_window");
  if (planned.alibi != now.alibi) return mismatch("presence of alibi_slopes");
  if (planned.sinks != now.sinks) return mismatch("presence of sinks");
  if (planned.lse != now.lse) return mismatch("presence of the lse output");
  if (planned.batch.num_tokens != num_tokens) return mismatch("num_tokens (query.shape[0])");
  if (planned.batch.num_seqs != num_seqs) return mismatch("num_seqs");
  if (planned_width != block_table_width) return mismatch("block_table.shape[1]");
  return Status::Ok();
}
}  // namespace

const KernelChoice& AttentionPlan::choice() const { return require_state(state_.get()).choice; }
const ProblemDesc& AttentionPlan::problem() const { return require_state(state_.get()).problem; }
std::size_t AttentionPlan::workspace_bytes() const {
  return require_state(state_.get()).workspace_bytes;
}

Result<DeviceInfo> query_device(Device device) {
  if (device.type == DeviceType::kCUDA) return cuda::query_device(device.index);
  DeviceInfo info;
  info.device = device;
  info.name = "cpu";
  const unsigned hw = std::thread::hardware_concurrency();
  info.num_units = hw ? static_cast<int>(hw) : 1;
  return info;
}

Result<AttentionPlan> plan_attention(const AttentionArgs& args, const HostMetadata& host,
                                     const PlanOptions& options) {
  KVCacheGeometry g;
  PAGEDATTN_RETURN_IF_ERROR(validate::attention_args(args, /*need_data=*/false, &g));
  auto device_info = query_device(args.query.device);
  if (!device_info.ok()) return device_info.status();
  auto state = std::make_shared<AttentionPlan::State>();
  state->geometry = g;
  state->options = options;
  state->problem = problem_from_args(args, g);
  state->block_table_width = args.block_table.shape[1];
  PAGEDATTN_RETURN_IF_ERROR(validate::host_metadata(args, host, g, &state->problem.batch));
  auto choice = select_kernel(state->problem, *device_info, options);
  if (!choice.ok()) return choice.status();
  state->choice = *choice;
  if (args.query.device.type == DeviceType::kCUDA) {
    PAGEDATTN_RETURN_IF_ERROR(cuda::plan_attention(args, host, state.get()));
  } else {
    cpu::build_work_list(args, host, state.get());
  }
  return AttentionPlan(std::move(state));
}

Status run_attention(const AttentionPlan& plan, const AttentionArgs& args, void* workspace,
                     std::size_t workspace_bytes, Stream stream) {
  const AttentionPlan::State* st = plan.state();
  if (!st) return invalid("run_attention: the plan is empty (call plan_attention first)");
  KVCacheGeometry g;
  PAGEDATTN_RETURN_IF_ERROR(validate::attention_args(args, /*need_data=*/true, &g));
  PAGEDATTN_RETURN_IF_ERROR(check_matches_plan(
      st->problem, problem_from_args(args, g), args.query.shape[0], args.seq_lens.shape[0],
      args.block_table.shape[1], st->block_table_width));
  if (workspace_bytes < st->workspace_bytes || (st->workspace_bytes > 0 && workspace == nullptr))
    return invalid("workspace: " + std::to_string(workspace_bytes) + " bytes at " +
                   (workspace ? "a valid pointer" : "null") + ": the plan needs " +
                   std::to_string(st->workspace_bytes) + " bytes");
  // The kernels store and load the split partials with 8- and 16-byte vector accesses at
  // 256-byte offsets from `workspace`: an address off that alignment (a workspace carved out of
  // a larger buffer at an odd offset) would be a misaligned-address fault on the GPU, which
  // poisons the whole CUDA context, instead of an error.
  if (st->workspace_bytes > 0 &&
      reinterpret_cast<std::uintptr_t>(workspace) % kWorkspaceAlignment != 0)
    return invalid("workspace: address " +
                   std::to_string(reinterpret_cast<std::uintptr_t>(workspace)) +
                   " is not a multiple of " + std::to_string(kWorkspaceAlignment) +
                   " bytes (cudaMalloc and framework allocations are; an offset into a larger "
                   "buffer must keep that alignment)");
  // Host-resident parameter tensors (a CPU call's) are checked here, at every run, since
  // their values may change after planning; device ones are read only by the kernels.
  PAGEDATTN_RETURN_IF_ERROR(validate::host_parameter_values(args.params, args.cache, g));
  if (args.query.shape[0] == 0) return Status::Ok();
  if (args.query.device.type == DeviceType::kCUDA)
    return cuda::run_attention(*st, args, workspace, workspace_bytes, stream);
  return cpu::run_attention(*st, args);
}

Status paged_attention(const AttentionArgs& args, const HostMetadata& host, Stream stream,
                       const PlanOptions& options) {
  auto plan = plan_attention(args, host, options);
  if (!plan.ok()) return plan.status();
  const std::size_t bytes = plan->workspace_bytes();
  if (args.query.device.type == DeviceType::kCUDA) {
    void* ws = nullptr;
    if (bytes > 0) {
      // On the tensors' device, which need not be the caller's current one.
      auto mem = cuda::device_malloc(bytes, args.query.device.index);
      if (!mem.ok()) return mem.status();
      ws = *mem;
    }
    Status st = run_attention(*plan, args, ws, bytes, stream);
    // The free must not overtake the kernel that uses the workspace (on that device).
    Status sync = cuda::device_synchronize(args.query.device.index);
    if (ws) cuda::device_free(ws);
    return st.ok() ? sync : st;
  }
  std::vector<unsigned char> ws(bytes);
  return run_attention(*plan, args, ws.data(), bytes, stream);
}

Status write_kv(const TensorView& key, const TensorView& value, const TensorView& slot_mapping,
                const KVCache& cache, Stream stream, const WriteKVOptions& options) {
  const bool on_cpu = slot_mapping.device.type == DeviceType::kCPU;
  KVCacheGeometry g;
  PAGEDATTN_RETURN_IF_ERROR(validate::write_kv_args(
      key, value, slot_mapping, cache, on_cpu ? slot_mapping : options.host_slot_mapping, &g));
  PAGEDATTN_RETURN_IF_ERROR(validate::host_scale_values(cache, g));
  if (slot_mapping.shape[0] == 0) return Status::Ok();
  if (cache.key.device.type == DeviceType::kCUDA)
    return cuda::write_kv(key, value, slot_mapping, cache, g, stream);
  return cpu::write_kv(key, value, slot_mapping, cache, g);
}

Status merge_attention_states(const TensorView& out_a, const TensorView& lse_a,
                              const TensorView& out_b, const TensorView& lse_b,
                              const TensorView& out, const TensorView& lse_out, Stream stream) {
  PAGEDATTN_RETURN_IF_ERROR(validate::merge_args(out_a, lse_a, out_b, lse_b, out, lse_out));
  if (out.device.type == DeviceType::kCUDA)
    return cuda::merge_attention_states(out_a, lse_a, out_b, lse_b, out, lse_out, stream);
  return cpu::merge_attention_states(out_a, lse_a, out_b, lse_b, out, lse_out);
}

}  // namespace pagedattn
