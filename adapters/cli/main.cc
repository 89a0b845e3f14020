// adapters/cli/main.cc — the `oclvm` command.
//
//   oclvm run FILE... [--trace]
//   oclvm replay FILE [--allocator NAME] [--device DEVICE] [--limit BYTES] [--repeat N] [--json]
//                     [--plot OUT.svg [--compare]] [--snapshot OUT.pickle]
//   oclvm devices
//   oclvm help | --help | -h
//   oclvm version | --version     prints "oclvm MAJOR.MINOR.PATCH"
//
// Exit status (the promise scripts and ctest rely on):
//   0  success (for `run`: every expectation of every script held)
//   1  a runtime error (a driver failure, an allocation the device can never hold, ...); for
//      `run`: at least one expectation failed
//   2  bad usage (unknown command or flag, missing or malformed value, unknown device or
//      allocator, malformed environment), a malformed trace (`FILE:LINE: error: ...`) or a
//      malformed script (`FILE:LINE:COL: error: ...`, and nothing was run)
//   3  the replay ran, its report was printed, and at least one allocation ran out of memory
//
// Reports go to stdout, diagnostics to stderr. main() catches everything: no exception leaves it.
// Configuration comes from the command line over Options::from_environment() (the only reader of
// the environment).
//
// Thread-safety: single-threaded program.
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/cli/plot.h"
#include "adapters/cli/replay.h"
#include "adapters/cli/run_command.h"
#include "adapters/cli/trace.h"
#include "oclvm/storage/allocator_registry.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/options.h"
#include "oclvm/version.h"

namespace oclvm::cli {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntimeError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitOutOfMemory = 3;

constexpr const char* kUsage =
    "usage: oclvm <command> [options]\n"
    "\n"
    "commands:\n"
    "  run FILE... [--trace]    parse instruction scripts (all of them first; a malformed one\n"
    "                           runs nothing), run each on a fresh VM and check its\n"
    "                           expectations (the language: design/scripts.md)\n"
    "      --trace              print every dispatched instruction with its stream and duration\n"
    "  replay FILE [options]    replay an allocation trace (oclvm-trace v1) through a real\n"
    "                           allocator on a real device and report its memory overhead\n"
    "      --allocator NAME     caching | buddy | system\n"
    "                           (default: OCLVM_ALLOCATOR, else the registry's default)\n"
    "      --device DEVICE      opencl:N or cpu (default: opencl:0)\n"
    "      --limit BYTES        per-device memory limit; K, M, G suffixes (1024-based)\n"
    "                           (default: OCLVM_MEMORY_LIMIT, else none)\n"
    "      --repeat N           replay the whole trace N times (default: 1)\n"
    "      --json               print one JSON object instead of the text report\n"
    "      --plot OUT.svg       also draw live and reserved bytes over the events, and the\n"
    "                           segments held at the reserved peak (SVG)\n"
    "      --compare            with --plot: replay under every allocator, one report and\n"
    "                           one reserved line each, in one picture\n"
    "      --snapshot OUT.pickle  also write a memory snapshot in PyTorch's format (segments\n"
    "                           at the end of the trace, every event): for\n"
    "                           python -m oclvm.viz and PyTorch's memory viewer\n"
    "  devices                  list the OpenCL platform and every device\n"
    "  help, --help, -h         print this text\n"
    "  version, --version       print the version of oclvm\n"
    "\n"
    "exit status: 0 ok, 1 runtime error or failed expectation,\n"
    "             2 bad usage, malformed trace or malformed script,\n"
    "             3 the replay ran out of memory (the report is printed first)\n";

// Bad command-line or environment input. Reported with the usage text, exit status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ReplayArguments {
  std::string file;
  std::string allocator;               // empty: Options / registry default
  Device device{DeviceType::kOpenCL, 0};
  bool has_limit = false;
  uint64_t limit = 0;
  uint64_t repeat = 1;
  bool json = false;
  std::string plot;  // --plot: the SVG to write; empty: none
  bool compare = false;
  std::string snapshot;  // --snapshot: the pickle to write; empty: none
};

