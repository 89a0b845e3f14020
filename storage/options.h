// storage/options.h — runtime configuration, with documented defaults.
//
// Configuration is passed in as an `Options` value. Environment variables are read in exactly one
// place, `Options::from_environment()`; nothing else in oclvm calls getenv.
//
//   OCLVM_PLATFORM       substring of the OpenCL platform name to use     (default: first with devices)
//   OCLVM_ALLOCATOR      caching | buddy | system                         (default: highest priority)
//   OCLVM_MEMORY_LIMIT   per-device limit in bytes, K/M/G suffixes (1024-based); 0 = none
//   OCLVM_FAULTS         fault injection rules for every device (storage/faults.h)  (default: none)
//   OCLVM_KERNEL_CACHE   directory for compiled kernel binaries; 0 or "" keeps none
//                        (default: $XDG_CACHE_HOME/oclvm/kernels, else ~/.cache/oclvm/kernels)
//   OCLVM_RELEASE        stream | finish: a release gives its block back ordered by a marker on
//                        its stream, or after finishing the queue        (default: stream)
//   OCLVM_KERNELS        native | host: where a tensor library's operators compute, on every
//                        device (default: native on GPUs and accelerators, host on CPU devices)
//   OCLVM_LAUNCH_BLOCKING 1 | 0: a tensor library's native launches wait for the device one by
//                        one, so that a failure names the operator that caused it, as
//                        CUDA_LAUNCH_BLOCKING does                       (default: 0)
//   PYTORCH_ALLOC_CONF   PyTorch's allocator settings; those the caching allocator has (AllocConf)
//   OCL_ICD_VENDORS, OCL_ICD_FILENAMES  read by the OpenCL ICD loader itself; named (with
//                        POCL_DEVICES) in the error that says why no device was found.
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

// The settings of PyTorch's PYTORCH_ALLOC_CONF that mean something to oclvm's caching allocator
// (CachingAllocatorOptions documents each; the buddy and system allocators have no such policy).
// Text form as PyTorch's: "key:value" pairs separated by commas, e.g.
// "max_split_size_mb:64,roundup_power2_divisions:4,garbage_collection_threshold:0.8".
struct AllocConf {
  uint64_t max_split_bytes = 0;          // max_split_size_mb, in bytes; 0: no limit
  size_t roundup_power2_divisions = 0;   // 0: off; else a power of two
  double garbage_collection_threshold = 0.0;  // 0: off; else in (0, 1)

  // Throws InvalidArgument naming `what` (the variable) and the pair for an unknown key, a
  // malformed value or a value out of range, listing the keys that apply. PyTorch's keys for
  // CUDA alone (expandable_segments, pinned_use_cuda_host_register, ...) are accepted and left
  // unused, with one warning through the log handler, so that one environment serves both.
  static AllocConf parse(std::string_view text, std::string_view what);
};

// How ReleaseTensor gives a block back (Note [Stream-ordered release] in instructions.cc).
enum class ReleaseMode {
  kStreamOrdered,  // at once; a marker on the stream orders later users; the host never waits
  kFinish,         // after finishing the stream's queue: the block is idle when it goes back
};

// Where an embedder's operators compute (the torch adapter's, design/torch.md): kernels run on the
// device (kNative), or the host's kernels run on the device's memory (kHost).
enum class KernelPath {
  kAuto,    // native on GPUs and accelerators, host on CPU devices (DeviceProperties::cpu_device)
  kNative,
  kHost,
};

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
  // Where every device keeps its compiled kernel binaries (storage/kernel_cache.h); "" keeps none.
  std::string kernel_cache_dir;
  // How a release gives its block back; OCLVM_RELEASE=finish selects kFinish.
  ReleaseMode release = ReleaseMode::kStreamOrdered;
  // OCLVM_KERNELS: one path for every device, or each device's own (DeviceManager::native_kernels).
  KernelPath kernels = KernelPath::kAuto;
  // OCLVM_LAUNCH_BLOCKING=1: the torch adapter runs each native launch synchronously instead of
  // submitting it (design/torch.md, "Launches that do not wait").
  bool launch_blocking = false;
  // PYTORCH_ALLOC_CONF's settings for the caching allocator.
  AllocConf alloc_conf;
  // The OpenCL loader's and PoCL's own variables that are set, as "NAME='value'" joined by ", "
  // (POCL_DEVICES, OCL_ICD_VENDORS, OCL_ICD_FILENAMES): read for the error that says why no
  // device was found, never to choose one. Empty when none is set.
  std::string driver_environment;

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
