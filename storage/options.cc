// storage/options.cc — the one place that reads oclvm's environment variables.
#include "oclvm/storage/options.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "oclvm/storage/errors.h"

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
  return options;
}

}  // namespace oclvm
