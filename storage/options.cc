// storage/options.cc — the one place that reads oclvm's environment variables.
#include "oclvm/storage/options.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/log.h"

namespace oclvm {

uint64_t parse_byte_size(std::string_view text, std::string_view what) {
  auto fail = [&](const char* why) -> uint64_t {
    throw InvalidArgument("Expected " + std::string(what) +
                          " to be a byte count such as 1048576, 512K, 64M or 2G, but got '" +
                          std::string(text) + "' (" + why + ")");
  };
  uint64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(begin, end, value);
  if (stop == begin) return fail("no digits");
  if (ec == std::errc::result_out_of_range) return fail("too large");
  std::string_view suffix(stop, static_cast<size_t>(end - stop));
  int shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else {
    return fail("unknown suffix");
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) return fail("too large");
  return value << shift;
}

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  // Compare against what "%.2f" would print, so 1048575 reads "1.00 MiB", not "1024.00 KiB".
  while (value >= 1024.0 - 0.005 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f %s", value, kUnits[unit]);
  return buffer;
}

namespace {

// PyTorch's PYTORCH_ALLOC_CONF keys that configure CUDA's (or HIP's) allocator alone: nothing in
// oclvm corresponds to them.
constexpr std::string_view kCudaOnlyKeys[] = {
    "backend",
    "expandable_segments",
    "graph_capture_record_stream_reuse",
    "max_non_split_rounding_mb",
    "per_process_memory_fraction",
    "pinned_free_catch_all",
    "pinned_num_register_threads",
    "pinned_reserve_segment_size_mb",
    "pinned_use_background_threads",
    "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register",
    "release_lock_on_cudamalloc",
    "release_lock_on_hipmalloc",
    "throw_on_cudamalloc_oom",
};

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

AllocConf AllocConf::parse(std::string_view text, std::string_view what) {
  AllocConf conf;
  std::string unused;
  auto fail = [&](std::string_view pair, const std::string& why) {
    throw InvalidArgument("Expected " + std::string(what) +
                          " to be key:value pairs separated by commas, with the keys "
                          "max_split_size_mb, roundup_power2_divisions and "
                          "garbage_collection_threshold, but got '" +
                          std::string(pair) + "' in '" + std::string(text) + "' (" + why + ")");
  };
  auto unsigned_value = [&](std::string_view pair, std::string_view value) -> uint64_t {
    uint64_t number = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (value.empty() || error != std::errc() || end != value.data() + value.size()) {
      fail(pair, "not a whole number");
    }
    return number;
  };
  // Commas inside [...] belong to a list value (PyTorch's per-size form of
  // roundup_power2_divisions), not to the pair list.
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = start;
    int depth = 0;
    while (end < text.size() && (text[end] != ',' || depth > 0)) {
      if (text[end] == '[') ++depth;
      if (text[end] == ']') --depth;
      ++end;
    }
    const std::string_view pair = trim(text.substr(start, end - start));
    start = end + 1;
    if (pair.empty()) continue;
    const size_t colon = pair.find(':');
    if (colon == std::string_view::npos) fail(pair, "no ':'");
    const std::string_view key = trim(pair.substr(0, colon));
    const std::string_view value = trim(pair.substr(colon + 1));
    if (key == "max_split_size_mb") {
      const uint64_t mib = unsigned_value(pair, value);
      // As PyTorch: an oversize request may take a cached block up to 20 MiB larger, so a limit
      // at or under that slack would make every block oversize.
      if (mib <= 20) fail(pair, "must be more than 20 (MiB)");
      if (mib > (UINT64_MAX >> 20)) fail(pair, "too large");
      conf.max_split_bytes = mib << 20;
    } else if (key == "roundup_power2_divisions") {
      if (!value.empty() && value.front() == '[') {
        fail(pair, "the per-size list form is not supported; give one power of two for every size");
      }
      const uint64_t divisions = unsigned_value(pair, value);
      if (divisions == 0 || (divisions & (divisions - 1)) != 0 || divisions > 1024) {
        fail(pair, "must be a power of two from 1 to 1024");
      }
      conf.roundup_power2_divisions = static_cast<size_t>(divisions);
    } else if (key == "garbage_collection_threshold") {
      double threshold = 0.0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), threshold);
      if (value.empty() || error != std::errc() || end != value.data() + value.size()) {
        fail(pair, "not a number");
      }
      if (!(threshold > 0.0 && threshold < 1.0)) fail(pair, "must be between 0 and 1, exclusive");
      conf.garbage_collection_threshold = threshold;
    } else if (std::find(std::begin(kCudaOnlyKeys), std::end(kCudaOnlyKeys), key) !=
               std::end(kCudaOnlyKeys)) {
      unused += (unused.empty() ? "" : ", ") + std::string(key);
    } else {
      fail(pair, "unknown key '" + std::string(key) + "'");
    }
  }
  if (!unused.empty()) {
    log_message(LogLevel::kWarning, "%.*s: %s configure CUDA's allocator only; oclvm ignores them",
                static_cast<int>(what.size()), what.data(), unused.c_str());
  }
  return conf;
}