uint64_t parse_repeat(std::string_view text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value == 0) {
    throw UsageError("Expected --repeat to be a whole number of at least 1, but got '" +
                     std::string(text) + "'");
  }
  return value;
}

ReplayArguments parse_replay_arguments(const std::vector<std::string_view>& args) {
  ReplayArguments parsed;
  bool have_file = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    // A flag's value comes either inline (--limit=1M) or as the next argument (--limit 1M).
    std::string_view flag = arg;
    std::string_view inline_value;
    bool has_inline_value = false;
    if (arg.starts_with("--")) {
      if (auto equals = arg.find('='); equals != std::string_view::npos) {
        flag = arg.substr(0, equals);
        inline_value = arg.substr(equals + 1);
        has_inline_value = true;
      }
    }
    auto value = [&]() -> std::string_view {
      if (has_inline_value) return inline_value;
      if (i + 1 >= args.size()) {
        throw UsageError("Expected a value after " + std::string(flag) + ", but got none");
      }
      return args[++i];
    };
    try {
      if (flag == "--allocator") {
        parsed.allocator = std::string(value());
        if (parsed.allocator.empty()) {
          throw UsageError("Expected an allocator name after --allocator, but got ''");
        }
      } else if (flag == "--device") {
        parsed.device = parse_device(value());
      } else if (flag == "--limit") {
        parsed.limit = parse_byte_size(value(), "--limit");
        parsed.has_limit = true;
      } else if (flag == "--repeat") {
        parsed.repeat = parse_repeat(value());
      } else if (flag == "--json" && !has_inline_value) {
        parsed.json = true;
      } else if (flag == "--plot") {
        parsed.plot = std::string(value());
        if (parsed.plot.empty()) throw UsageError("Expected a file name after --plot, but got ''");
      } else if (flag == "--compare" && !has_inline_value) {
        parsed.compare = true;
      } else if (flag == "--snapshot") {
        parsed.snapshot = std::string(value());
        if (parsed.snapshot.empty()) {
          throw UsageError("Expected a file name after --snapshot, but got ''");
        }
      } else if (arg.starts_with("-") && arg != "-") {
        throw UsageError(
            "Expected one of --allocator, --device, --limit, --repeat, --json, --plot, --compare, "
            "--snapshot, but got '" + std::string(arg) + "'");
      } else if (!have_file) {
        parsed.file = std::string(arg);
        have_file = true;
      } else {
        throw UsageError("Expected one trace FILE, but got a second one: '" + std::string(arg) + "'");
      }
    } catch (const InvalidArgument& e) {
      throw UsageError(e.what());
    }
  }
  if (!have_file) throw UsageError("Expected a trace FILE after 'replay', but got none");
  if (parsed.compare && parsed.plot.empty()) {
    throw UsageError("Expected --plot OUT.svg with --compare, but got none");
  }
  if (parsed.compare && !parsed.snapshot.empty()) {
    throw UsageError("Expected --snapshot with one allocator, but got --compare (every allocator)");
  }
  if (parsed.compare && !parsed.allocator.empty()) {
    throw UsageError("Expected either --compare (every allocator) or --allocator " +
                     parsed.allocator + ", but got both");
  }
  return parsed;
}

// The colours of the reserved lines, one per allocator replayed; the trace's live line is black.
constexpr const char* kPlotColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};

// A file `--plot` or `--snapshot` writes (`what`: "the plot"), opened before anything is
// replayed so that a path that cannot be written fails first, with nothing printed. Throws Error
// naming the file.
class OutputFile {
 public:
  OutputFile(const std::string& path, const char* what)
      : path_(path), what_(what), file_(std::fopen(path.c_str(), "wb")) {
    if (file_ == nullptr) {
      throw Error("Expected to write " + what_ + " to '" + path + "', but opening it failed (" +
                  std::strerror(errno) + ")");
    }
  }
  ~OutputFile() {
    if (file_ != nullptr) std::fclose(file_);
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const std::string& bytes) {
    const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size();
    const bool closed = std::fclose(file_) == 0;
    file_ = nullptr;
    if (!written || !closed) {
      throw Error("Expected to write " + what_ + " to '" + path_ + "', but writing it failed");
    }
  }

