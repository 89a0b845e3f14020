// storage/kernel_cache.h — compiled kernel binaries kept on disk, across processes.
//
// A KernelDiskCache keeps one file per program in its directory. The file's name is a hash of the
// program's key — platform, device, driver version, build options and source (kernel_cache_key)
// — and the file holds the whole key before the binary, so a load compares keys and a hash
// collision or a stale file is a miss, never a wrong program. A store writes a temporary file and
// renames it over the final name, so a reader sees a whole file or none, also while another
// process stores the same program. Every failure (no directory, a full disk, a truncated or
// foreign file) is a miss that the caller counts; none throws.
//
// Thread-safety: a value with a const directory; load and store may run on any thread at once
// (each touches only its own temporary file before the atomic rename).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace oclvm {

// The text that names a program for the cache: every part that changes the binary.
std::string kernel_cache_key(const std::string& platform, const std::string& device,
                             const std::string& driver_version, const std::string& options,
                             const std::string& source);

class KernelDiskCache {
 public:
  // `directory` "" keeps nothing (load misses, store does nothing).
  explicit KernelDiskCache(std::string directory) : directory_(std::move(directory)) {}

  const std::string& directory() const { return directory_; }
  bool enabled() const { return !directory_.empty(); }
  // The binary stored under `key`; nullopt when there is none or it cannot be read whole. Sets
  // *error (when not null) when a file existed but was unreadable or foreign.
  std::optional<std::vector<unsigned char>> load(const std::string& key, bool* error) const;
  // Keeps `binary` under `key`, making the directory when needed. False when it could not.
  bool store(const std::string& key, const std::vector<unsigned char>& binary) const;
  // The file a key is kept in.
  std::string path_of(const std::string& key) const;

 private:
  std::string directory_;
};

}  // namespace oclvm
