// adapters/cli/run_command.h — `oclvm run FILE... [--trace]`: parse and execute scripts.
//
//   oclvm run FILE... [--trace]
//
// Every file is parsed first (adapters/script/parser.h). If any is malformed, each problem is printed
// on stderr as "FILE:LINE:COL: error: message" and NOTHING is executed, from any file. Otherwise
// the scripts run one after the other, each on a fresh VirtualMachine, and for each the report on
// stdout is its failed expectations ("FILE:LINE: expected ..."), any `query` output, and one
// summary line:
//
//   tests/scripts/alloc_release.oclvm: 12 expectations, all held
//   tests/scripts/out_of_memory.oclvm: 5 expectations, 1 failure
//   tests/scripts/two_devices.oclvm: skipped (requires 2 OpenCL devices, 1 present)
//
// --trace prints one line per dispatched instruction (its script line, stream, operands and
// duration) on stdout as it happens.
//
// Exit status: 0 every expectation of every script held (skipped scripts count as held); 1 at
// least one failed, or running failed outright (a device error creating the VM); 2 bad usage or a
// malformed or unreadable script (nothing executed).
//
// Thread-safety: single-threaded (the trace callback serializes its own output).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace oclvm::cli {

struct RunArguments {
  std::vector<std::string> files;  // at least one
  bool trace = false;
};

// Parses the arguments after `run`. Throws InvalidArgument (a usage error) for an unknown flag or
// no FILE.
RunArguments parse_run_arguments(const std::vector<std::string_view>& args);

// Parses and runs the scripts; returns the exit status described above. Writes reports to `out`
// and diagnostics to `err`. Never throws for anything a script does.
int run_scripts(const RunArguments& arguments, std::FILE* out, std::FILE* err);

}  // namespace oclvm::cli
