// storage/allocator_registry.cc — the registry's table and the built-in allocators.
#include "oclvm/storage/allocator_registry.h"

#include <algorithm>

#include "oclvm/storage/buddy_allocator.h"
#include "oclvm/storage/caching_allocator.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/system_allocator.h"

namespace oclvm {

AllocatorRegistry& AllocatorRegistry::instance() {
  // Built on first use (thread-safe initialization of a local static) and never destroyed.
  static AllocatorRegistry* const registry = [] {
    auto* r = new AllocatorRegistry();
    r->add_builtin_allocators();
    return r;
  }();
  return *registry;
}

void AllocatorRegistry::add_builtin_allocators() {
  add("caching", kCachingPriority, [](MemoryBackend& backend, const Options& options) {
    CachingAllocatorOptions caching;
    caching.memory_limit = options.memory_limit;
    caching.max_split_bytes = static_cast<size_t>(options.alloc_conf.max_split_bytes);
    caching.roundup_power2_divisions = options.alloc_conf.roundup_power2_divisions;
    caching.garbage_collection_threshold = options.alloc_conf.garbage_collection_threshold;
    return std::unique_ptr<Allocator>(std::make_unique<CachingAllocator>(backend, caching));
  });
  add("buddy", kBuddyPriority, [](MemoryBackend& backend, const Options& options) {
    BuddyAllocatorOptions buddy;
    buddy.memory_limit = options.memory_limit;
    return std::unique_ptr<Allocator>(std::make_unique<BuddyAllocator>(backend, buddy));
  });
  add("system", kSystemPriority, [](MemoryBackend& backend, const Options& options) {
    return std::unique_ptr<Allocator>(
        std::make_unique<SystemAllocator>(backend, options.memory_limit));
  });
}

void AllocatorRegistry::add(std::string name, int priority, Factory factory) {
  if (name.empty()) {
    throw InvalidArgument("Expected a non-empty allocator name to register, but got ''");
  }
  if (!factory) {
    throw InvalidArgument("Expected a factory for allocator '" + name + "', but got an empty one");
  }
  MutexLock lock(mutex_);
  for (const Entry& entry : entries_) {
    if (entry.name == name) {
      throw InvalidArgument("Expected a new allocator name to register, but got '" + name +
                            "', which is already registered (priority " +
                            std::to_string(entry.priority) + ")");
    }
  }
  Entry entry{std::move(name), priority, std::move(factory)};
  auto position = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& other) {
    return other.priority < entry.priority ||
           (other.priority == entry.priority && other.name > entry.name);
  });
  entries_.insert(position, std::move(entry));
}

std::vector<std::pair<std::string, int>> AllocatorRegistry::entries() const {
  MutexLock lock(mutex_);
  std::vector<std::pair<std::string, int>> result;
  result.reserve(entries_.size());
  for (const Entry& entry : entries_) result.emplace_back(entry.name, entry.priority);
  return result;
}

const AllocatorRegistry::Entry& AllocatorRegistry::choose(const Options& options) const {
  if (entries_.empty()) {
    throw InvalidArgument("Expected at least one registered allocator, but got an empty registry");
  }
  if (options.allocator.empty()) return entries_.front();
  for (const Entry& entry : entries_) {
    if (entry.name == options.allocator) return entry;
  }
  std::string known;
  for (const Entry& entry : entries_) known += (known.empty() ? "" : ", ") + entry.name;
  throw InvalidArgument(
      "Expected the allocator (Options::allocator, OCLVM_ALLOCATOR) to be one of " + known +
      ", but got '" + options.allocator + "'");
}

std::string AllocatorRegistry::default_name(const Options& options) const {
  MutexLock lock(mutex_);
  return choose(options).name;
}

std::unique_ptr<Allocator> AllocatorRegistry::create(MemoryBackend& backend,
                                                     const Options& options) const {
  Factory factory;
  {
    MutexLock lock(mutex_);
    factory = choose(options).factory;
  }
  return factory(backend, options);
}

}  // namespace oclvm
