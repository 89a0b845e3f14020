// storage/kernel.cc — OpenCL C scalar types, and the on-disk kernel cache.
#include "oclvm/storage/kernel.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include "oclvm/storage/hex.h"
#include "oclvm/storage/kernel_cache.h"

namespace oclvm {
namespace {

struct ScalarInfo {
  ScalarType type;
  const char* name;
  const char* alias;  // the "unsigned ..." spelling, or nullptr
  size_t size;
};

constexpr std::array<ScalarInfo, 10> kScalars = {{
    {ScalarType::kChar, "char", nullptr, 1},
    {ScalarType::kUChar, "uchar", "unsigned char", 1},
    {ScalarType::kShort, "short", nullptr, 2},
    {ScalarType::kUShort, "ushort", "unsigned short", 2},
    {ScalarType::kInt, "int", nullptr, 4},
    {ScalarType::kUInt, "uint", "unsigned int", 4},
    {ScalarType::kLong, "long", nullptr, 8},
    {ScalarType::kULong, "ulong", "unsigned long", 8},
    {ScalarType::kFloat, "float", nullptr, 4},
    {ScalarType::kDouble, "double", nullptr, 8},
}};

const ScalarInfo& info(ScalarType type) { return kScalars[static_cast<size_t>(type)]; }

// FNV-1a, 64 bits, from a given basis: two bases give the 128-bit file name.
uint64_t fnv1a(const std::string& text, uint64_t basis) {
  uint64_t hash = basis;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

constexpr char kMagic[] = "oclvm kernel binary 1\n";

bool make_directories(const std::string& path) {
  for (size_t slash = path.find('/', 1); ; slash = path.find('/', slash + 1)) {
    const std::string part = path.substr(0, slash);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    if (slash == std::string::npos) return true;
  }
}

}  // namespace

const char* scalar_type_name(ScalarType type) { return info(type).name; }
size_t scalar_type_size(ScalarType type) { return info(type).size; }

bool scalar_type_from_name(std::string_view name, ScalarType* type) {
  for (const ScalarInfo& scalar : kScalars) {
    if (name == scalar.name || (scalar.alias != nullptr && name == scalar.alias)) {
      *type = scalar.type;
      return true;
    }
  }
  return false;
}

std::string kernel_cache_key(const std::string& platform, const std::string& device,
                             const std::string& driver_version, const std::string& options,
                             const std::string& source) {
  std::string key;
  for (const std::string* part : {&platform, &device, &driver_version, &options, &source}) {
    key += std::to_string(part->size());
    key += ':';
    key += *part;
    key += '\n';
  }
  return key;
}

std::string KernelDiskCache::path_of(const std::string& key) const {
  return directory_ + "/" + hex(fnv1a(key, 0xcbf29ce484222325ull), 16).substr(2) +
         hex(fnv1a(key, 0x84222325cbf29ce4ull), 16).substr(2) + ".bin";
}

std::optional<std::vector<unsigned char>> KernelDiskCache::load(const std::string& key,
                                                               bool* error) const {
  if (!enabled()) return std::nullopt;
  std::ifstream in(path_of(key), std::ios::binary);
  if (!in) return std::nullopt;  // not kept yet: a plain miss
  std::ostringstream read;
  read << in.rdbuf();
  const std::string contents = read.str();
  const std::string header = std::string(kMagic) + std::to_string(key.size()) + "\n" + key;
  if (in.bad() || contents.size() <= header.size() ||
      contents.compare(0, header.size(), header) != 0) {
    if (error != nullptr) *error = true;  // truncated, foreign, or another key under this hash
    return std::nullopt;
  }
  return std::vector<unsigned char>(contents.begin() + static_cast<std::ptrdiff_t>(header.size()),
                                    contents.end());
}

bool KernelDiskCache::store(const std::string& key, const std::vector<unsigned char>& binary) const {
  if (!enabled() || binary.empty()) return false;
  if (!make_directories(directory_)) return false;
  static std::atomic<uint64_t> counter{0};
  const std::string path = path_of(key);
  const std::string temporary = path + ".tmp." + std::to_string(getpid()) + "." +
                                std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << kMagic << key.size() << "\n" << key;
    out.write(reinterpret_cast<const char*>(binary.data()),
              static_cast<std::streamsize>(binary.size()));
    out.close();
    if (!out) {
      std::remove(temporary.c_str());
      return false;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return false;
  }
  return true;
}

}  // namespace oclvm
