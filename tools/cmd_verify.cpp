// `pagedattn verify`: run one configuration from the flags, or the named cases of the test
// matrix (`--cases all|GLOB`, the GoogleTest names; `--list-cases` prints them), on a device
// against the oracle.
// Exit status (DESIGN.md §7): 0 all pass, 1 a result mismatch, 2 invalid input or usage,
// 3 device unavailable.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/testing/harness.h"
#include "src/testing/invariance.h"
#include "tools/commands.h"
#include "tools/config_flags.h"
#include "tools/shape_plan.h"

namespace pagedattn::cli {

namespace {

struct VerifyFlags {
  ConfigFlags config;
  std::string cases;
  bool quick = false;
  bool list_cases = false;
  /// The configuration flags the user gave (named cases carry their own configuration).
  std::vector<std::string> config_flags_given;
};

/// Configuration flags, which --cases, --quick and --list-cases exclude.
constexpr const char* kConfigFlagNames[] = {
    "--layout",         "--num-heads", "--num-kv-heads", "--head-size",   "--block-size",
    "--dtype",          "--kv-dtype",  "--seq-lens",     "--query-lens",  "--sliding-window",
    "--softcap",        "--alibi",     "--sinks",        "--page-pad",    "--seed",
    "--k-scale",        "--v-scale",   "--tile-tokens",  "--num-splits",  "--scales",
    "--batch-invariant"};

nlohmann::json case_json(const testing::CaseConfig& c, const testing::CaseResult& r) {
  nlohmann::json j;
  j["name"] = c.name;
  j["status"] = to_string(r.status.code());
  if (!r.status.ok()) j["message"] = r.status.message();
  j["pass"] = r.status.ok() && r.pass;
  if (r.status.ok()) {
    j["kernel"] = to_string(r.choice.kernel);
    j["tile_tokens"] = r.choice.tile_tokens;
    j["num_splits"] = r.choice.num_splits;
    // JSON has no infinity: an unexpected non-finite element (NaN where the oracle has a
    // number, or a number where it has NaN; NaN where the oracle has NaN is a match) makes the
    // error unbounded, reported as null with "nan_seen".
    const bool finite = std::isfinite(r.max_abs_error) && std::isfinite(r.worst_ratio);
    j["max_abs_error"] = finite ? nlohmann::json(r.max_abs_error) : nlohmann::json(nullptr);
    j["worst_ratio"] = finite ? nlohmann::json(r.worst_ratio) : nlohmann::json(nullptr);
    j["nan_seen"] = !finite;
    j["elements_checked"] = r.elements_checked;
    j["writer_exact"] = r.writer_exact;
    j["run_ms"] = r.run_ms;
    if (!r.detail.empty()) j["detail"] = r.detail;
  }
  return j;
}

/// `verify --batch-invariant` (one configuration) also checks what the option promises: every
/// sequence's rows are bit-identical alone and in the batch. The check draws its own inputs
/// (testing::check_each_sequence_alone) with the configuration's shapes, dtypes, window,
/// softcap, ALiBi, sinks and plan options.
testing::EachAloneResult check_invariance(const testing::CaseConfig& c) {
  testing::InvarianceConfig ic;
  ic.device = c.device;
  ic.layout = c.layout;
  ic.num_heads = c.num_heads;
  ic.num_kv_heads = c.num_kv_heads;
  ic.head_size = c.head_size;
  ic.block_size = c.block_size;
  ic.dtype = c.dtype;
  ic.kv_dtype = c.kv_dtype;
  ic.sliding_window = c.sliding_window;
  ic.softcap = c.softcap;
  ic.alibi = c.alibi;
  ic.sinks = c.sinks;
  ic.plan = c.plan;
  ic.seed = c.seed;
  std::vector<std::pair<int, int>> batch;
  for (std::size_t i = 0; i < c.seq_lens.size(); ++i)
    batch.emplace_back(c.seq_lens[i], i < c.query_lens.size() ? c.query_lens[i] : 1);
  return testing::check_each_sequence_alone(ic, batch);
}

nlohmann::json invariance_json(const testing::EachAloneResult& inv) {
  nlohmann::json j;
  j["status"] = to_string(inv.status.code());
  if (!inv.status.ok()) j["message"] = inv.status.message();
  j["pass"] = inv.status.ok() && inv.differing.empty();
  j["sequences_checked"] = inv.checked;
  j["sequences_differing"] = inv.differing;
  if (!inv.detail.empty()) j["detail"] = inv.detail;
  return j;
}

int run_verify(const VerifyFlags& flags) {
  const bool json_out = flags.config.json;
  const bool named = !flags.cases.empty() || flags.quick || flags.list_cases;
  // Named cases carry their own configuration and seed: a configuration flag next to them
  // would be silently ignored, so it is a usage error.
  if (named && !flags.config_flags_given.empty()) {
    const char* which = !flags.cases.empty() ? "--cases" : flags.quick ? "--quick" : "--list-cases";
    std::string given;
    for (const std::string& g : flags.config_flags_given) given += (given.empty() ? "" : ", ") + g;
    return report_failure(
        "verify",
        Status(StatusCode::kInvalidArgument,
               std::string(which) + " selects named cases, which carry their own configuration: " +
                   given + (flags.config_flags_given.size() == 1 ? " is" : " are") +
                   " not allowed with it"),
        json_out);
  }
  // Listing runs nothing: no note about the device, and --device cuda lists the GPU's cases
  // (which add some to the CPU's) on a machine without one.
  auto device = resolve_device(flags.config.device, /*quiet=*/flags.list_cases);
  if (!device.ok()) return report_failure("verify", device.status(), json_out);

  std::vector<testing::CaseConfig> cases;
  if (named) {
    std::vector<std::string> unmatched;
    cases = testing::select_cases(testing::matrix_cases(*device, flags.quick),
                                  flags.cases.empty() ? "all" : flags.cases, &unmatched);
    // A pattern that selects nothing is a typo even when its neighbours in the list select
    // cases: running the rest would hide it.
    if (cases.empty() || !unmatched.empty()) {
      std::string which;
      for (const std::string& u : unmatched) which += (which.empty() ? "'" : ", '") + u + "'";
      const std::string subset = flags.quick ? " of the --quick subset" : "";
      const std::string msg =
          cases.empty() ? "--cases " + flags.cases + " matches no case" + subset
                        : "--cases: " + which + (unmatched.size() == 1 ? " matches" : " match") +
                              " no case" + subset + " (the other patterns do)";
      return report_failure("verify", Status(StatusCode::kInvalidArgument, msg), json_out);
    }
    if (flags.list_cases) {
      if (json_out) {
        nlohmann::json names = nlohmann::json::array();
        for (const testing::CaseConfig& c : cases) names.push_back(c.name);
        std::printf("%s\n", names.dump(2).c_str());
      } else {
        for (const testing::CaseConfig& c : cases) std::printf("%s\n", c.name.c_str());
      }
      return kExitOk;
    }
  } else {
    auto c = to_case_config(flags.config, *device);
    if (!c.ok()) return report_failure("verify", c.status(), json_out);
    // What the library rejects (a head size it has no kernel for, a cache it cannot address)
    // is found on shapes, before run_case builds inputs that grow with the flags.
    auto shaped = plan_on_shapes(*c, c->lse);
    if (!shaped.ok()) return report_failure("verify", shaped.status(), json_out);
    if (device->type == DeviceType::kCPU && c->plan.num_splits > 1)
      std::fprintf(stderr, "note: --num-splits %d has no effect on the CPU: its backend never splits\n",
                   c->plan.num_splits);
    cases.push_back(*c);
  }

  int passed = 0, failed = 0, errors = 0;
  bool no_device = false;
  nlohmann::json report;
  report["device"] = to_string(*device);
  report["cases"] = nlohmann::json::array();
  const bool json = flags.config.json;
  if (!json)
    std::printf("%-72s %-26s %10s %8s  %s\n", "case", "kernel", "max_err", "ratio", "result");
  for (const testing::CaseConfig& c : cases) {
    testing::CaseResult r = testing::run_case(c);
    // One configuration from the flags with --batch-invariant: the promise is checked too.
    const bool check_inv = !named && c.plan.batch_invariant && r.status.ok();
    testing::EachAloneResult inv;
    if (check_inv) {
      inv = check_invariance(c);
      if (!inv.status.ok()) {
        r.status = inv.status;
      } else if (!inv.differing.empty()) {
        r.pass = false;
      }
    }
    if (!r.status.ok()) {
      ++errors;
      no_device |= r.status.code() == StatusCode::kDeviceUnavailable;
    } else if (r.pass) {
      ++passed;
    } else {
      ++failed;
    }
    if (json) {
      nlohmann::json j = case_json(c, r);
      if (check_inv) j["batch_invariance"] = invariance_json(inv);
      report["cases"].push_back(j);
      continue;
    }
    if (!r.status.ok()) {
      std::printf("%-72s %-26s %10s %8s  ERROR\n", c.name.c_str(), "-", "-", "-");
      std::fprintf(stderr, "  %s: %s\n", c.name.c_str(), r.status.to_string().c_str());
      continue;
    }
    std::printf("%-72s %-26s %10.3g %8.3g  %s\n", c.name.c_str(), to_string(r.choice.kernel),
                r.max_abs_error, r.worst_ratio, r.pass ? "PASS" : "FAIL");
    if (!r.pass && !r.detail.empty()) std::printf("  %s\n", r.detail.c_str());
    if (check_inv) {
      if (inv.differing.empty()) {
        std::printf("  batch invariance: %d of %d sequence%s bit-identical alone and in the batch\n",
                    inv.checked, inv.checked, inv.checked == 1 ? "" : "s");
      } else {
        std::string which;
        for (int i : inv.differing) which += (which.empty() ? "" : ", ") + std::to_string(i);
        std::printf("  batch invariance: FAIL, %zu of %d sequence%s differ alone vs in the batch "
                    "(sequence %s): %s\n",
                    inv.differing.size(), inv.checked, inv.checked == 1 ? "" : "s", which.c_str(),
                    inv.detail.c_str());
      }
    }
    // A batch whose sequences all have query_len 0 writes no output: nothing was compared
    // (the cache writes still were).
    if (r.pass && r.elements_checked == 0)
      std::printf("  (no output to compare: every sequence has --query-lens 0)\n");
    std::fflush(stdout);
  }
  if (json) {
    report["passed"] = passed;
    report["failed"] = failed;
    report["errors"] = errors;
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::printf("%d passed, %d failed, %d errors (%zu case%s on %s)\n", passed, failed, errors,
                cases.size(), cases.size() == 1 ? "" : "s", to_string(*device).c_str());
  }
  // One error on a single-config run is that config's status (usage / unsupported / device).
  if (errors > 0) return no_device ? kExitNoDevice : kExitInvalid;
  return failed > 0 ? kExitMismatch : kExitOk;
}

}  // namespace

Action register_verify(CLI::App& app) {
  auto flags = std::make_shared<VerifyFlags>();
  CLI::App* sub = app.add_subcommand(
      "verify", "run a configuration (or named test cases) and compare with the oracle");
  add_config_flags(sub, &flags->config);
  sub->add_option(
      "--cases", flags->cases,
      "named cases instead of one configuration: all, or globs ('*' and '?') separated by "
      "commas; names are the GoogleTest names")
      ->check(kNonEmpty);
  sub->add_flag(
      "--quick", flags->quick,
      "the small sanitizer subset of the named cases (all of it, or those --cases selects)");
  sub->add_flag("--list-cases", flags->list_cases,
                "print the names of the named cases (those --cases / --quick select), one per "
                "line, and exit; needs no device: the cases of the device --device names (auto: "
                "the one verify would run them on; cuda lists the GPU's cases on any machine)");
  sub->footer("--cases, --quick and --list-cases take no configuration flag (--layout through "
              "--batch-invariant): named cases carry their own.\n\n"
              "With --batch-invariant, one configuration is also run as each sequence alone: "
              "every sequence's output and LSE must be bit-identical alone and in the batch "
              "(else the result is a mismatch).\n\n" +
              exit_status_help(/*can_mismatch=*/true));
  // Checked in run_verify, not with CLI11's excludes(), which would print "Excludes: --cases
  // --quick" under each of the 19 configuration flags in --help.
  return [flags, sub] {
    flags->config_flags_given.clear();
    for (const char* name : kConfigFlagNames)
      if (sub->get_option(name)->count() > 0) flags->config_flags_given.push_back(name);
    return run_verify(*flags);
  };
}

}  // namespace pagedattn::cli
