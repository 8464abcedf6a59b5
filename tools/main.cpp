// The `pagedattn` program: run | verify | explain | bench (DESIGN.md §7).
#include <cstdio>
#include <exception>
#include <string>

#include "pagedattn/version.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  using namespace pagedattn::cli;
  CLI::App app{"pagedattn: paged-KV-cache attention for LLM serving"};
  app.set_version_flag("--version", pagedattn::version());
  app.require_subcommand(1);
  app.footer("Exit status: 0 success, 1 result mismatch (run, verify, bench), 2 invalid input or "
             "usage, 3 requested device unavailable. `pagedattn <command> --help` for a "
             "command's flags.");
  Action run = register_run(app);
  Action verify = register_verify(app);
  Action explain = register_explain(app);
  Action bench = register_bench(app);
  // CLI11 reports a mistyped subcommand as "A subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known |= sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "pagedattn: unknown subcommand '%s' (expected one of: %s)\n", argv[1],
                   names.c_str());
      return kExitInvalid;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version (exit code 0), and errors before any subcommand: CLI11's own output.
    const bool sub = argc > 1 && argv[1][0] != '-';
    if (e.get_exit_code() == 0 || !sub) {
      const int rc = app.exit(e);
      return rc == 0 ? kExitOk : kExitInvalid;
    }
    // A subcommand's usage error in the format of its other failures ("pagedattn <command>:
    // invalid_argument: ..." on stderr, and a JSON object on stdout under --json).
    bool json = false;
    for (int i = 2; i < argc; ++i) json |= std::string(argv[i]) == "--json";
    return report_failure(argv[1],
                          pagedattn::Status(pagedattn::StatusCode::kInvalidArgument,
                                            std::string(e.what()) + " (see --help)"),
                          json);
  }
  try {
    if (app.got_subcommand("run")) return run();
    if (app.got_subcommand("verify")) return verify();
    if (app.got_subcommand("explain")) return explain();
    if (app.got_subcommand("bench")) return bench();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagedattn: internal error: %s\n", e.what());
    return kExitInvalid;
  }
  return kExitInvalid;
}
