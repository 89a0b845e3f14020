// adapters/script/executor.h — execute: run a parsed Script on a VM of its own and report.
//
// The second of the two phases (design/scripts.md, "Execution semantics"). execute builds a fresh
// vm::VirtualMachine from the script's options (not from the environment: the script is its whole
// configuration, except the platform, which is the DeviceManager's), then runs the statements in
// order on the calling thread: instructions are built with an InstructionsBuilder into the
// current batch, `run` submits it with one vm.run, and each expectation is checked where it
// stands — statistics and blob bytes through the VM (a QueryStats or a device-to-host copy of
// its own), host buffers and the barrier count directly. What can only be known when running
// (out of memory, a copy past a blob's end, a released blob, a double release) is the builder's
// and the VM's business: the run fails and the script states it with `expect error ...`.
//
// Promises: every expectation is checked and each one that does not hold is reported (Failure,
// in script order), whatever failed before it. A builder error voids its batch (nothing of it
// runs; its `run` fails with that error). Blobs still holding memory at the end are reported as
// leaks at their `alloc` line and then released, so the VM shuts down with nothing live.
//
// Main types: ExecuteOptions (tracing), ExecuteResult (counts, failures, `query` notes), Failure.
//
// Thread-safety: execute uses its own VM and only reads the Script; several threads may execute
// one Script at once. ExecuteOptions::trace is called from worker threads, one call at a time.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "adapters/script/ast.h"

namespace oclvm::script {

struct Failure {
  int line = 0;
  std::string message;  // "expected allocated (...) of opencl:0 = 4096, but got 0", "leaked ..."
};

struct ExecuteOptions {
  // Called with one line per dispatched instruction ("x.oclvm:12 CopyBlob on opencl:0/h2d ...").
  // Empty: no tracing. Called from worker threads, one call at a time.
  std::function<void(const std::string&)> trace;
};

struct ExecuteResult {
  bool skipped = false;
  std::string skip_reason;              // "requires 2 OpenCL devices, 1 present"
  size_t expectations = 0;              // `expect` lines executed
  std::vector<Failure> failures;        // in script order; leaks last
  std::vector<std::string> notes;       // output of `query` ("x.oclvm:9: stats of opencl:0 ...")

  bool ok() const { return failures.empty(); }
  // "x.oclvm:12: expected ..." for failure i.
  std::string describe(const Script& script, size_t i) const;
};

// Runs the script on a fresh VirtualMachine over DeviceManager::instance(), built from
// script.options. Skips (result.skipped) when the script requires more OpenCL devices than exist.
// Never throws for what the script does; a failure to create the VM (a backend error) propagates.
ExecuteResult execute(const Script& script, const ExecuteOptions& options = {});

}  // namespace oclvm::script
