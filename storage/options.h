// storage/options.h — runtime configuration, with documented defaults.
//
// Configuration is passed in as an `Options` value. Environment variables are read in exactly one
// place, `Options::from_environment()`; nothing else in oclvm calls getenv.
//
//   OCLVM_PLATFORM       substring of the OpenCL platform name to use     (default: first with devices)
//   OCLVM_ALLOCATOR      caching | buddy | system                         (default: highest priority)
//   OCLVM_MEMORY_LIMIT   per-device limit in bytes, K/M/G suffixes (1024-based); 0 = none
//   OCLVM_FAULTS         fault injection rules for every device (storage/faults.h)  (default: none)
//   POCL_DEVICES         read by PoCL itself. If unset, oclvm sets it to `basic` before its first
//                        OpenCL call (PoCL's basic driver has ~100x lower command latency than the
//                        default pthread driver); a user's value is never overwritten.
//
// Thread-safety: a value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "oclvm/storage/faults.h"

namespace oclvm {

struct Options {
  // Substring of the OpenCL platform name; empty picks the first platform that has devices.
  std::string platform;
  // Allocator name for the registry; empty picks the registered allocator of highest priority.
  std::string allocator;
  // Per-device memory limit in bytes, applied to reserved bytes (what the allocator holds from the
  // driver). 0 means no limit beyond the device's own memory.
  uint64_t memory_limit = 0;
  // Faults injected into every device's backend (storage/faults.h); none by default.
  FaultOptions faults;
  // Value given to POCL_DEVICES when the environment has none; empty leaves PoCL's own default.
  std::string pocl_default_devices = "basic";

  // Reads the variables listed above over the defaults. Throws InvalidArgument naming the
  // variable when one is malformed (e.g. OCLVM_MEMORY_LIMIT=12Q).
  static Options from_environment();
};

// Parses a byte count: decimal digits with an optional K, M or G suffix (powers of 1024; "KiB",
// "MiB", "GiB" and "B" are accepted too). Throws InvalidArgument on anything else and on overflow
// of uint64_t; `what` names the source of the text in the message.
uint64_t parse_byte_size(std::string_view text, std::string_view what);

// Formats a byte count for people: "512 B", "2.00 MiB", "1.50 GiB".
std::string format_bytes(uint64_t bytes);

}  // namespace oclvm
