// adapters/cli/run_command.cc — `oclvm run`: load every script, then execute them and report.
#include "adapters/cli/run_command.h"

#include <exception>
#include <mutex>

#include "adapters/script/script.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"

namespace oclvm::cli {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitMalformed = 2;

std::string count_text(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

RunArguments parse_run_arguments(const std::vector<std::string_view>& args) {
  RunArguments parsed;
  for (std::string_view arg : args) {
    if (arg == "--trace") {
      parsed.trace = true;
    } else if (arg.starts_with("-") && arg != "-") {
      throw InvalidArgument("Expected a script FILE or --trace after 'run', but got '" +
                            std::string(arg) + "'");
    } else {
      parsed.files.emplace_back(arg);
    }
  }
  if (parsed.files.empty()) {
    throw InvalidArgument("Expected at least one script FILE after 'run', but got none");
  }
  return parsed;
}

int run_scripts(const RunArguments& arguments, std::FILE* out, std::FILE* err) {
  // Devices first: the parser checks device names against what exists.
  script::ParseOptions parse_options;
  try {
    parse_options.opencl_devices = DeviceManager::instance().opencl_device_count();
  } catch (const std::exception& e) {
    std::fprintf(err, "oclvm: error: %s\n", e.what());
    return kExitFailed;
  }

  // Phase 1: parse everything. One malformed file stops every file from running.
  std::vector<script::Script> scripts;
  bool malformed = false;
  for (const std::string& file : arguments.files) {
    try {
      scripts.push_back(script::load_script(file, parse_options));
    } catch (const script::ScriptError& e) {
      std::fprintf(err, "%s\n", e.what());
      malformed = true;
    }
  }
  if (malformed) {
    std::fprintf(err, "oclvm: nothing was run: %s malformed\n",
                 arguments.files.size() == 1 ? "the script is" : "at least one script is");
    return kExitMalformed;
  }

  // Phase 2: run each on its own VM.
  std::mutex out_mutex;  // trace lines come from worker threads
  bool all_held = true;
  for (const script::Script& script : scripts) {
    script::ExecuteOptions options;
    if (arguments.trace) {
      options.trace = [&out_mutex, out](const std::string& line) {
        std::lock_guard<std::mutex> lock(out_mutex);
        std::fprintf(out, "  trace: %s\n", line.c_str());
      };
    }
    script::ExecuteResult result;
    try {
      result = script::execute(script, options);
    } catch (const std::exception& e) {
      std::fprintf(out, "%s: could not run: %s\n", script.file.c_str(), e.what());
      all_held = false;
      continue;
    }
    std::lock_guard<std::mutex> lock(out_mutex);
    if (result.skipped) {
      std::fprintf(out, "%s: skipped (%s)\n", script.file.c_str(), result.skip_reason.c_str());
      continue;
    }
    for (const std::string& note : result.notes) std::fputs(note.c_str(), out);
    for (size_t i = 0; i < result.failures.size(); ++i) {
      std::fprintf(out, "%s\n", result.describe(script, i).c_str());
    }
    std::string summary = count_text(result.expectations, "expectation", "expectations") + ", " +
                          (result.ok() ? std::string(result.expectations == 1 ? "held" : "all held")
                                       : count_text(result.failures.size(), "failure", "failures"));
    std::fprintf(out, "%s: %s\n", script.file.c_str(), summary.c_str());
    if (!result.ok()) all_held = false;
  }
  std::fflush(out);
  return all_held ? kExitOk : kExitFailed;
}

}  // namespace oclvm::cli
