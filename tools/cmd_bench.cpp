// `pagedattn bench`: decode (and mixed) workloads timed on a GPU against the read ceiling
// measured in the same run (DESIGN.md §6). Table on stdout; CSV and JSON on request.
#include <cmath>
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
#include "tools/commands.h"

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
  bool list_workloads = false;  // print the definitions as JSON, time nothing
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
    nlohmann::json row;
    row["name"] = w.name;
    row["description"] = w.description;
    row["group"] = w.group;
    row["num_heads"] = w.num_heads;
    row["num_kv_heads"] = w.num_kv_heads;
    row["head_size"] = w.head_size;
    row["block_size"] = w.block_size;
    row["dtype"] = to_string(w.dtype);
    row["kv_dtype"] = to_string(w.kv_dtype);
    row["page_pad"] = w.page_pad;
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

  std::vector<bench::Workload> all;
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
  for (auto& w : bench::standard_workloads(*layout, f.seed))
    if (wanted(w)) all.push_back(w);
  auto traces = bench::trace_workloads(*layout, f.seed);
  if (!traces.ok()) return usage(traces.status().to_string());
  for (auto& w : *traces)
    if (wanted(w)) all.push_back(w);
  for (auto& w : bench::sweep_workloads(*layout))
    if (wanted(w) || f.sweep) all.push_back(w);
  const char* names_help =
      " (names: W1..W7, T-conv-decode, T-conv-mixed, T-mooncake-decode, ctx-N, batch-N; groups: "
      "standard, trace, sweep-ctx, sweep-batch, all)";
  for (const std::string& name : wanted_list)
    if (!known.count(name)) return usage("--workloads: unknown name '" + name + "'" + names_help);
  if (all.empty()) return usage("--workloads '" + f.workloads + "' selects nothing" + names_help);
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
  fmt::print("timing: CUDA events, median of {} calls after {} warm-up, L2 {}\n\n", f.iters,
             f.warmup, flush_text);
  fmt::print("{:<18} {:<52} {:>9} {:>9} {:>9} {:>8} {:>7}  {}\n", "workload", "description",
             "us", "graph us", "GB/s", "%ceil", "splits", "kernel");

  cuda::bench::TimingOptions timing{f.warmup, f.iters, flush};
  std::vector<bench::BenchResult> results;
  int failures = 0;
  Status first_failure = Status::Ok();
  PlanOptions plan_options;
  plan_options.num_splits = f.splits;
  for (const auto& w : all) {
    auto r = bench::run_workload(w, 0, timing, *ceiling, f.seed, plan_options);
    if (!r.ok()) {
      fmt::print("{:<18} FAILED: {}\n", w.name, r.status().to_string());
      if (failures++ == 0) first_failure = r.status();
      continue;
    }
    fmt::print("{:<18} {:<52} {:>9.1f} {:>9} {:>9.0f} {:>7.1f}% {:>7}  {}\n", w.name,
               w.description, r->median_us,
               r->graph_median_us >= 0 ? fmt::format("{:.1f}", r->graph_median_us) : "-",
               r->gbps, r->pct_of_ceiling, r->choice.num_splits, kernel_label(r->choice));
    std::fflush(stdout);
    results.push_back(*r);
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
  for (const auto& r : results) {
    nlohmann::json row;
    row["name"] = r.workload.name;
    row["group"] = r.workload.group;
    row["description"] = r.workload.description;
    row["num_seqs"] = r.workload.seq_lens.size();
    std::int64_t total = 0;
    for (int l : r.workload.seq_lens) total += l;
    row["total_kv_tokens"] = total;
    row["max_seq_len"] = r.workload.seq_lens.empty() ? 0 :
        *std::max_element(r.workload.seq_lens.begin(), r.workload.seq_lens.end());
    row["num_heads"] = r.workload.num_heads;
    row["num_kv_heads"] = r.workload.num_kv_heads;
    row["head_size"] = r.workload.head_size;
    row["block_size"] = r.workload.block_size;
    row["page_pad"] = r.workload.page_pad;
    row["median_us"] = r.median_us;
    row["p10_us"] = r.p10_us;
    row["p90_us"] = r.p90_us;
    row["graph_median_us"] = r.graph_median_us;
    row["bytes"] = r.bytes;
    row["gbps"] = r.gbps;
    row["pct_of_ceiling"] = r.pct_of_ceiling;
    // The kernels that ran ("decode + prefill" when a mixed batch splits its rows), as in the
    // table; plan_kernel is KernelChoice::kernel, for a mixed batch the tiled fallback that
    // unaligned tensors would take.
    row["kernel"] = kernel_label(r.choice);
    row["plan_kernel"] = to_string(r.choice.kernel);
    row["splits"] = r.choice.num_splits;
    row["tile_tokens"] = r.choice.tile_tokens;
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
    o << "name,group,num_seqs,max_seq_len,total_kv_tokens,head_size,block_size,median_us,"
         "graph_median_us,gbps,pct_of_ceiling,kernel,splits\n";
    for (const auto& row : j["results"]) {
      o << row["name"].get<std::string>() << "," << row["group"].get<std::string>() << ","
        << row["num_seqs"] << "," << row["max_seq_len"] << "," << row["total_kv_tokens"] << ","
        << row["head_size"] << "," << row["block_size"] << "," << row["median_us"] << ","
        << row["graph_median_us"] << "," << row["gbps"] << "," << row["pct_of_ceiling"] << ","
        << row["kernel"].get<std::string>() << "," << row["splits"] << "\n";
    }
    if (!csv_out.flush()) return usage("--csv " + f.csv + ": write failed");
  }
  // A workload that failed to run: the exit status of its error (3 when the device went away).
  return failures ? exit_code_for(first_failure) : kExitOk;
}

}  // namespace

Action register_bench(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("bench", "Time decode workloads on the GPU against the "
                                              "measured read ceiling");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--device", flags->device,
                  "cuda (= cuda:0) or auto (the benchmark measures GPU kernels)");
  cmd->add_option("--layout", flags->layout, "split|nhd|hnd");
  cmd->add_option("--workloads", flags->workloads,
                  "comma list of names (W1..W7, T-conv-decode, ...) or groups (standard, trace, "
                  "sweep-ctx, sweep-batch, all)");
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
  cmd->add_option("--splits", flags->splits,
                  "KV splits per sequence for every workload (0: the planner chooses; an "
                  "experiment knob, PlanOptions::num_splits)");
  cmd->add_option("--seed", flags->seed, "seed of the data and of W4's lengths")
      ->check(kNonNegativeInteger);
  cmd->add_flag("--list-workloads", flags->list_workloads,
                "print every workload's definition (shapes, lengths, dtypes) as JSON and exit "
                "(no GPU needed)");
  cmd->footer(exit_status_help(/*can_mismatch=*/false));
  return [flags] { return run_bench(*flags); };
}

}  // namespace pagedattn::cli
