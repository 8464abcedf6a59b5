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

Action register_run(CLI::App& app);
Action register_verify(CLI::App& app);
Action register_explain(CLI::App& app);
Action register_bench(CLI::App& app);

}  // namespace pagedattn::cli
