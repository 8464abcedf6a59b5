// Subcommands of the `pagedattn` program (DESIGN.md §7). Each register_* adds its subcommand
// and flags to `app` and returns the action main() runs when that subcommand is chosen.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "pagedattn/status.h"

namespace pagedattn::cli {

/// Exit statuses (DESIGN.md §7).
inline constexpr int kExitOk = 0;
inline constexpr int kExitMismatch = 1;
inline constexpr int kExitInvalid = 2;
inline constexpr int kExitNoDevice = 3;

/// kExitNoDevice for kDeviceUnavailable, kExitInvalid for every other failure.
inline int exit_code_for(const Status& status) {
  if (status.ok()) return kExitOk;
  return status.code() == StatusCode::kDeviceUnavailable ? kExitNoDevice : kExitInvalid;
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
    "UINT");

Action register_run(CLI::App& app);
Action register_verify(CLI::App& app);
Action register_explain(CLI::App& app);
Action register_bench(CLI::App& app);

}  // namespace pagedattn::cli