 private:
  std::string path_;
  std::string what_;
  std::FILE* file_;
};

int run_replay(const std::vector<std::string_view>& args) {
  ReplayArguments parsed = parse_replay_arguments(args);
  Trace trace = load_trace(parsed.file);  // TraceError: exit 2, reported by main

  // Setup: every InvalidArgument here (malformed environment, a device that does not exist, an
  // unknown allocator name) is the user's input, so it is a usage error.
  MemoryBackend* backend = nullptr;
  Options options;
  std::vector<std::string> allocators;  // the names replayed, in order
  try {
    options = Options::from_environment();
    if (parsed.has_limit) options.memory_limit = parsed.limit;
    backend = &DeviceManager::instance().backend(parsed.device);
    if (parsed.compare) {
      for (const auto& [name, priority] : AllocatorRegistry::instance().entries()) {
        allocators.push_back(name);
      }
    } else {
      if (!parsed.allocator.empty()) options.allocator = parsed.allocator;
      allocators.push_back(AllocatorRegistry::instance().default_name(options));
    }
  } catch (const InvalidArgument& e) {
    throw UsageError(e.what());
  }

  std::optional<OutputFile> plot_file;
  if (!parsed.plot.empty()) plot_file.emplace(parsed.plot, "the plot");
  std::optional<OutputFile> snapshot_file;
  if (!parsed.snapshot.empty()) snapshot_file.emplace(parsed.snapshot, "the snapshot");
  DeviceMemorySnapshot snapshot;
  ReplayOptions replay_options;
  replay_options.repeat = parsed.repeat;
  replay_options.record_series = plot_file.has_value();
  if (snapshot_file) replay_options.snapshot = &snapshot;
  PlotSpec plot;
  uint64_t ooms = 0;
  for (size_t i = 0; i < allocators.size(); ++i) {
    options.allocator = allocators[i];
    std::unique_ptr<Allocator> allocator = AllocatorRegistry::instance().create(*backend, options);
    ReplayReport report = replay(trace, *allocator, replay_options);
    allocator.reset();
    ooms += report.ooms;
    std::string out = parsed.json ? format_json(report) + "\n" : format_text(report);
    if (i > 0 && !parsed.json) out = "\n" + out;
    std::fputs(out.c_str(), stdout);
    if (!replay_options.record_series) continue;
    if (i == 0) {
      plot.title = "oclvm replay " + trace.file + " on " + report.device +
                   (report.limit_bytes != 0 ? ", limit " + format_bytes(report.limit_bytes) : "");
      plot.series.push_back(PlotSeries{"live (the trace)", "#000000", false,
                                       std::move(report.live_series)});
    }
    const char* color = kPlotColors[i % std::size(kPlotColors)];
    plot.series.push_back(PlotSeries{"reserved: " + report.allocator + " (peak " +
                                         format_bytes(report.reserved_peak_bytes) + ")",
                                     color, true, std::move(report.reserved_series)});
    plot.segment_maps.push_back(SegmentMapSpec{
        report.allocator + " at event " + std::to_string(report.peak_event), color,
        std::move(report.peak_segments)});
  }
  std::fflush(stdout);
  if (plot_file) plot_file->write(svg_line_chart(plot));
  if (snapshot_file) snapshot_file->write(to_pickle(MemorySnapshot{{std::move(snapshot)}}));
  if (ooms > 0) {
    std::fprintf(stderr, "oclvm: %llu allocation(s) ran out of memory during the replay\n",
                 static_cast<unsigned long long>(ooms));
    return kExitOutOfMemory;
  }
  return kExitOk;
}

