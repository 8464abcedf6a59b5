// Subcommands of the `pagedattn` program (DESIGN.md §7). Each register_* adds its subcommand
// and flags to `app` and returns the action main() runs when that subcommand is chosen.
#pragma once

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "pagedattn/select.h"
#include "pagedattn/status.h"
#include "src/dispatch/row_kernels.h"  // row_kernels, runs_line

namespace pagedattn::cli {

/// Exit statuses (DESIGN.md §7).
inline constexpr int kExitOk = 0;
inline constexpr int kExitMismatch = 1;
inline constexpr int kExitInvalid = 2;
inline constexpr int kExitNoDevice = 3;

/// The exit statuses, for the end of each command's --help. `can_mismatch`: the command
/// compares results (run, verify); explain and bench have no mismatch to report.
inline std::string exit_status_help(bool can_mismatch) {
  return std::string("Exit status: 0 success") +
         (can_mismatch ? ", 1 result mismatch (a value outside the tolerance)" : "") +
         ", 2 invalid input or usage, 3 requested device unavailable.";
}

/// kExitNoDevice for kDeviceUnavailable, kExitInvalid for every other failure.
inline int exit_code_for(const Status& status) {
  if (status.ok()) return kExitOk;
  return status.code() == StatusCode::kDeviceUnavailable ? kExitNoDevice : kExitInvalid;
}

/// Report a failed subcommand: "pagedattn <command>: <message>" on stderr and, with --json, a
/// JSON object {"status", "message", "exit_code"} on stdout so that scripts always get JSON.
/// Returns the exit status for `status`.
inline int report_failure(const char* command, const Status& status, bool json) {
  std::fprintf(stderr, "pagedattn %s: %s\n", command, status.to_string().c_str());
  const int code = exit_code_for(status);
  if (json) {
    nlohmann::json j;
    j["status"] = to_string(status.code());
    j["message"] = status.message();
    j["exit_code"] = code;
    std::printf("%s\n", j.dump(2).c_str());
  }
  return code;
}

using Action = std::function<int()>;

/// Flag check for seeds and other unsigned values: digits only, so "-1" is an error instead of
/// wrapping around to 2^64 - 1.
inline const CLI::Validator kNonNegativeInteger(
    [](std::string& s) {
      if (!s.empty() && s.size() <= 19 && s.find_first_not_of("0123456789") == std::string::npos)
        return std::string();
      return std::string("expected an integer in [0, 10^19), got '") + s + "'";
    },
    // No description: CLI11 would print it after the option's own type ("UINT:UINT").
    "");

/// Rejects an empty value (an option given as '' would otherwise mean "not given").
inline const CLI::Validator kNonEmpty(
    [](std::string& s) {
      return s.empty() ? std::string("expected a non-empty value") : std::string();
    },
    "");

/// Flag check for a float value: the text must be a number that a float holds as typed.
/// CLI11 converts without a word 1e39 to inf (so the range check reported "--k-scale inf", a
/// value nobody typed) and 1e-50 to 0 (which --k-scale and --softcap take as "derived" and
/// "off"). Rejects an empty or non-numeric value, a magnitude above the largest float
/// (3.40282e+38) and a nonzero one below the smallest normal float (1.17549e-38: it would read
/// as 0 or as a subnormal that has lost precision). NaN and infinity spelled out pass: the
/// flag's own range check rejects them as "nan" / "inf", which is what was typed. Register it
/// with ->transform(), not ->check(): it trims blanks around the number, which CLI11's
/// conversion would otherwise refuse at the end. `expected` states the flag's valid values; the
/// message ends with it.
inline CLI::Validator float_flag(const std::string& expected) {
  return CLI::Validator(
      [expected](std::string& s) {
        const std::string typed = "'" + s + "'";
        // CLI11's conversion that follows takes leading blanks but not trailing ones.
        s.erase(0, s.find_first_not_of(" \t"));
        s.erase(s.find_last_not_of(" \t") + 1);
        char* end = nullptr;
        errno = 0;
        const float v = std::strtof(s.c_str(), &end);
        const bool range_error = errno == ERANGE;
        if (s.empty() || end != s.c_str() + s.size())
          return typed + " is not a number: expected " + expected;
        if (std::isnan(v) || (std::isinf(v) && !range_error)) return std::string();
        if (std::isinf(v)) {
          return typed + " is out of float range (largest 3.40282e+38; it would read as " +
                 (v > 0 ? "inf" : "-inf") + "): expected " + expected;
        }
        if (v != 0.0f ? std::fabs(v) < FLT_MIN : range_error) {
          char subnormal[32];
          std::snprintf(subnormal, sizeof subnormal, "%g", static_cast<double>(v));
          return typed + " is too small for a float (smallest normal 1.17549e-38; it would " +
                 "read as " + (v == 0.0f ? "0" : std::string("the subnormal ") + subnormal) +
                 "): expected " + expected;
        }
        return std::string();
      },
      // No description: CLI11 would print it after the option's own type ("FLOAT:...").
      "");
}

Action register_run(CLI::App& app);
Action register_verify(CLI::App& app);
Action register_explain(CLI::App& app);
Action register_bench(CLI::App& app);

}  // namespace pagedattn::cli
