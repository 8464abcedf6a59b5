// `pagedattn bench`: decode (and mixed) workloads timed on a GPU against the read ceiling
// measured in the same run (DESIGN.md §6): the named workloads, any configuration in the
// flags of `pagedattn verify` (--config) and the dtype x head size x layout x batch-shape
// matrix (--matrix). Each workload's output is checked against the oracle before it is timed
// (--check). Table on stdout; CSV and JSON on request.
#include <algorithm>
#include <cmath>
#include <map>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench/runner.h"
#include "bench/workloads.h"
#include "pagedattn/pagedattn.h"
#include "tools/assumed_plan.h"
#include "tools/bench_config.h"
#include "tools/commands.h"
#include "tools/device_presets.h"
#include "tools/shape_plan.h"

namespace pagedattn::cli {

namespace {

/// The kernels a call runs, "decode + prefill" when a mixed batch splits its rows.
std::string kernel_label(const KernelChoice& c) {
  const RowKernels r = row_kernels(c);
  return r.decode == r.prefill ? r.prefill : r.decode + " + " + r.prefill;
}

struct BenchFlags {
  std::string device = "cuda";
  std::string layout = "nhd";
  std::string workloads = "standard,trace";
  bool sweep = false;
  int iters = 100;
  int warmup = 10;
  std::string flush;       // empty: not given (clean)
  bool no_flush = false;  // --flush none
  double ceiling_gb = 4.0;
  std::string csv;
  std::string json;
  std::uint64_t seed = 1;
  int splits = 0;
  bool batch_invariant = false;
  bool no_wgmma = false;
  bool wgmma_v1 = false;
  bool list_workloads = false;  // print the definitions as JSON, time nothing
  std::vector<std::string> configs;  // --config, each the text of verify's flags
  bool matrix = false;
  std::string matrix_filter;
  std::string check;        // empty: not given (sampled; auto for --config)
  double budget_ms = -1;    // -1: not given (0 for named workloads and --config, 100 for --matrix)
  bool list = false;
  bool lse = false;
  std::string assume_device;  // with --list: the decisions for a preset GPU
  /// Options whose presence matters (given or defaulted).
  const CLI::Option* workloads_option = nullptr;
  const CLI::Option* budget_option = nullptr;
};

/// One row to run: a named workload, or a --config / --matrix row (planned on shapes first).
struct Item {
  bench::Workload workload;
  PlanOptions plan;
  bench::CheckMode check = bench::CheckMode::kSampled;
  double budget_ms = 0;
  bool from_config = false;     // a --config or --matrix row: planned on shapes first
  testing::CaseConfig config;   // for those rows
  std::string even_row;         // matrix: the even row of a skewed one
};

/// A row's outcome for the table and the files.
struct Outcome {
  const Item* item = nullptr;
  std::string status;           // "ok", "unsupported", "mismatch", "failed"
  std::string reason;           // for the others
  bench::BenchResult result;
  double vs_even = 0;           // > 0: time / the even row's time
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

/// The fields that name a workload and give its shape, shared by --list-workloads and the
/// --json results (each adds its own lengths and outcome fields).
nlohmann::json workload_shape_json(const bench::Workload& w) {
  nlohmann::json row;
  row["name"] = w.name;
  row["group"] = w.group;
  row["description"] = w.description;
  row["num_heads"] = w.num_heads;
  row["num_kv_heads"] = w.num_kv_heads;
  row["head_size"] = w.head_size;
  row["block_size"] = w.block_size;
  row["page_pad"] = w.page_pad;
  row["dtype"] = to_string(w.dtype);
  row["kv_dtype"] = to_string(w.kv_dtype);
  return row;
}

/// `--list-workloads`: every workload definition (standard, trace, sweeps) as JSON on stdout,
/// for tools that must run other libraries on exactly these shapes and lengths
/// (bench/peers/run_peers.py). Needs no GPU.
int list_workloads(const BenchFlags& f) {
  auto layout = parse_layout(f.layout);
  if (!layout.ok()) {
    std::fprintf(stderr, "pagedattn bench: --layout: %s\n", layout.status().message().c_str());
    return kExitInvalid;
  }
  std::vector<bench::Workload> all = bench::standard_workloads(*layout, f.seed);
  auto traces = bench::trace_workloads(*layout, f.seed);
  if (!traces.ok()) {
    std::fprintf(stderr, "pagedattn bench: %s\n", traces.status().to_string().c_str());
    return exit_code_for(traces.status());
  }
  all.insert(all.end(), traces->begin(), traces->end());
  for (auto& w : bench::sweep_workloads(*layout)) all.push_back(w);
  nlohmann::json j;
  j["seed"] = f.seed;
  j["layout"] = f.layout;
  j["workloads"] = nlohmann::json::array();
  for (const auto& w : all) {
    nlohmann::json row = workload_shape_json(w);
    row["seq_lens"] = w.seq_lens;
    row["query_lens"] = w.query_lens;  // empty: every query length is 1
    row["graph"] = w.graph;
    row["useful_bytes"] = bench::useful_bytes(w);
    j["workloads"].push_back(row);
  }
  fmt::print("{}\n", j.dump());
  return kExitOk;
}

int run_bench(const BenchFlags& f) {
  if (f.list_workloads) return list_workloads(f);
  if (f.device == "cpu") {
    std::fprintf(stderr, "pagedattn bench: measures GPU kernels; --device cpu is not supported\n");
    return kExitInvalid;
  }
  // cuda:0 as verify and explain spell it; the buffers are allocated on device 0.
  if (f.device != "cuda" && f.device != "cuda:0" && f.device != "auto") {
    std::fprintf(stderr, "pagedattn bench: --device '%s': expected cuda (= cuda:0) or auto\n",
                 f.device.c_str());
    return kExitInvalid;
  }
  auto usage = [](const std::string& m) {
    std::fprintf(stderr, "pagedattn bench: %s\n", m.c_str());
    return kExitInvalid;
  };
  // Each timed call gets two CUDA events and a host time: a count past 10^6 is a typo that
  // would create billions of events before the first result (10^6 calls of the largest
  // workload already take minutes).
  constexpr int kMaxCalls = 1000000;
  if (f.iters < 1 || f.iters > kMaxCalls)
    return usage("--iters " + std::to_string(f.iters) + ": expected 1 .. " +
                 std::to_string(kMaxCalls));
  if (f.warmup < 0 || f.warmup > kMaxCalls)
    return usage("--warmup " + std::to_string(f.warmup) + ": expected 0 .. " +
                 std::to_string(kMaxCalls));
  if (f.splits < 0) return usage("--splits " + std::to_string(f.splits) + ": expected >= 0");
  if (!(std::isfinite(f.ceiling_gb) && f.ceiling_gb > 0 && f.ceiling_gb <= 64))
    return usage("--ceiling-gb " + fmt::format("{}", f.ceiling_gb) +
                 ": expected a value in (0, 64]");
  auto layout = parse_layout(f.layout);
  if (!layout.ok()) return usage("--layout: " + layout.status().message());
  if (f.no_flush && !f.flush.empty() && f.flush != "none")
    return usage("--no-flush contradicts --flush " + f.flush);
  cuda::bench::L2Flush flush = cuda::bench::L2Flush::kClean;
  if (f.no_flush || f.flush == "none") {
    flush = cuda::bench::L2Flush::kNone;
  } else if (f.flush == "dirty") {
    flush = cuda::bench::L2Flush::kDirty;
  } else if (!f.flush.empty() && f.flush != "clean") {
    return usage("--flush '" + f.flush + "': expected clean, dirty or none");
  }

  // Which rows: the named workloads (unless only --config / --matrix rows are asked for),
  // then the --config rows, then the matrix.
  const bool only_rows = (!f.configs.empty() || f.matrix) && !f.sweep &&
                         (f.workloads_option == nullptr || f.workloads_option->count() == 0);
  if (!f.matrix_filter.empty() && !f.matrix) return usage("--matrix-filter needs --matrix");
  bench::CheckMode check_named = bench::CheckMode::kSampled, check_rows = bench::CheckMode::kAuto,
                   check_matrix = bench::CheckMode::kSampled;
  if (!f.check.empty()) {
    auto m = bench::parse_check_mode(f.check, "--check");
    if (!m.ok()) return usage(m.status().message());
    check_named = check_rows = check_matrix = *m;
  }
  const bool budget_given = f.budget_option != nullptr && f.budget_option->count() > 0;
  if (budget_given && !(std::isfinite(f.budget_ms) && f.budget_ms >= 0 && f.budget_ms <= 1e6))
    return usage("--budget-ms " + fmt::format("{}", f.budget_ms) + ": expected 0 .. 10^6");
  std::vector<Item> items;
  auto add_named = [&](const bench::Workload& w) {
    Item it;
    it.workload = w;
    it.plan.num_splits = f.splits;
    it.plan.batch_invariant = f.batch_invariant;
    it.plan.no_wgmma_prefill = f.no_wgmma;
    it.plan.wgmma_prefill_v1 = f.wgmma_v1;
    it.check = check_named;
    it.budget_ms = std::max(0.0, f.budget_ms);
    items.push_back(std::move(it));
  };
  if (!only_rows) {
    const std::set<std::string> wanted_list = [&] {
      auto v = split_list(f.workloads);
      return std::set<std::string>(v.begin(), v.end());
    }();
    // Every listed name must name a workload or a group: a typo ("W1,W22") must not quietly
    // benchmark fewer workloads than asked.
    std::set<std::string> known{"all"};
    auto wanted = [&](const bench::Workload& w) {
      known.insert(w.name);
      known.insert(w.group);
      return wanted_list.count("all") || wanted_list.count(w.group) || wanted_list.count(w.name);
    };
    std::size_t named = 0;
    for (auto& w : bench::standard_workloads(*layout, f.seed))
      if (wanted(w)) add_named(w), ++named;
    auto traces = bench::trace_workloads(*layout, f.seed);
    if (!traces.ok()) return usage(traces.status().to_string());
    for (auto& w : *traces)
      if (wanted(w)) add_named(w), ++named;
    for (auto& w : bench::sweep_workloads(*layout))
      if (wanted(w) || f.sweep) add_named(w), ++named;
    for (auto& w : bench::prefill_workloads(*layout))
      if (wanted(w)) add_named(w), ++named;
    const char* names_help =
        " (names: W1..W7, T-conv-decode, T-conv-mixed, T-mooncake-decode, ctx-N, batch-N; "
        "groups: standard, trace, trace-parts (T-conv-mixed-decodes, T-conv-mixed-chunks), "
        "sweep-ctx, sweep-batch, prefill (P-chunks-8k, P-fresh-8k, ...), "
        "all)";
    for (const std::string& name : wanted_list)
      if (!known.count(name)) return usage("--workloads: unknown name '" + name + "'" + names_help);
    if (named == 0) return usage("--workloads '" + f.workloads + "' selects nothing" + names_help);
  }
  auto add_row = [&](const BenchRow& row, const std::string& group, bench::CheckMode check,
                     double budget) {
    Item it;
    it.workload = to_workload(row.config, row.name, group);
    it.plan = row.config.plan;
    it.plan.batch_invariant |= f.batch_invariant;
    it.plan.no_wgmma_prefill |= f.no_wgmma;
    it.plan.wgmma_prefill_v1 |= f.wgmma_v1;
    it.check = check;
    it.budget_ms = budget;
    it.from_config = true;
    it.config = row.config;
    it.even_row = row.even_row;
    items.push_back(std::move(it));
  };
  for (std::size_t i = 0; i < f.configs.size(); ++i) {
    auto c = parse_bench_config(f.configs[i], f.seed, f.splits);
    if (!c.ok()) return usage(c.status().message());
    add_row(BenchRow{"config-" + std::to_string(i + 1), *c, ""}, "config", check_rows,
            std::max(0.0, f.budget_ms));
  }
  if (f.matrix) {
    const auto rows = filter_rows(matrix_rows(f.seed, f.splits), f.matrix_filter);
    if (rows.empty())
      return usage("--matrix-filter '" + f.matrix_filter +
                   "' selects no row (names are <dtype>/h<head>/<layout>/<lengths>, e.g. "
                   "fp8_e4m3/h128/split/255x512+1x131072; every comma-separated term must "
                   "occur)");
    for (const BenchRow& r : rows)
      add_row(r, "matrix", check_matrix, f.budget_ms >= 0 ? f.budget_ms : 100.0);
  }
  for (Item& it : items) it.workload.lse = f.lse;
  if (!f.assume_device.empty() && !f.list)
    return usage("--assume-device needs --list (timing needs the real GPU)");
  if (f.list) {
    if (f.assume_device.empty()) {
      for (const Item& it : items)
        fmt::print("{:<36} {}\n", it.workload.name, it.workload.description);
      return kExitOk;
    }
    // What select_kernel would choose for each row on the preset, without a GPU.
    auto preset = assumed_device(f.assume_device);
    if (!preset.ok()) return usage(preset.status().message());
    fmt::print("# select_kernel's decision on {} (no GPU queried; the CUDA backend's plan-time "
               "refinements, such as the small-call kernel of a one-wave decode, are not "
               "made)\n",
               preset->name);
    fmt::print("{:<36} {:>7}  {:<26} {}\n", "row", "splits", "kernel", "description");
    for (const Item& it : items) {
      const testing::CaseConfig c =
          it.from_config ? it.config : to_case_config(it.workload, it.plan);
      auto choice = select_on_assumed_device(c, *preset, it.workload.lse);
      if (!choice.ok()) {
        fmt::print("{:<36} {}: {}\n", it.workload.name,
                   choice.status().code() == StatusCode::kUnsupported ? "unsupported" : "invalid",
                   choice.status().message());
        continue;
      }
      fmt::print("{:<36} {:>7}  {:<26} {}\n", it.workload.name, choice->num_splits,
                 kernel_label(*choice), it.workload.description);
    }
    return kExitOk;
  }
  auto info = query_device(Device::cuda(0));
  if (!info.ok()) return report_failure("bench", info.status(), false);
  // A bad output path fails before any GPU work, without truncating an existing file (the
  // results replace it only once the run has succeeded).
  for (const auto& [path, flag] : {std::pair<const std::string&, const char*>{f.json, "--json"},
                                   std::pair<const std::string&, const char*>{f.csv, "--csv"}}) {
    if (path.empty()) continue;
    const bool existed = static_cast<bool>(std::ifstream(path));
    const bool ok = static_cast<bool>(std::ofstream(path, std::ios::app));
    if (!existed && ok) std::remove(path.c_str());
    if (!ok) return usage(std::string(flag) + " " + path + ": cannot open for writing");
  }

  auto dev = cuda::bench::device_summary(0);
  auto ceiling = cuda::bench::read_ceiling_gbps(
      0, static_cast<std::size_t>(f.ceiling_gb * 1e9) / 16 * 16, 20);
  if (!ceiling.ok()) {
    std::fprintf(stderr, "pagedattn bench: read ceiling: %s\n", ceiling.status().to_string().c_str());
    return exit_code_for(ceiling.status());
  }
  fmt::print("device: {} ({} SMs, L2 {} MB)\n", dev.ok() ? dev->name : "?", dev.ok() ? dev->sms : 0,
             dev.ok() ? dev->l2_bytes >> 20 : 0);
  fmt::print("read ceiling: {:.0f} GB/s ({:.1f} GB read with 16-byte loads, the fastest of 4 "
             "configurations, median of 20 each)\n",
             *ceiling, f.ceiling_gb);
  // What the flush costs a pure read of about a workload's size (W1 reads 1.07 GB): the
  // ceiling kernel on 1 GiB, timed as the workloads are.
  double flushed_read = 0;
  if (flush != cuda::bench::L2Flush::kNone) {
    auto r = cuda::bench::read_ceiling_gbps(0, std::size_t{1} << 30, 20, flush);
    if (!r.ok()) {
      std::fprintf(stderr, "pagedattn bench: flushed read: %s\n", r.status().to_string().c_str());
      return exit_code_for(r.status());
    }
    flushed_read = *r;
    fmt::print("read kernel on 1 GiB under the flush: {:.0f} GB/s ({:.1f}% of the ceiling)\n",
               flushed_read, 100.0 * flushed_read / *ceiling);
  }
  const char* flush_text =
      flush == cuda::bench::L2Flush::kNone ? "not flushed"
      : flush == cuda::bench::L2Flush::kDirty
          ? "flushed before each call by a write of 2 x L2 (left dirty)"
          : "flushed before each call by a write and a read of 2 x L2 (left clean)";
  fmt::print("timing: CUDA events, median of {} calls after {} warm-up, L2 {}\n", f.iters,
             f.warmup, flush_text);
  if (std::any_of(items.begin(), items.end(), [](const Item& it) { return it.budget_ms > 0; }))
    fmt::print("  (--config / --matrix rows: as many calls as fit {} ms of kernel time, at least "
               "5, at most {}; the 'iters' field of --json says how many)\n",
               f.budget_ms >= 0 ? f.budget_ms : 100.0, f.iters);
  fmt::print("check: each row's output is compared with the oracle before it is timed "
             "(--check; cache memory no call may read holds NaN then)\n"
             "bytes: K/V of the tokens each row reads at its cache dtype (fp8: 1 byte per "
             "element) + query + output\n\n");

  cuda::bench::TimingOptions timing{f.warmup, f.iters, flush};
  std::vector<Outcome> outcomes;
  std::map<std::string, double> row_us;  // name -> median, for the skewed / even ratio
  int failures = 0, mismatches = 0;
  Status first_failure = Status::Ok();
  bool header_named = false, header_rows = false;
  for (const Item& it : items) {
    const bench::Workload& w = it.workload;
    Outcome o;
    o.item = &it;
    if (!it.from_config && !header_named) {
      fmt::print("{:<18} {:<52} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7}  {:<26} {}\n", "workload",
                 "description", "us", "graph us", "GB/s", "%ceil", "TFLOP/s", "splits", "kernel",
                 "check");
      header_named = true;
    }
    if (it.from_config && !header_rows) {
      fmt::print("{}{:<36} {:>9} {:>9} {:>8} {:>7} {:>8}  {:<26} {}\n", header_named ? "\n" : "",
                 "row", "us", "GB/s", "%ceil", "splits", "vs even", "kernel", "check");
      header_rows = true;
    }
    // --config / --matrix rows: what the library refuses, or what could not fit, is found on
    // shapes before anything is allocated.
    Status st = Status::Ok();
    if (it.from_config) {
      auto shaped = plan_on_shapes(it.config, w.lse);
      if (!shaped.ok()) st = shaped.status();
    }
    Result<bench::BenchResult> r = st;
    if (st.ok()) {
      bench::RunOptions run;
      run.check = it.check;
      run.budget_ms = it.budget_ms;
      r = bench::run_workload(w, 0, timing, *ceiling, it.from_config ? it.config.seed : f.seed,
                              it.plan, run);
    }
    if (!r.ok()) {
      o.status = r.status().code() == StatusCode::kUnsupported ? "unsupported" : "failed";
      o.reason = r.status().message();
      if (o.status == "unsupported") {
        fmt::print("{:<36} unsupported: {}\n", w.name, o.reason);
      } else {
        fmt::print("{:<36} FAILED: {}\n", w.name, r.status().to_string());
        if (failures++ == 0) first_failure = r.status();
      }
      outcomes.push_back(o);
      std::fflush(stdout);
      continue;
    }
    o.result = *r;
    const bench::CheckReport& ck = r->check;
    const std::string check_text =
        ck.mode == bench::CheckMode::kNone
            ? "-"
            : fmt::format("{} {} {:.2g}", ck.pass ? "pass" : "FAIL", bench::to_string(ck.mode),
                          ck.worst_ratio);
    if (!ck.pass) {
      o.status = "mismatch";
      o.reason = ck.detail;
      ++mismatches;
      fmt::print("{:<36} MISMATCH (not timed; kernel {}, {} splits): {}\n", w.name,
                 kernel_label(r->choice), r->choice.num_splits, ck.detail);
      outcomes.push_back(o);
      std::fflush(stdout);
      continue;
    }
    o.status = "ok";
    row_us[w.name] = r->median_us;
    if (!it.even_row.empty() && row_us.count(it.even_row) && row_us[it.even_row] > 0)
      o.vs_even = r->median_us / row_us[it.even_row];
    if (it.from_config) {
      fmt::print("{:<36} {:>9.1f} {:>9.0f} {:>7.1f}% {:>7} {:>8}  {:<26} {}\n", w.name,
                 r->median_us, r->gbps, r->pct_of_ceiling, r->choice.num_splits,
                 o.vs_even > 0 ? fmt::format("{:.2f}x", o.vs_even) : "-", kernel_label(r->choice),
                 check_text);
      if (it.workload.group == "config") fmt::print("  {}\n", w.description);
    } else {
      fmt::print("{:<18} {:<52} {:>9.1f} {:>9} {:>9.0f} {:>7.1f}% {:>7.1f} {:>7}  {:<26} {}\n",
                 w.name, w.description, r->median_us,
                 r->graph_median_us >= 0 ? fmt::format("{:.1f}", r->graph_median_us) : "-",
                 r->gbps, r->pct_of_ceiling, r->tflops, r->choice.num_splits,
                 kernel_label(r->choice), check_text);
    }
    std::fflush(stdout);
    outcomes.push_back(o);
  }

  nlohmann::json j;
  j["device"] = dev.ok() ? dev->name : "";
  j["sms"] = dev.ok() ? dev->sms : 0;
  j["l2_bytes"] = dev.ok() ? dev->l2_bytes : 0;
  j["warmup"] = f.warmup;
  j["read_ceiling_gbps"] = *ceiling;
  j["layout"] = f.layout;
  j["iters"] = f.iters;
  j["l2_flushed"] = flush != cuda::bench::L2Flush::kNone;
  j["l2_flush"] = cuda::bench::to_string(flush);
  if (flushed_read > 0) j["flushed_read_gbps"] = flushed_read;
  j["forced_splits"] = f.splits;
  j["batch_invariant"] = f.batch_invariant;
  if (!f.configs.empty()) j["configs"] = f.configs;
  if (f.matrix) j["matrix_filter"] = f.matrix_filter;
  j["results"] = nlohmann::json::array();
  for (const Outcome& o : outcomes) {
    const bench::Workload& w = o.item->workload;
    nlohmann::json row = workload_shape_json(w);
    row["status"] = o.status;
    if (!o.reason.empty()) row["reason"] = o.reason;
    row["num_seqs"] = w.seq_lens.size();
    std::int64_t total = 0;
    for (int l : w.seq_lens) total += l;
    row["total_kv_tokens"] = total;
    row["max_seq_len"] = w.seq_lens.empty() ? 0 :
        *std::max_element(w.seq_lens.begin(), w.seq_lens.end());
    row["layout"] = to_string(w.layout);
    row["lse"] = w.lse;
    row["batch_invariant"] = o.item->plan.batch_invariant;
    if (w.softcap > 0 || w.sliding_window > 0 || w.alibi || w.sinks)
      row["features"] = {{"softcap", w.softcap}, {"sliding_window", w.sliding_window},
                         {"alibi", w.alibi}, {"sinks", w.sinks}};
    if (o.status == "unsupported" || o.status == "failed") {
      j["results"].push_back(row);
      continue;
    }
    const bench::BenchResult& r = o.result;
    const bench::CheckReport& ck = r.check;
    row["check"] = {{"mode", bench::to_string(ck.mode)},
                    {"pass", ck.pass},
                    {"seqs", ck.seqs_checked},
                    {"heads", ck.heads_checked},
                    {"elements", ck.elements},
                    {"max_abs_error", std::isfinite(ck.max_abs_error)
                                          ? nlohmann::json(ck.max_abs_error)
                                          : nlohmann::json(nullptr)},
                    {"worst_ratio", std::isfinite(ck.worst_ratio) ? nlohmann::json(ck.worst_ratio)
                                                                  : nlohmann::json(nullptr)}};
    row["kernel"] = kernel_label(r.choice);
    row["plan_kernel"] = to_string(r.choice.kernel);
    row["splits"] = r.choice.num_splits;
    row["tile_tokens"] = r.choice.tile_tokens;
    row["bytes"] = r.bytes;
    if (o.status == "mismatch") {
      j["results"].push_back(row);
      continue;
    }
    row["median_us"] = r.median_us;
    row["p10_us"] = r.p10_us;
    row["p90_us"] = r.p90_us;
    row["graph_median_us"] = r.graph_median_us;
    row["iters"] = r.iters;
    row["gbps"] = r.gbps;
    row["pct_of_ceiling"] = r.pct_of_ceiling;
    row["tflops"] = r.tflops;
    // The kernels that ran ("decode + prefill" when a mixed batch splits its rows), as in the
    // table; plan_kernel is KernelChoice::kernel, for a mixed batch the tiled fallback that
    // unaligned tensors would take.
    if (!o.item->even_row.empty()) {
      row["even_row"] = o.item->even_row;
      row["vs_even"] = o.vs_even > 0 ? nlohmann::json(o.vs_even) : nlohmann::json(nullptr);
    }
    j["results"].push_back(row);
  }
  std::ofstream json_out, csv_out;
  if (!f.json.empty()) json_out.open(f.json);
  if (!f.csv.empty()) csv_out.open(f.csv);
  if (!f.json.empty() && !json_out) return usage("--json " + f.json + ": cannot open for writing");
  if (!f.csv.empty() && !csv_out) return usage("--csv " + f.csv + ": cannot open for writing");
  if (json_out.is_open()) {
    json_out << j.dump(2) << "\n";
    if (!json_out.flush()) return usage("--json " + f.json + ": write failed");
  }
  if (csv_out.is_open()) {
    std::ostream& o = csv_out;
    // The first 13 columns as before --config and --matrix; the new ones after them.
    o << "name,group,num_seqs,max_seq_len,total_kv_tokens,head_size,block_size,median_us,"
         "graph_median_us,gbps,pct_of_ceiling,kernel,splits,status,dtype,kv_dtype,layout,"
         "vs_even,check\n";
    auto get = [](const nlohmann::json& row, const char* key) {
      return row.contains(key) && !row[key].is_null()
                 ? (row[key].is_string() ? row[key].get<std::string>() : row[key].dump())
                 : std::string();
    };
    for (const auto& row : j["results"]) {
      std::string check;
      if (row.contains("check"))
        check = row["check"]["mode"].get<std::string>() + ":" +
                (row["check"]["pass"].get<bool>() ? "pass" : "FAIL");
      o << get(row, "name") << "," << get(row, "group") << "," << get(row, "num_seqs") << ","
        << get(row, "max_seq_len") << "," << get(row, "total_kv_tokens") << ","
        << get(row, "head_size") << "," << get(row, "block_size") << ","
        << get(row, "median_us") << "," << get(row, "graph_median_us") << ","
        << get(row, "gbps") << "," << get(row, "pct_of_ceiling") << "," << get(row, "kernel")
        << "," << get(row, "splits") << "," << get(row, "status") << "," << get(row, "dtype")
        << "," << get(row, "kv_dtype") << "," << get(row, "layout") << ","
        << get(row, "vs_even") << "," << check << "\n";
    }
    if (!csv_out.flush()) return usage("--csv " + f.csv + ": write failed");
  }
  // A mismatch is exit status 1 (as for verify); a row that failed to run, the exit status of
  // its error (3 when the device went away). Unsupported matrix rows are results, not errors.
  if (failures) return exit_code_for(first_failure);
  return mismatches ? kExitMismatch : kExitOk;
}

}  // namespace

Action register_bench(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("bench", "Time decode workloads on the GPU against the "
                                              "measured read ceiling");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--device", flags->device,
                  "cuda (= cuda:0) or auto (the benchmark measures GPU kernels)");
  cmd->add_option("--layout", flags->layout, "split|nhd|hnd (of the named workloads)");
  flags->workloads_option =
      cmd->add_option("--workloads", flags->workloads,
                      "comma list of names (W1..W7, T-conv-decode, ...) or groups (standard, "
                      "trace, trace-parts, sweep-ctx, sweep-batch, prefill, all); with --config or "
                      "--matrix only when given");
  cmd->add_option("--config", flags->configs,
                  "time one configuration given in the flags of `pagedattn verify`, quoted "
                  "('--head-size 256 --kv-dtype fp8_e4m3 --layout split --seq-lens "
                  "1x32768,63x512'), over the W1 shape (32/8 heads, head 128, block 16, bf16, "
                  "nhd, 64 x 4096 decode); --seq-lens / --query-lens also take COUNTxLENGTH "
                  "terms; repeat for more rows; '' is W1 itself; a lone flag as "
                  "--config='--alibi'")
      ->take_all();
  cmd->add_flag("--matrix", flags->matrix,
                "time the matrix at the W1 shape: bf16 / fp16 / fp8_e4m3 / fp8_e5m2 cache x head "
                "size 64, 80, 96, 128, 256, 512 x nhd / split x 64x4096, 64x1016, "
                "1x32768+63x512, 256x1022, 255x512+1x131072 (skewed rows print their time over "
                "the even row's with the same tokens)");
  cmd->add_option("--matrix-filter", flags->matrix_filter,
                  "only the matrix rows whose name (<dtype>/h<head>/<layout>/<lengths>) "
                  "contains every comma-separated term, e.g. 'fp8_e4m3/,/split/'")
      ->check(kNonEmpty);
  cmd->add_option("--check", flags->check,
                  "compare one call's output with the oracle before timing: sampled (the "
                  "default for workloads and --matrix: first, longest and last sequence, query "
                  "heads 0 and last; every output element finite), full, auto (the default for "
                  "--config: full when the oracle's work is small), none")
      ->check(kNonEmpty);
  CLI::Option* budget =
      cmd->add_option("--budget-ms", flags->budget_ms,
                      "kernel time per row for the timed calls (at least 5 calls, at most "
                      "--iters); 0 = always --iters (default: 100 for --matrix rows, 0 "
                      "otherwise)");
  budget->default_str("");
  flags->budget_option = budget;
  cmd->add_flag("--lse", flags->lse,
                "every row also writes the log-sum-exp output (fp32 [tokens, heads]; its bytes "
                "count, and the check compares it with the oracle's)");
  cmd->add_flag("--list", flags->list,
                "print the rows that would run (name, description) and exit, without a GPU");
  cmd->add_option("--assume-device", flags->assume_device,
                  std::string("with --list: also the kernel and splits select_kernel chooses for "
                              "each row on a preset GPU (") +
                      kAssumableDevices + "), in any build")
      ->check(kNonEmpty);
  cmd->add_flag("--sweep", flags->sweep, "also run the context-length and batch-size sweeps");
  cmd->add_option("--iters", flags->iters, "timed calls per workload (median reported)");
  cmd->add_option("--warmup", flags->warmup, "untimed calls first");
  cmd->add_option("--flush", flags->flush,
                  "how the L2 is flushed before each call: clean (the default: a write then a "
                  "read of 2 x L2, no dirty lines left), dirty (the write only: the call pays "
                  "the write-back), none")
      ->check(kNonEmpty);
  cmd->add_flag("--no-flush", flags->no_flush, "same as --flush none");
  cmd->add_option("--ceiling-gb", flags->ceiling_gb, "GB read by the read-ceiling kernel");
  cmd->add_option("--csv", flags->csv, "write results as CSV")->check(kNonEmpty);
  cmd->add_option("--json", flags->json, "write results as JSON")->check(kNonEmpty);
  cmd->add_flag("--wgmma-v1", flags->wgmma_v1,
                "on Hopper, the first wgmma prefill kernel instead of the warp-specialised one "
                "(PlanOptions::wgmma_prefill_v1), to compare the two");
  cmd->add_flag("--no-wgmma", flags->no_wgmma,
                "keep the mma.sync prefill kernel on Hopper (PlanOptions::no_wgmma_prefill), "
                "to compare it with the wgmma one");
  cmd->add_option("--splits", flags->splits,
                  "KV splits per sequence for every workload (0: the planner chooses; an "
                  "experiment knob, PlanOptions::num_splits)");
  cmd->add_flag("--batch-invariant", flags->batch_invariant,
                "plan every workload with PlanOptions::batch_invariant (split points fixed in "
                "tokens), to measure what the mode costs");
  cmd->add_option("--seed", flags->seed, "seed of the data and of W4's lengths")
      ->check(kNonNegativeInteger);
  cmd->add_flag("--list-workloads", flags->list_workloads,
                "print every workload's definition (shapes, lengths, dtypes) as JSON and exit "
                "(no GPU needed)");
  cmd->footer("Exit status: 0 success, 1 an output differs from the oracle (that row is not "
              "timed), 2 invalid input or usage, 3 requested device unavailable. Matrix rows "
              "the library does not support print 'unsupported: <reason>' and are no error.");
  return [flags] { return run_bench(*flags); };
}

}  // namespace pagedattn::cli
