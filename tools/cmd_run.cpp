// `pagedattn run`: replay the first N requests of a serving trace through the block allocator,
// the token-budget scheduler and the attention library, verifying every step against the
// oracle (src/serving/replay.h). Exit status (DESIGN.md §7): 0 every check passed, 1 a
// mismatch, 2 invalid input or usage, 3 the requested device is unavailable.
#include <cmath>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pagedattn/pagedattn.h"
#include "src/serving/replay.h"
#include "src/serving/trace.h"
#include "tools/commands.h"
#include "tools/config_flags.h"

namespace pagedattn::cli {

namespace {

/// Flag values as typed. The defaults are ReplayConfig's (one source of truth), sized to finish
/// in seconds on two CPU cores.
struct RunFlags {
  RunFlags() {
    const serving::ReplayConfig d;
    device = serving::to_string(d.device);
    trace = d.trace;
    requests = d.requests;
    model = d.model;
    layout = to_string(d.layout);
    dtype = to_string(d.dtype);
    kv_dtype = d.kv_dtype ? to_string(*d.kv_dtype) : "auto";
    block_size = d.block_size;
    num_blocks = d.num_blocks;
    page_pad = d.page_pad;
    token_budget = d.token_budget;
    max_seqs = d.max_seqs;
    max_prompt = d.max_prompt;
    max_output = d.max_output;
    max_model_len = d.max_model_len;
    verify_rows = d.verify_rows;
    seed = d.seed;
    threads = d.threads;
    inject_fault = serving::to_string(d.fault);
    fault_every = d.fault_every;
    prefix_sharing = serving::to_string(d.prefix_sharing);
    duration = d.duration_s;
  }
  std::string device;
  std::string trace;
  std::int64_t requests;
  std::string model;
  std::string layout;
  std::string dtype;
  std::string kv_dtype;
  std::int32_t block_size;
  std::int64_t num_blocks;
  std::int64_t page_pad;
  std::int64_t token_budget;
  std::int32_t max_seqs;
  std::int64_t max_prompt;
  std::int64_t max_output;
  std::int64_t max_model_len;
  std::int32_t verify_rows;
  std::uint64_t seed;
  std::int32_t threads;
  std::string inject_fault;
  bool batch_invariant = false;
  std::int64_t fault_every;
  std::string prefix_sharing;
  double duration;
  /// Seconds between soak report lines; < 0 = auto (30 with --duration or --report).
  double report_interval = -1;
  std::string report_file;
  bool json = false;
  bool quiet = false;
};

/// Names to ReplayConfig. Errors: kInvalidArgument naming the flag (numeric ranges are checked
/// by run_replay, which knows the trace and the model).
Result<serving::ReplayConfig> to_replay_config(const RunFlags& f) {
  serving::ReplayConfig c;
  Result<serving::DeviceChoice> device = serving::parse_device_choice(f.device);
  if (!device.ok()) return device.status();
  c.device = *device;
  Result<KVLayout> layout = parse_layout(f.layout);
  if (!layout.ok()) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("--layout '{}': expected split, nhd or hnd", f.layout));
  }
  c.layout = *layout;
  Result<DType> dtype = parse_dtype(f.dtype);
  if (!dtype.ok() || !(*dtype == DType::kFloat32 || *dtype == DType::kFloat16 ||
                       *dtype == DType::kBFloat16)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("--dtype '{}': expected fp32, fp16 or bf16", f.dtype));
  }
  c.dtype = *dtype;
  Result<std::optional<DType>> kv = serving::parse_kv_dtype(f.kv_dtype);
  if (!kv.ok()) return kv.status();
  c.kv_dtype = *kv;
  c.trace = f.trace;
  c.requests = f.requests;
  c.model = f.model;
  c.block_size = f.block_size;
  c.num_blocks = f.num_blocks;
  c.page_pad = f.page_pad;
  c.token_budget = f.token_budget;
  c.max_seqs = f.max_seqs;
  c.max_prompt = f.max_prompt;
  c.max_output = f.max_output;
  // The replay rounds max_model_len up to blocks in 64-bit arithmetic: a value near 2^63
  // overflowed into a negative reservation. Lengths are int32 everywhere else (--max-prompt,
  // --max-output, seq_lens).
  if (f.max_model_len < 0 || f.max_model_len > 0x7FFFFFFF) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("--max-model-len {}: expected 0 .. 2147483647 (0 = --max-prompt "
                              "+ --max-output)",
                              f.max_model_len));
  }
  c.max_model_len = f.max_model_len;
  c.verify_rows = f.verify_rows;
  c.seed = f.seed;
  c.threads = f.threads;
  c.batch_invariant = f.batch_invariant;
  Result<serving::FaultInjection> fault = serving::parse_fault_injection(f.inject_fault);
  if (!fault.ok()) return fault.status();
  c.fault = *fault;
  c.fault_every = f.fault_every;
  Result<serving::PrefixSharing> sharing = serving::parse_prefix_sharing(f.prefix_sharing);
  if (!sharing.ok()) return sharing.status();
  c.prefix_sharing = *sharing;
  c.duration_s = f.duration;
  // -1 (the default) picks the interval below; any other negative value or NaN is refused.
  if (std::isnan(f.report_interval) || (f.report_interval < 0 && f.report_interval != -1.0)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("--report-interval {}: expected 0 .. 1e7 seconds", f.report_interval));
  }
  c.sample_interval_s = f.report_interval >= 0 ? f.report_interval
                        : (f.duration > 0 || !f.report_file.empty()) ? 30.0
                                                                     : 0.0;
  return c;
}

