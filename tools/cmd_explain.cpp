// `pagedattn explain`: what the selection function decides for a configuration — kernel, cache
// access, tile, splits, shared memory, threads, workspace and the reason — and which writer
// write_kv would use for the same cache (DESIGN.md §3: one decision for writer and reader).
// It plans through plan_attention, the same path `run` takes, on shapes only (no memory that
// grows with the lengths: tools/shape_plan.h). `--assume-device h200` answers for a preset GPU
// (tools/device_presets.h) without querying one, in any build: select_kernel's decision.
// Exit status: 0, 2 invalid or unsupported configuration, 3 device unavailable.
#include <cstdio>
#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "pagedattn/pagedattn.h"
#include "tools/assumed_plan.h"
#include "tools/commands.h"
#include "tools/config_flags.h"
#include "tools/device_presets.h"
#include "tools/shape_plan.h"

namespace pagedattn::cli {

namespace {

const char* access_name(CacheAccess a) { return a == CacheAccess::kNative ? "native" : "strided"; }

struct ExplainFlags {
  ConfigFlags config;
  std::string assume_device;  // empty: the real device
};

int run_explain(const ExplainFlags& ef) {
  const ConfigFlags& flags = ef.config;
  auto fail = [&flags](const Status& st) { return report_failure("explain", st, flags.json); };
  const bool assumed = !ef.assume_device.empty();
  DeviceInfo preset;
  Device d;
  if (assumed) {
    auto info = assumed_device(ef.assume_device);
    if (!info.ok()) return fail(info.status());
    preset = *info;
    // The preset is CUDA device 0; a --device that names something else contradicts it.
    if (flags.device != "auto" && flags.device != "cuda" && flags.device != "cuda:0")
      return fail(Status(StatusCode::kInvalidArgument,
                         "--assume-device " + ef.assume_device + " describes cuda:0; --device " +
                             flags.device + " contradicts it (leave --device out)"));
    d = preset.device;
  } else {
    auto device = resolve_device(flags.device);
    if (!device.ok()) return fail(device.status());
    d = *device;
  }
  // With an assumed device the shapes are planned on the CPU (tools/assumed_plan.h).
  auto cfg = to_case_config(flags, assumed ? Device::cpu() : d);
  if (!cfg.ok()) return fail(cfg.status());
  const testing::CaseConfig& c = *cfg;
  Result<ShapePlan> shaped = Status(StatusCode::kInternal, "not planned");
  ProblemDesc assumed_problem;
  KernelChoice assumed_choice;
  if (assumed) {
    ShapePlan cpu_plan;
    auto choice = select_on_assumed_device(c, preset, /*with_lse=*/false, &cpu_plan,
                                           &assumed_problem);
    if (!choice.ok()) return fail(choice.status());
    assumed_choice = *choice;
    shaped = cpu_plan;
  } else {
    shaped = plan_on_shapes(c, /*with_lse=*/false);
    if (!shaped.ok()) return fail(shaped.status());
  }
  const KVCache* cache = &shaped->cache;
  const KernelChoice& k = assumed ? assumed_choice : shaped->plan.choice();
  const ProblemDesc& p = assumed ? assumed_problem : shaped->plan.problem();
  // The workspace is sized by the backend's plan, which needs the real device.
  const std::size_t workspace = assumed ? 0 : shaped->plan.workspace_bytes();
  const CacheAccessDecision access = decide_cache_access(*cache);
  const WriterChoice writer = select_writer(*cache, d);
  const std::string assumed_text =
      assumed ? fmt::format("{}: {} SMs, compute capability {}.{}, {} bytes of shared memory per "
                            "block, {} MiB of L2; no GPU was queried",
                            preset.name, preset.num_units, preset.cc_major, preset.cc_minor,
                            preset.max_shared_memory_per_block, preset.l2_bytes >> 20)
              : std::string();
  // Made by the CUDA backend's plan on a real device, after select_kernel: not shown here.
  const char* assumed_note =
      "the CUDA backend's plan-time refinements (the small-call kernel of a one-wave decode, "
      "KV-head pairing from the tensors' actual strides, the tiled fallback for strides that "
      "are not multiples of 8 elements) and the workspace size need the real device";

  // What runs: a CUDA plan on the tiled kernel hands the decode rows of a batch to the decode
  // fast path and its prefill chunks to a tensor-core prefill kernel when it can; `kernel`
  // then names only the plan (and the fallback the tile / splits / threads describe). The
  // top line says which kernel each kind of row present in the batch runs on.
  const bool any_decode = p.batch.num_decode_seqs > 0, any_prefill = p.batch.num_prefill_seqs > 0;
  const RowKernels rows = row_kernels(k);
  const std::string planned = to_string(k.kernel);
  const std::string runs = runs_line(k, p.batch);
  const bool rows_elsewhere = runs != planned;

  if (flags.json) {
    nlohmann::json j;
    j["device"] = to_string(d);
    if (assumed) {
      j["assumed_device"] = {{"preset", ef.assume_device},
                             {"name", preset.name},
                             {"sms", preset.num_units},
                             {"cc", fmt::format("{}.{}", preset.cc_major, preset.cc_minor)},
                             {"max_shared_memory_per_block", preset.max_shared_memory_per_block},
                             {"l2_bytes", preset.l2_bytes},
                             {"note", assumed_note}};
    }
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
                      {"workspace_bytes", assumed ? nlohmann::json(nullptr)
                                                  : nlohmann::json(workspace)},
                      {"decode_rows_fast_path", k.decode_rows_fast_path},
                      {"prefill_rows_mma", k.prefill_rows_mma},
                      {"batch_invariant", c.plan.batch_invariant},
                      {"prefill_rows_wgmma", k.prefill_rows_wgmma},
                      // The kernel each kind of row of this batch runs on (null: the batch
                      // has none) and the top line; "kernel" stays the plan's kernel.
                      {"row_kernels",
                       {{"decode", any_decode ? nlohmann::json(rows.decode) : nlohmann::json(nullptr)},
                        {"prefill", any_prefill ? nlohmann::json(rows.prefill) : nlohmann::json(nullptr)}}},
                      {"runs", runs},
                      {"prefill_rows_wgmma_ws", k.prefill_rows_wgmma_ws},
                      {"reason", k.reason}};
    j["cache_access"] = {{"access", access_name(access.access)}, {"reason", access.reason}};
    j["writer"] = {{"kernel", writer.kernel},
                   {"cache_access", access_name(writer.access)},
                   {"reason", writer.reason}};
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  if (assumed) std::printf("device      %s assumed: %s\n", to_string(d).c_str(), assumed_text.c_str());
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
  if (rows_elsewhere)
    std::printf("kernel      %s (one call, planned as %s: the fields below describe that plan, "
                "the fallback)\n",
                runs.c_str(), planned.c_str());
  else
    std::printf("kernel      %s\n", planned.c_str());
  std::printf("  cache access       %s (%s)\n", access_name(k.access), access.reason.c_str());
  std::printf("  tile tokens        %d\n", k.tile_tokens);
  std::printf("  splits             %d\n", k.num_splits);
  std::printf("  batch invariant    %s\n",
              c.plan.batch_invariant
                  ? "yes (split points fixed in tokens: a sequence's bits are the same alone or "
                    "in any batch)"
                  : "no (splits from the batch and the device's size)");
  std::printf("  shared memory      %lld bytes\n", static_cast<long long>(k.shared_memory_bytes));
  std::printf("  threads per block  %d\n", k.threads_per_block);
  if (assumed)
    std::printf("  workspace          not computed (sized by the CUDA backend's plan)\n");
  else
    std::printf("  workspace          %zu bytes\n", workspace);
  if (d.type == DeviceType::kCUDA && k.kernel == KernelId::kCudaTiled) {
    // Which kernel takes which rows of a mixed batch (the fields above describe `kernel`).
    auto shown = [](const std::string& id) {
      return id == "cuda_prefill_mma"     ? "tensor-core prefill kernel (" + id + ")"
             : id == "cuda_prefill_wgmma" || id == "cuda_prefill_wgmma_ws"
                 ? "Hopper tensor-core prefill kernel (" + id + ")"
                                          : id;
    };
    if (any_decode) std::printf("  decode rows        %s\n", shown(rows.decode).c_str());
    if (any_prefill) std::printf("  prefill rows       %s\n", shown(rows.prefill).c_str());
  }
  std::printf("  reason             %s\n", k.reason.c_str());
  std::printf("writer      %s (cache access %s): %s\n", writer.kernel.c_str(),
              access_name(writer.access), writer.reason.c_str());
  if (assumed) std::printf("note        select_kernel's decision only: %s\n", assumed_note);
  return kExitOk;
}

}  // namespace

Action register_explain(CLI::App& app) {
  auto flags = std::make_shared<ExplainFlags>();
  CLI::App* sub = app.add_subcommand(
      "explain", "print the kernel, tile, splits and writer chosen for a configuration");
  add_config_flags(sub, &flags->config);
  sub->add_option("--assume-device", flags->assume_device,
                  std::string("answer for a preset GPU as cuda:0 instead of querying one (") +
                      kAssumableDevices +
                      "): select_kernel's decision from the preset's SM count, compute "
                      "capability and shared memory, in any build, on any machine")
      ->check(kNonEmpty);
  // A flag named decode_rows_fast_path that reads false for an all-decode batch on that very
  // kernel looks wrong unless the help says which key answers "what runs the decode rows".
  sub->footer(
      "--json's \"attention\": \"kernel\" is the plan's kernel; \"row_kernels\" names the "
      "kernel that runs each kind of row of this batch (\"decode\", \"prefill\"; null when "
      "the batch has none) and \"runs\" says it in one line. decode_rows_fast_path, "
      "prefill_rows_mma, prefill_rows_wgmma and prefill_rows_wgmma_ws describe how a plan on "
      "the tiled kernel hands the rows of a batch with prefill chunks to other kernels "
      "(KernelChoice, pagedattn/select.h): they are false when \"kernel\" is itself "
      "cuda_decode_mma_splitkv (an all-decode batch on the decode fast path, which runs every "
      "row) or the CPU's.\n\n" +
      exit_status_help(/*can_mismatch=*/false));
  return [flags] { return run_explain(*flags); };
}

}  // namespace pagedattn::cli
