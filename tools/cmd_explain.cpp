// `pagedattn explain`: what the selection function decides for a configuration — kernel, cache
// access, tile, splits, shared memory, threads, workspace and the reason — and which writer
// write_kv would use for the same cache (DESIGN.md §3: one decision for writer and reader).
// It plans through plan_attention, the same path `run` takes, on shapes only (no memory).
// Exit status: 0, 2 invalid or unsupported configuration, 3 device unavailable.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "tools/commands.h"
#include "tools/config_flags.h"

namespace pagedattn::cli {

namespace {

const char* access_name(CacheAccess a) { return a == CacheAccess::kNative ? "native" : "strided"; }

int run_explain(const ConfigFlags& flags) {
  auto fail = [&flags](const Status& st) { return report_failure("explain", st, flags.json); };
  auto device = resolve_device(flags.device);
  if (!device.ok()) return fail(device.status());
  auto cfg = to_case_config(flags, *device);
  if (!cfg.ok()) return fail(cfg.status());
  const testing::CaseConfig& c = *cfg;
  const int num_seqs = static_cast<int>(c.seq_lens.size());

  // Host metadata: sequential block ids (the ids do not influence the decision).
  std::vector<std::int32_t> seq_lens(c.seq_lens.begin(), c.seq_lens.end());
  std::vector<std::int32_t> starts(static_cast<std::size_t>(num_seqs) + 1, 0);
  std::int64_t width = 1, num_blocks = 0;
  auto blocks_of = [&c](int s) {  // 64-bit: seq_len + block_size - 1 may pass INT32_MAX
    return (std::int64_t{c.seq_lens[static_cast<std::size_t>(s)]} + c.block_size - 1) /
           c.block_size;
  };
  for (int s = 0; s < num_seqs; ++s) {
    starts[static_cast<std::size_t>(s) + 1] =
        starts[static_cast<std::size_t>(s)] + c.query_lens[static_cast<std::size_t>(s)];
    const std::int64_t nb = blocks_of(s);
    width = std::max(width, nb);
    num_blocks += nb;
  }
  num_blocks = std::max<std::int64_t>(num_blocks, 1);
  // The planner reads a host block table; past 2^28 entries (1 GiB) that is not worth building
  // for an explanation.
  if (num_seqs * width > (std::int64_t{1} << 28))
    return fail(Status(StatusCode::kInvalidArgument,
                       "--seq-lens / --block-size: the block table would need " +
                           std::to_string(num_seqs * width) +
                           " entries (more than 2^28); use a larger --block-size"));
  std::vector<std::int32_t> table(static_cast<std::size_t>(num_seqs * width), 0);
  {
    std::int32_t next = 0;
    for (int s = 0; s < num_seqs; ++s) {
      const std::int64_t nb = blocks_of(s);
      for (std::int64_t j = 0; j < nb; ++j) table[static_cast<std::size_t>(s * width + j)] = next++;
    }
  }
  const std::int64_t T = starts.back();

  const KVCacheSpec spec = testing::kv_cache_spec(c, num_blocks);
  // Shapes only: planning never touches memory, so the views have null data.
  auto cache = make_kv_cache(spec, nullptr, nullptr, *device, c.k_scale > 0 ? c.k_scale : 1.0f,
                             c.v_scale > 0 ? c.v_scale : 1.0f);
  if (!cache.ok()) return fail(cache.status());

  const Device d = *device;
  AttentionArgs args;
  args.query = TensorView::contiguous(nullptr, c.dtype, {T, c.num_heads, c.head_size}, d);
  args.out = args.query;
  args.cache = *cache;
  args.block_table = TensorView::contiguous(nullptr, DType::kInt32, {num_seqs, width}, d);
  args.seq_lens = TensorView::contiguous(nullptr, DType::kInt32, {num_seqs}, d);
  args.query_start_loc = TensorView::contiguous(nullptr, DType::kInt32, {num_seqs + 1}, d);
  args.params.scale = default_scale(c.head_size);
  args.params.softcap = c.softcap;
  args.params.sliding_window = c.sliding_window;
  if (c.alibi)
    args.params.alibi_slopes = TensorView::contiguous(nullptr, DType::kFloat32, {c.num_heads}, d);
  if (c.sinks)
    args.params.sinks = TensorView::contiguous(nullptr, DType::kFloat32, {c.num_heads}, d);
  HostMetadata host;
  host.block_table = TensorView::contiguous(table.data(), DType::kInt32, {num_seqs, width});
  host.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {num_seqs});
  host.query_start_loc = TensorView::contiguous(starts.data(), DType::kInt32, {num_seqs + 1});

  auto plan = plan_attention(args, host, c.plan);
  if (!plan.ok()) return fail(plan.status());
  const KernelChoice& k = plan->choice();
  const ProblemDesc& p = plan->problem();
  const CacheAccessDecision access = decide_cache_access(*cache);
  const WriterChoice writer = select_writer(*cache, d);