std::string mib(std::int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

double safe_div(double a, double b) { return b > 0 ? a / b : 0.0; }

// JSON has no infinity or NaN: such a number becomes null.
// ordered_json: the report reads top-down (status and result first), as the text report does.
using Json = nlohmann::ordered_json;

Json number(double v) { return std::isfinite(v) ? Json(v) : Json(); }

Json json_report(const serving::ReplayReport& r) {
  using json = Json;
  json j;
  j["status"] = "ok";
  j["pass"] = r.pass;
  j["device"] = {{"device", r.device}, {"name", r.device_name}, {"threads", r.threads}};
  j["trace"] = {{"name", r.trace_name},
                {"path", r.trace_path},
                {"format", serving::to_string(r.trace_format)},
                {"records", r.trace_records},
                {"requests", r.requests},
                {"prompt_tokens", r.trace_prompt_tokens},
                {"output_tokens", r.trace_output_tokens},
                {"prompts_clipped", r.prompts_clipped},
                {"outputs_clipped", r.outputs_clipped},
                {"prompts_raised", r.prompts_raised},
                {"outputs_raised", r.outputs_raised},
                {"max_prompt", r.max_prompt},
                {"max_output", r.max_output}};
  j["model"] = {{"preset", r.model.name},
                {"num_heads", r.model.num_heads},
                {"num_kv_heads", r.model.num_kv_heads},
                {"head_size", r.model.head_size},
                {"block_size", r.model.block_size},
                {"page_pad", r.model.page_pad},
                {"layout", to_string(r.layout)},
                {"dtype", to_string(r.dtype)},
                {"kv_dtype", to_string(r.kv_dtype)},
                {"k_scale", r.k_scale},
                {"v_scale", r.v_scale},
                {"softmax_scale", r.softmax_scale}};
  j["scheduler"] = {{"token_budget", r.token_budget},
                    {"max_seqs", r.max_seqs},
                    {"steps", r.steps},
                    {"prefill_tokens", r.prefill_tokens},
                    {"decode_tokens", r.decode_tokens},
                    {"generated_tokens", r.generated_tokens},
                    {"prefill_chunks", r.prefill_chunks},
                    {"mixed_steps", r.mixed_steps},
                    {"memory_wait_steps", r.memory_wait_steps},
                    {"max_batch_tokens", r.max_batch_tokens},
                    {"max_batch_seqs", r.max_batch_seqs},
                    {"peak_running", r.peak_running}};
  const double query_tokens = static_cast<double>(r.prefill_tokens + r.decode_tokens);
  j["time"] = {{"attention_s", r.attention_s},
               {"write_kv_s", r.write_kv_s},
               {"plan_s", r.plan_s},
               {"verify_s", r.verify_s},
               {"oracle_s", r.oracle_s},
               {"cache_check_s", r.cache_check_s},
               {"inputs_s", r.inputs_s},
               {"poison_s", r.poison_s},
               {"wall_s", r.wall_s},
               {"attention_flops", r.attention_flops},
               {"keys_attended", r.keys_attended},
               {"attention_tokens_per_s", safe_div(query_tokens, r.attention_s)},
               {"attention_gflops_per_s", safe_div(r.attention_flops * 1e-9, r.attention_s)}};
  j["memory"] = {{"num_blocks", r.num_blocks},
                 {"num_blocks_auto", r.num_blocks_auto},
                 {"cache_bytes", r.cache_bytes},
                 {"peak_blocks_used", r.peak_blocks_used},
                 {"peak_kv_tokens", r.peak_kv_tokens},
                 {"max_model_len", r.max_model_len},
                 {"contiguous_blocks_per_request", r.contiguous_blocks_per_request},
                 {"contiguous_blocks_at_peak", r.contiguous_blocks_at_peak},
                 {"contiguous_max_running", r.contiguous_max_running}};
  j["kernel"] = {{"kernel", r.kernel},
                 {"cache_access", r.cache_access},
                 {"tile_tokens", r.tile_tokens},
                 {"num_splits", r.num_splits},
                 {"reason", r.kernel_reason}};
  j["verification"] = {{"enabled", r.verified},
                       {"rows_checked", r.rows_checked},
                       {"prefill_rows_checked", r.prefill_rows_checked},
                       {"decode_rows_checked", r.decode_rows_checked},
                       {"elements_checked", r.elements_checked},
                       {"elements_failed", r.elements_failed},
                       {"max_abs_error", number(r.max_abs_error)},
                       {"worst_ratio", number(r.worst_ratio)},
                       {"atol", r.atol},
                       {"rtol", r.rtol},
                       {"cache_tokens_checked", r.cache_tokens_checked},
                       {"cache_mismatches", r.cache_mismatches},
                       {"rows_failed", r.rows_failed},
                       {"requests_cache_checked", r.requests_cache_checked},
                       {"requests_cache_failed", r.requests_cache_failed},
                       {"rows_fault_detected", r.rows_fault_detected},
                       {"requests_fault_detected", r.requests_fault_detected},
                       {"first_failure", r.first_failure},
                       {"result", !r.verified ? "SKIPPED" : r.pass ? "PASS" : "FAIL"}};
  j["prefix_sharing"] = {{"enabled", r.prefix_sharing},
                         {"prefix_tokens", r.prefix_tokens},
                         {"blocks_saved", r.prefix_hit_blocks},
                         {"tokens_saved", r.prefix_hit_tokens},
                         {"copies_on_write", r.prefix_copies},
                         {"peak_shared_blocks", r.peak_shared_blocks},
                         {"policy", "a block leaves the prefix table and returns to the free "
                                    "list when its last user finishes (no retention)"}};
  Json samples = Json::array();
  for (const serving::SoakSample& s : r.samples) {
    samples.push_back({{"elapsed_s", s.elapsed_s},
                       {"requests_finished", s.requests_finished},
                       {"steps", s.steps},
                       {"tokens", s.tokens},
                       {"checks_passed", s.checks_passed},
                       {"checks_failed", s.checks_failed},
                       {"checks_detected_fault", s.checks_detected_fault},
                       {"blocks_used", s.blocks_used},
                       {"peak_blocks_used", s.peak_blocks_used},
                       {"shared_blocks", s.shared_blocks},
                       {"device_used_bytes", s.device_used_bytes},
                       {"replay_device_bytes", s.replay_device_bytes}});
  }
  j["soak"] = {{"duration_s", r.duration_s},
               {"trace_passes", r.trace_passes},
               {"requests_not_admitted", r.requests_not_admitted},
               {"faults_injected", r.faults_injected},
               {"faults_detected", r.faults_detected},
               {"output_faults_injected", r.output_faults_injected},
               {"cache_faults_injected", r.cache_faults_injected},
               {"unexpected_failures", r.unexpected_failures},
               {"device_used_min_bytes", r.device_used_min},
               {"device_used_max_bytes", r.device_used_max},
               {"blocks_used_min", r.blocks_used_min},
               {"blocks_used_max", r.blocks_used_max},
               {"samples", samples}};
  return j;
}

// The report file: written whole to FILE.tmp, then renamed, so that a reader never sees half
// a report (the lead collects it while the soak runs).
bool write_report_file(const std::string& path, const Json& j) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  const std::string text = j.dump(2) + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return false;
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

// Whether write_report_file can succeed, found without writing anything: FILE.tmp is created
// in FILE's folder and renamed over FILE, so the folder must be a writable directory and FILE
// must not be a directory.
bool report_file_writable(const std::string& path) {
  const std::string::size_type slash = path.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? std::string(".") : (slash == 0 ? "/" : path.substr(0, slash));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return false;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return false;
  return !path.empty() && path.back() != '/';
}

/// "1 request", "2 requests", "0 requests": a count with its noun in the right number.
std::string count(std::int64_t n, const char* noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

void print_header(const serving::ReplayReport& r) {
  // The device's name only when it says more than its id ("cuda:0 (NVIDIA H200)", "cpu").
  const bool named = !r.device_name.empty() && r.device_name != r.device;
  std::printf("pagedattn run: %s of trace %s (%s, %s) on %s%s%s%s\n",
              count(r.requests, "request").c_str(), r.trace_name.c_str(), r.trace_path.c_str(),
              count(r.trace_records, "record").c_str(), r.device.c_str(), named ? " (" : "",
              named ? r.device_name.c_str() : "", named ? ")" : "");
}

void print_report(const serving::ReplayReport& r) {
  const double query_tokens = static_cast<double>(r.prefill_tokens + r.decode_tokens);
  std::string s;
  s += fmt::format(
      "  model         {}: {} query / {} KV heads, head {}; layout {}, {} (cache {}{}); block {} "
      "tokens{}; softmax scale {:.4g} (sharper than 1/sqrt(head): a wrong or missing key must "
      "move the output beyond the tolerance)\n",
      r.model.name, r.model.num_heads, r.model.num_kv_heads, r.model.head_size,
      to_string(r.layout), to_string(r.dtype), to_string(r.kv_dtype),
      is_fp8(r.kv_dtype) ? fmt::format(", k_scale {} v_scale {}", r.k_scale, r.v_scale) : "",
      r.model.block_size,
      r.model.page_pad > 0 ? fmt::format(", pages padded by {} elements", r.model.page_pad) : "",
      r.softmax_scale);
  s += fmt::format("  cache pool    {}{} = {}, {} (K+V)\n", count(r.num_blocks, "block"),
                   r.num_blocks_auto ? " (auto: about half of all replayed requests' blocks)" : "",
                   count(r.num_blocks * r.model.block_size, "slot"), mib(r.cache_bytes));
  s += fmt::format(
      "  scheduler     token budget {}/step, at most {} running; decodes first, then chunked "
      "prefill; admission in arrival order while the request's blocks fit\n",
      r.token_budget, r.max_seqs);
  auto raised = [](std::int64_t n) {
    return n > 0 ? fmt::format(", {} of length 0 raised to 1", n) : std::string();
  };
  s += fmt::format(
      "  clipping      {} of {} clipped to --max-prompt {}{} ({} replayed, {} in the "
      "trace); {} of {} clipped to --max-output {}{} ({} generated, {} in the trace)\n",
      r.prompts_clipped, count(r.requests, "prompt"), r.max_prompt, raised(r.prompts_raised),
      count(r.prefill_tokens, "prompt token"), r.trace_prompt_tokens, r.outputs_clipped,
      count(r.requests, "output"), r.max_output,
      raised(r.outputs_raised), r.generated_tokens, r.trace_output_tokens);
  s += fmt::format("  kernel        {} ({} cache access, tile {} tokens, {} split{}): {}\n",
                   r.kernel, r.cache_access, r.tile_tokens, r.num_splits,
                   r.num_splits == 1 ? "" : "s", r.kernel_reason);
  s += "Report\n";
  s += fmt::format(
      "  requests      {} finished in {} ({} mixed decode+prefill; admission waited for "
      "free blocks in {}); at most {} running, {} / {} in one step\n",
      r.requests, count(r.steps, "step"), r.mixed_steps, count(r.memory_wait_steps, "step"),
      r.peak_running,
      count(r.max_batch_seqs, "sequence"), count(r.max_batch_tokens, "token"));
  s += fmt::format(
      "  tokens        {} prefill in {} + {} decode = {}; {} generated\n",
      r.prefill_tokens, count(r.prefill_chunks, "chunk"), r.decode_tokens,
      count(r.prefill_tokens + r.decode_tokens, "query token"), r.generated_tokens);
  s += fmt::format(
      "  attention     {:.3f} s in run_attention (one layer per step): {:.0f} query tokens/s, "
      "{:.1f} GFLOP/s ({:.1f} GFLOP)\n",
      r.attention_s, safe_div(query_tokens, r.attention_s),
      safe_div(r.attention_flops * 1e-9, r.attention_s), r.attention_flops * 1e-9);
  s += fmt::format("  other time    write_kv {:.3f} s, plan {:.3f} s, verification {:.3f} s, "
                   "poisoning freed blocks {:.3f} s; wall {:.3f} s\n",
                   r.write_kv_s, r.plan_s, r.verify_s, r.poison_s, r.wall_s);
  s += fmt::format(
      "  KV memory     peak {} of {} in use ({} holding at most {})\n",
      r.peak_blocks_used, count(r.num_blocks, "block"),
      count(r.peak_blocks_used * r.model.block_size, "slot"), count(r.peak_kv_tokens, "token"));
  // A pool smaller than one reservation runs no request at all under contiguous allocation.
  const std::string contiguous_fit =
      r.contiguous_max_running == 0
          ? "the same pool could not hold one request's reservation"
          : fmt::format("the same pool would run at most {} at once",
                        count(r.contiguous_max_running, "request"));
  s += fmt::format(
      "                contiguous allocation (max_model_len {} reserved per request = {}) "
      "would need {} x {} = {} for the same {}: {:.2f}x the paged peak; {}\n",
      r.max_model_len, count(r.contiguous_blocks_per_request, "block"), r.peak_running,
      r.contiguous_blocks_per_request, count(r.contiguous_blocks_at_peak, "block"),
      count(r.peak_running, "running request"),
      safe_div(static_cast<double>(r.contiguous_blocks_at_peak),
               static_cast<double>(r.peak_blocks_used)),
      contiguous_fit);
  if (r.prefix_sharing) {
    s += fmt::format(
        "  prefix cache  {} saved ({}) and {} not computed, of {} prompt tokens in "
        "hash_ids prefixes; {} on write of a partial last block{}; a block leaves the table "
        "when its last user finishes\n",
        count(r.prefix_hit_blocks, "block allocation"),
        count(r.prefix_hit_blocks * r.model.block_size, "token"),
        count(r.prefix_hit_tokens, "prompt token"), r.prefix_tokens,
        r.prefix_copies == 1 ? std::string("1 copy") : fmt::format("{} copies", r.prefix_copies),
        r.samples.empty() ? std::string()
                          : fmt::format("; at most {} shared at a sample",
                                        count(r.peak_shared_blocks, "block")));
  }
  if (!r.samples.empty()) {
    auto gib = [](std::int64_t b) { return static_cast<double>(b) / 1073741824.0; };
    s += fmt::format(
        "  soak          {:.0f} s asked, {:.1f} s run, {} pass{} over the trace, {} waiting "
        "request{} not admitted at the deadline; blocks in use {} .. {} over {} samples{}\n",
        r.duration_s, r.wall_s, r.trace_passes, r.trace_passes == 1 ? "" : "es",
        r.requests_not_admitted, r.requests_not_admitted == 1 ? "" : "s",
        r.blocks_used_min, r.blocks_used_max, r.samples.size(),
        r.device_used_min >= 0 ? fmt::format("; device memory in use {:.2f} .. {:.2f} GiB",
                                             gib(r.device_used_min), gib(r.device_used_max))
                               : std::string());
  }
  if (!r.verified) {
    s += "  verification  SKIPPED (--verify-rows 0)\n";
  } else {
    s += fmt::format(
        "  verification  {} ({} prefill, {} decode) vs reference_attention, {} "
        "(out and lse): max |error| {:.3g}, worst {:.3g} of the tolerance ({}/{}: atol {:g}, "
        "rtol {:g}), {} failed\n",
        count(r.rows_checked, "row"), r.prefill_rows_checked, r.decode_rows_checked,
        count(r.elements_checked, "element"),
        r.max_abs_error, r.worst_ratio, to_string(r.dtype), to_string(r.kv_dtype), r.atol,
        r.rtol, r.elements_failed);
    s += fmt::format(
        "                KV cache of every request compared bit for bit at its finish: {}, "
        "{} mismatching\n",
        count(r.cache_tokens_checked, "token"), count(r.cache_mismatches, "element"));
    if (r.faults_injected > 0) {
      s += fmt::format(
          "  faults        {} injected ({} output, {} cache), {} detected; {} failure{} "
          "not explained by an injection\n",
          r.faults_injected, r.output_faults_injected, r.cache_faults_injected,
          r.faults_detected, r.unexpected_failures, r.unexpected_failures == 1 ? "" : "s");
    }
    if (!r.first_failure.empty()) s += fmt::format("  first failure {}\n", r.first_failure);
    s += fmt::format("  result        {}\n", r.pass ? "PASS" : "FAIL");
  }
  std::fputs(s.c_str(), stdout);
}

int run_run(const RunFlags& flags) {
  Result<serving::ReplayConfig> config = to_replay_config(flags);
  if (!config.ok()) return report_failure("run", config.status(), flags.json);
  if (!flags.report_file.empty()) {
    // A report that cannot be written is a usage error before the replay (a soak polled
    // through its report file must not run for minutes unseen). Nothing is written yet: bad
    // input found by the replay's set-up (a pool too small, an unreadable trace) must leave no
    // file; the first report is written after the first step.
    if (!report_file_writable(flags.report_file))
      return report_failure("run",
                            Status(StatusCode::kInvalidArgument,
                                   "--report " + flags.report_file +
                                       ": cannot write this file (missing folder or no "
                                       "permission)"),
                            flags.json);
  }
  if (config->device == serving::DeviceChoice::kAuto) {
    // Resolved here, as verify and explain resolve it, so that a CPU run on a machine without
    // a usable GPU says so on stderr instead of passing for the GPU's.
    Result<Device> device = resolve_device("auto");
    if (!device.ok()) return report_failure("run", device.status(), flags.json);
    config->device = device->type == DeviceType::kCUDA ? serving::DeviceChoice::kCUDA
                                                       : serving::DeviceChoice::kCPU;
  }
  // Progress on stderr, so that stdout stays the report (and valid JSON with --json): a line
  // each time another eighth of the requests has finished.
  std::int64_t next_mark = 0;
  serving::ProgressFn progress;
  const bool soak_lines = config->sample_interval_s > 0;
  bool report_write_failed = false;
  bool report_written = false;  // by this run: only then does an error report replace it
  if (!flags.quiet || !flags.report_file.empty()) {
    progress = [&next_mark, &flags, soak_lines, &report_write_failed, &report_written](
                   const serving::ReplayProgress& p) {
      if (!report_written && !flags.report_file.empty() && !(p.sample && p.report != nullptr)) {
        // The first step ran (set-up accepted the input): the file says so until the first
        // report line rewrites it.
        Json j;
        j["status"] = "starting";
        if (!write_report_file(flags.report_file, j)) report_write_failed = true;
        report_written = true;
      }
      if (p.sample && p.report != nullptr) {
        const serving::ReplayReport& r = *p.report;
        const serving::SoakSample& s = r.samples.back();
        if (!flags.quiet) {
          std::fprintf(
              stderr,
              "[soak %.0f s] %lld requests done (%lld running, %lld waiting), %lld steps, "
              "%lld tokens; checks %lld passed / %lld failed (+ %lld that caught an injected "
              "fault); faults %lld/%lld detected; "
              "blocks %lld in use, peak %lld, %lld shared; device %s\n",
              s.elapsed_s, static_cast<long long>(s.requests_finished),
              static_cast<long long>(p.running), static_cast<long long>(p.waiting),
              static_cast<long long>(s.steps), static_cast<long long>(s.tokens),
              static_cast<long long>(s.checks_passed), static_cast<long long>(s.checks_failed),
              static_cast<long long>(s.checks_detected_fault),
              static_cast<long long>(r.faults_detected),
              static_cast<long long>(r.faults_injected),
              static_cast<long long>(s.blocks_used), static_cast<long long>(s.peak_blocks_used),
              static_cast<long long>(s.shared_blocks),
              s.device_used_bytes >= 0
                  ? fmt::format("{:.2f} GiB in use ({:.2f} GiB the replay's)",
                                s.device_used_bytes / 1073741824.0,
                                s.replay_device_bytes / 1073741824.0)
                        .c_str()
                  : "n/a (cpu)");
        }
        if (!flags.report_file.empty()) {
          Json j = json_report(r);
          j["status"] = "running";
          if (!write_report_file(flags.report_file, j)) report_write_failed = true;
          report_written = true;
        }
      }
      if (flags.quiet || soak_lines) return;
      const std::int64_t eighth = std::max<std::int64_t>(1, p.total / 8);
      if (p.finished < next_mark && p.finished != p.total) return;
      next_mark = (p.finished / eighth + 1) * eighth;
      std::fprintf(stderr,
                   "[step %lld] %lld/%lld requests finished, %lld running, %lld waiting; "
                   "blocks %lld/%lld; %lld tokens; %.1f s%s\n",
                   static_cast<long long>(p.step), static_cast<long long>(p.finished),
                   static_cast<long long>(p.total), static_cast<long long>(p.running),
                   static_cast<long long>(p.waiting), static_cast<long long>(p.blocks_used),
                   static_cast<long long>(p.num_blocks), static_cast<long long>(p.tokens),
                   p.elapsed_s, p.verified_ok ? "" : "; MISMATCH seen");
    };
  }
  Result<serving::ReplayReport> report = serving::run_replay(*config, progress);
  if (!report.ok()) {
    // An error before the first step is the input's (or the device's): no file. One during
    // the replay replaces the running report, so that a poller sees why it stopped.
    if (report_written) {
      Json j;
      j["status"] = "error";
      j["error"] = report.status().to_string();
      (void)write_report_file(flags.report_file, j);
    }
    return report_failure("run", report.status(), flags.json);
  }
  if (!flags.report_file.empty() && !write_report_file(flags.report_file, json_report(*report))) {
    report_write_failed = true;
  }
  // A report asked for and not written is a failed run for whoever polls it (a soak's
  // driver): exit 2 after the replay's own output, not a warning under exit 0.
  if (report_write_failed) {
    std::fprintf(stderr, "pagedattn run: error: --report %s: could not write the report file\n",
                 flags.report_file.c_str());
  }
  if (flags.json) {
    std::printf("%s\n", json_report(*report).dump(2).c_str());
  } else {
    print_header(*report);
    print_report(*report);
  }
  if (!report->pass) return kExitMismatch;
  return report_write_failed ? kExitInvalid : kExitOk;
}

std::string list_traces() {
  std::string s;
  for (const serving::KnownTrace& t : serving::known_traces()) {
    s += fmt::format("{}{} ({})", s.empty() ? "" : ", ", t.name, t.file);
  }
  return s;
}

std::string list_models() {
  std::string s;
  for (const serving::ModelPreset& m : serving::model_presets()) {
    s += fmt::format("\n  {}: {}", m.name, m.description);
  }
  return s;
}

}  // namespace

Action register_run(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* sub = app.add_subcommand(
      "run",
      "replay the first N requests of a serving trace through a paged KV cache (block "
      "allocator, token-budget scheduler with chunked prefill) and paged attention, verifying "
      "every step against the oracle");
  sub->add_option("--device", f->device,
                  "cpu, cuda (= cuda:0) or auto (CUDA if available, else CPU)")
      ->capture_default_str();
  sub->add_option("--trace", f->trace,
                  "a shipped trace (" + list_traces() +
                      ") or the path of an Azure CSV / Mooncake JSONL file")
      ->capture_default_str();
  sub->add_option("--requests", f->requests, "replay the first N requests of the trace")
      ->capture_default_str();
  sub->add_option("--model", f->model, "model shape preset:" + list_models())
      ->capture_default_str();
  sub->add_option("--layout", f->layout, "cache layout: split, nhd or hnd")->capture_default_str();
  sub->add_option("--dtype", f->dtype, "query/output (and cache) dtype: fp32, fp16 or bf16")
      ->capture_default_str();
  sub->add_option("--kv-dtype", f->kv_dtype, "cache dtype: auto (= --dtype), fp8_e4m3, fp8_e5m2")
      ->capture_default_str();
  sub->add_option("--block-size", f->block_size, "tokens per cache block (0 = the model's)")
      ->capture_default_str();
  sub->add_option("--num-blocks", f->num_blocks,
                  "blocks in the cache pool (0 = auto: half of what all replayed requests "
                  "need together, but room for at least two of the largest)")
      ->capture_default_str();
  sub->add_option("--page-pad", f->page_pad,
                  "padding elements after each K/V block (-1 = the model's)")
      ->capture_default_str();
  sub->add_option("--token-budget", f->token_budget, "query tokens per step (decode + prefill)")
      ->capture_default_str();
  sub->add_option("--max-seqs", f->max_seqs, "requests running at once")->capture_default_str();
  sub->add_option("--max-prompt", f->max_prompt, "clip prompts to this many tokens (reported)")
      ->capture_default_str();
  sub->add_option("--max-output", f->max_output,
                  "clip generated tokens per request to this many (reported)")
      ->capture_default_str();
  sub->add_option("--max-model-len", f->max_model_len,
                  "tokens a contiguous allocator reserves per request, for the memory "
                  "comparison (0 = max-prompt + max-output)")
      ->capture_default_str();
  sub->add_option("--verify-rows", f->verify_rows,
                  "query rows checked against the oracle per step (always one decode and one "
                  "prefill row when present; 0 = no verification)")
      ->capture_default_str();
  sub->add_option("--seed", f->seed, "seed of Q/K/V values, free-list order and row samples")
      ->check(kNonNegativeInteger)
      ->capture_default_str();
  sub->add_option("--threads", f->threads, "CPU threads (0 = all)")->capture_default_str();
  sub->add_flag("--batch-invariant", f->batch_invariant,
                "plan every step with split points fixed in tokens (a request's bits do not "
                "depend on the other requests of its step)");
  // Hidden (empty group): proves that a corrupted output or cache makes the run fail (exit 1).
  sub->add_option("--inject-fault", f->inject_fault, "testing: none, output, cache or both")
      ->group("");
  sub->add_option("--fault-every", f->fault_every,
                  "testing: inject --inject-fault at every Nth step (both: by turns) and count "
                  "detections; the run passes when every injection is detected (0 = once, at "
                  "step 0, failing the run)")
      ->group("");
  sub->add_option("--prefix-sharing", f->prefix_sharing,
                  "share prefix blocks named by the trace's hash_ids (Mooncake): auto (= on "
                  "when the trace has them), on or off")
      ->capture_default_str();
  sub->add_option("--duration", f->duration,
                  "soak: keep admitting requests (cycling through the trace) for this many "
                  "seconds; at the deadline admission stops: waiting requests (even of the "
                  "first --requests) are dropped and reported, running ones finish and are "
                  "checked (0 = just --requests)")
      ->capture_default_str();
  sub->add_option("--report-interval", f->report_interval,
                  "seconds between soak report lines (and --report rewrites); default 30 with "
                  "--duration or --report, else none");
  sub->add_option("--report", f->report_file,
                  "write the JSON report to FILE, rewritten at every report line while running "
                  "(status \"running\") and at the end; first written after the first step, "
                  "never for input the run refuses");
  sub->add_flag("--json", f->json, "machine-readable final report on stdout");
  sub->add_flag("--quiet", f->quiet, "no progress lines on stderr");
  sub->footer(exit_status_help(/*can_mismatch=*/true));
  return [f] { return run_run(*f); };
}

}  // namespace pagedattn::cli