Options Options::from_environment() {
  Options options;
  if (const char* platform = std::getenv("OCLVM_PLATFORM")) options.platform = platform;
  if (const char* allocator = std::getenv("OCLVM_ALLOCATOR")) options.allocator = allocator;
  if (const char* limit = std::getenv("OCLVM_MEMORY_LIMIT")) {
    options.memory_limit = parse_byte_size(limit, "OCLVM_MEMORY_LIMIT");
  }
  if (const char* faults = std::getenv("OCLVM_FAULTS")) {
    options.faults = FaultOptions::parse(faults, "OCLVM_FAULTS");
  }
  if (const char* cache = std::getenv("OCLVM_KERNEL_CACHE")) {
    options.kernel_cache_dir = std::string(cache) == "0" ? std::string() : std::string(cache);
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    options.kernel_cache_dir = std::string(xdg) + "/oclvm/kernels";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    options.kernel_cache_dir = std::string(home) + "/.cache/oclvm/kernels";
  }
  if (const char* release = std::getenv("OCLVM_RELEASE")) {
    const std::string_view mode(release);
    if (mode == "stream" || mode.empty()) {
      options.release = ReleaseMode::kStreamOrdered;
    } else if (mode == "finish") {
      options.release = ReleaseMode::kFinish;
    } else {
      throw InvalidArgument("Expected OCLVM_RELEASE to be 'stream' or 'finish', but got '" +
                            std::string(mode) + "'");
    }
  }
  if (const char* kernels = std::getenv("OCLVM_KERNELS")) {
    const std::string_view path(kernels);
    if (path == "native") {
      options.kernels = KernelPath::kNative;
    } else if (path == "host") {
      options.kernels = KernelPath::kHost;
    } else if (!path.empty()) {
      throw InvalidArgument("Expected OCLVM_KERNELS to be 'native' or 'host', but got '" +
                            std::string(path) + "'");
    }
  }
  if (const char* blocking = std::getenv("OCLVM_LAUNCH_BLOCKING")) {
    const std::string_view value(blocking);
    if (value == "1") {
      options.launch_blocking = true;
    } else if (value != "0" && !value.empty()) {
      throw InvalidArgument("Expected OCLVM_LAUNCH_BLOCKING to be '1' or '0', but got '" +
                            std::string(value) + "'");
    }
  }
  if (const char* conf = std::getenv("PYTORCH_ALLOC_CONF")) {
    options.alloc_conf = AllocConf::parse(conf, "PYTORCH_ALLOC_CONF");
  }
  for (const char* name : {"POCL_DEVICES", "OCL_ICD_VENDORS", "OCL_ICD_FILENAMES"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    if (!options.driver_environment.empty()) options.driver_environment += ", ";
    options.driver_environment += std::string(name) + "='" + value + "'";
  }
  return options;
}

}  // namespace oclvm
