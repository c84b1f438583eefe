// Command-line parsing shared by strait, strait-site and strait-gateway.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>

namespace strait {

// Parses argv into `app` (running the chosen subcommand's callback). Returns nullopt to go on, or
// the exit code to return at once: 0 after --help or --version, 2 after a malformed command line
// (CLI11's message printed; its own codes are 105 and up). 2 is also what a bad job spec exits
// with, so an operator's RestartPreventExitStatus=2 stops a supervisor restarting a typo forever.
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

}  // namespace strait