int run_devices(const std::vector<std::string_view>& args) {
  if (!args.empty()) {
    throw UsageError("Expected no arguments after 'devices', but got '" + std::string(args[0]) + "'");
  }
  DeviceManager* manager = nullptr;
  try {
    manager = &DeviceManager::instance();
  } catch (const InvalidArgument& e) {
    throw UsageError(e.what());
  }
  std::string out = "platform: " +
                    (manager->platform_name().empty() ? std::string("(no OpenCL platform)")
                                                      : manager->platform_name()) +
                    "\n";
  if (!manager->why_no_device().empty()) out += "no OpenCL device: " + manager->why_no_device() + "\n";
  for (const Device& device : manager->devices()) {
    const DeviceProperties& p = manager->backend(device).properties();
    auto line = [&out](const char* key, const std::string& value) {
      out += "  ";
      out += key;
      out += std::string(24 - std::string_view(key).size(), ' ');
      out += value;
      out += '\n';
    };
    out += device.str() + "\n";
    line("name:", p.name);
    line("platform:", p.platform);
    line("version:", p.version);
    line("global memory:", std::to_string(p.global_mem_bytes) + " (" + format_bytes(p.global_mem_bytes) + ")");
    line("max allocation:", std::to_string(p.max_alloc_bytes) + " (" + format_bytes(p.max_alloc_bytes) + ")");
    line("base address alignment:", std::to_string(p.base_addr_align_bytes) + " bytes");
    // The torch adapter maps such a device's memory for CPU kernels instead of copying it
    // (design/torch.md, zero-copy operands) unless OCLVM_ZERO_COPY=0; with host addresses
    // (fine-grained SVM) it runs them in host sections, with no map at all.
    line("host-unified memory:", p.host_unified_memory
                                     ? "yes (torch operators use it without copies)"
                                     : "no (torch operators copy through the host)");
    line("host addresses:", p.host_addressable
                                ? "yes (torch operators use it in place, with no command)"
                                : "no");
    // OCLVM_KERNELS=native|host chooses for every device; otherwise a CPU device keeps the
    // host's kernels, which are faster on it.
    line("device type:", p.cpu_device ? "CPU" : "GPU or accelerator");
    line("torch kernels:", manager->native_kernels(device)
                               ? "native (OpenCL kernels on the device)"
                               : "host (CPU kernels on the device's memory)");
  }
  std::fputs(out.c_str(), stdout);
  return kExitOk;
}

int run_run(const std::vector<std::string_view>& args) {
  RunArguments parsed;
  try {
    parsed = parse_run_arguments(args);
    // The devices come from the environment: a malformed one is bad usage, as for replay.
    DeviceManager::instance();
  } catch (const InvalidArgument& e) {
    throw UsageError(e.what());
  }
  return run_scripts(parsed, stdout, stderr);
}

int run(int argc, char** argv) {
  std::vector<std::string_view> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  std::string_view command = args[0];
  std::vector<std::string_view> rest(args.begin() + 1, args.end());
  if (command == "version" || command == "--version") {
    if (!rest.empty()) {
      throw UsageError("Expected no arguments after '" + std::string(command) + "', but got '" +
                       std::string(rest[0]) + "'");
    }
    std::printf("oclvm %s\n", library_version());
    return kExitOk;
  }
  for (std::string_view arg : rest) {
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
  }
  if (command == "run") return run_run(rest);
  if (command == "replay") return run_replay(rest);
  if (command == "devices") return run_devices(rest);
  throw UsageError("Expected a command (run, replay, devices, version, help), but got '" +
                   std::string(command) + "'");
}

}  // namespace
}  // namespace oclvm::cli

int main(int argc, char** argv) {
  using namespace oclvm::cli;
  try {
    return run(argc, argv);
  } catch (const TraceError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kExitUsage;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "oclvm: error: %s\n\n%s", e.what(), kUsage);
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oclvm: error: %s\n", e.what());
    return kExitRuntimeError;
  } catch (...) {
    std::fprintf(stderr, "oclvm: error: unknown exception\n");
    return kExitRuntimeError;
  }
}