  if (flags.json) {
    nlohmann::json j;
    j["device"] = to_string(d);
    j["problem"] = {{"num_heads", p.num_heads},
                    {"num_kv_heads", p.num_kv_heads},
                    {"gqa_ratio", p.gqa_ratio()},
                    {"head_size", p.head_size},
                    {"dtype", to_string(p.q_dtype)},
                    {"cache_dtype", to_string(p.cache_dtype)},
                    {"layout", to_string(p.layout)},
                    {"block_size", p.block_size},
                    {"num_blocks", p.num_blocks},
                    {"page_pad", c.page_pad},
                    {"softcap", p.softcap},
                    {"sliding_window", p.sliding_window},
                    {"alibi", p.alibi},
                    {"sinks", p.sinks},
                    {"num_seqs", p.batch.num_seqs},
                    {"num_tokens", p.batch.num_tokens},
                    {"num_decode_seqs", p.batch.num_decode_seqs},
                    {"num_prefill_seqs", p.batch.num_prefill_seqs},
                    {"num_empty_seqs", p.batch.num_empty_seqs},
                    {"max_seq_len", p.batch.max_seq_len},
                    {"max_query_len", p.batch.max_query_len},
                    {"total_kv_tokens", p.batch.total_kv_tokens}};
    j["attention"] = {{"kernel", to_string(k.kernel)},
                      {"cache_access", access_name(k.access)},
                      {"tile_tokens", k.tile_tokens},
                      {"num_splits", k.num_splits},
                      {"shared_memory_bytes", k.shared_memory_bytes},
                      {"threads_per_block", k.threads_per_block},
                      {"workspace_bytes", plan->workspace_bytes()},
                      {"decode_rows_fast_path", k.decode_rows_fast_path},
                      {"prefill_rows_mma", k.prefill_rows_mma},
                      {"reason", k.reason}};
    j["cache_access"] = {{"access", access_name(access.access)}, {"reason", access.reason}};
    j["writer"] = {{"kernel", writer.kernel},
                   {"cache_access", access_name(writer.access)},
                   {"reason", writer.reason}};
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf(
      "problem     %s: %d query heads / %d KV heads (GQA %d), head_size %d, %s query, "
      "%s cache, %s layout, block_size %d, %lld blocks, page_pad %lld\n",
      to_string(d).c_str(), p.num_heads, p.num_kv_heads, p.gqa_ratio(), p.head_size,
      to_string(p.q_dtype), to_string(p.cache_dtype), to_string(p.layout), p.block_size,
      static_cast<long long>(p.num_blocks), static_cast<long long>(c.page_pad));
  std::printf(
      "batch       %d seqs (%d decode, %d prefill, %d skipped), %lld tokens, max seq_len "
      "%d, %lld KV tokens\n",
      p.batch.num_seqs, p.batch.num_decode_seqs, p.batch.num_prefill_seqs, p.batch.num_empty_seqs,
      static_cast<long long>(p.batch.num_tokens), p.batch.max_seq_len,
      static_cast<long long>(p.batch.total_kv_tokens));
  std::printf("features    softcap %g, sliding_window %d, alibi %s, sinks %s\n", p.softcap,
              p.sliding_window, p.alibi ? "yes" : "no", p.sinks ? "yes" : "no");
  std::printf("kernel      %s\n", to_string(k.kernel));
  std::printf("  cache access       %s (%s)\n", access_name(k.access), access.reason.c_str());
  std::printf("  tile tokens        %d\n", k.tile_tokens);
  std::printf("  splits             %d\n", k.num_splits);
  std::printf("  shared memory      %lld bytes\n", static_cast<long long>(k.shared_memory_bytes));
  std::printf("  threads per block  %d\n", k.threads_per_block);
  std::printf("  workspace          %zu bytes\n", plan->workspace_bytes());
  if (d.type == DeviceType::kCUDA && k.kernel == KernelId::kCudaTiled) {
    // Which kernel takes which rows of a mixed batch (the fields above describe `kernel`).
    const bool any_decode = p.batch.num_decode_seqs > 0, any_prefill = p.batch.num_prefill_seqs > 0;
    const RowKernels rows = row_kernels(k);
    auto shown = [](const std::string& id) {
      return id == "cuda_prefill_mma" ? "tensor-core prefill kernel (" + id + ")" : id;
    };
    if (any_decode) std::printf("  decode rows        %s\n", shown(rows.decode).c_str());
    if (any_prefill) std::printf("  prefill rows       %s\n", shown(rows.prefill).c_str());
  }
  std::printf("  reason             %s\n", k.reason.c_str());
  std::printf("writer      %s (cache access %s): %s\n", writer.kernel.c_str(),
              access_name(writer.access), writer.reason.c_str());
  return kExitOk;
}

}  // namespace

Action register_explain(CLI::App& app) {
  auto flags = std::make_shared<ConfigFlags>();
  CLI::App* sub = app.add_subcommand(
      "explain", "print the kernel, tile, splits and writer chosen for a configuration");
  add_config_flags(sub, flags.get());
  return [flags] { return run_explain(*flags); };
}

}  // namespace pagedattn::cli
