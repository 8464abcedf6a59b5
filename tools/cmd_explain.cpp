// `pagedattn explain`: what the selection function decides for a configuration — kernel, cache
// access, tile, splits, shared memory, threads, workspace and the reason — and which writer
// write_kv would use for the same cache (DESIGN.md §3: one decision for writer and reader).
// It plans through plan_attention, the same path `run` takes, on shapes only (no memory that
// grows with the lengths: tools/shape_plan.h).
// Exit status: 0, 2 invalid or unsupported configuration, 3 device unavailable.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "pagedattn/pagedattn.h"
#include "tools/commands.h"
#include "tools/config_flags.h"
#include "tools/shape_plan.h"

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
  auto shaped = plan_on_shapes(c, /*with_lse=*/false);
  if (!shaped.ok()) return fail(shaped.status());
  const AttentionPlan* plan = &shaped->plan;
  const KVCache* cache = &shaped->cache;
  const Device d = *device;
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
                      {"prefill_rows_wgmma", k.prefill_rows_wgmma},
                      {"reason", k.reason}};
    j["cache_access"] = {{"access", access_name(access.access)}, {"reason", access.reason}};
    j["writer"] = {{"kernel", writer.kernel},
                   {"cache_access", access_name(writer.access)},
                   {"reason", writer.reason}};
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf(
      "problem     %s: %d query head%s / %d KV head%s (GQA %d), head_size %d, %s query, "
      "%s cache, %s layout, block_size %d, %lld block%s, page_pad %lld\n",
      to_string(d).c_str(), p.num_heads, p.num_heads == 1 ? "" : "s", p.num_kv_heads,
      p.num_kv_heads == 1 ? "" : "s", p.gqa_ratio(), p.head_size, to_string(p.q_dtype),
      to_string(p.cache_dtype), to_string(p.layout), p.block_size,
      static_cast<long long>(p.num_blocks), p.num_blocks == 1 ? "" : "s",
      static_cast<long long>(c.page_pad));
  std::printf(
      "batch       %d sequence%s (%d decode, %d prefill, %d skipped), %lld token%s, max "
      "seq_len %d, %lld KV token%s\n",
      p.batch.num_seqs, p.batch.num_seqs == 1 ? "" : "s", p.batch.num_decode_seqs, p.batch.num_prefill_seqs, p.batch.num_empty_seqs,
      static_cast<long long>(p.batch.num_tokens), p.batch.num_tokens == 1 ? "" : "s",
      p.batch.max_seq_len, static_cast<long long>(p.batch.total_kv_tokens),
      p.batch.total_kv_tokens == 1 ? "" : "s");
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
      return id == "cuda_prefill_mma"     ? "tensor-core prefill kernel (" + id + ")"
             : id == "cuda_prefill_wgmma" ? "Hopper tensor-core prefill kernel (" + id + ")"
                                          : id;
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
  sub->footer(exit_status_help(/*can_mismatch=*/false));
  return [flags] { return run_explain(*flags); };
}

}  // namespace pagedattn::cli
