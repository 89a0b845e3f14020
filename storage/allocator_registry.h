// storage/allocator_registry.h — AllocatorRegistry: named allocator factories with a priority.
//
// A registry maps a name ("caching", "buddy", "system", ...) to a factory and a priority. create()
// builds the allocator that Options::allocator names (OCLVM_ALLOCATOR, read by
// Options::from_environment), or, when that is empty, the one of highest priority.
//
// The process-wide registry, instance(), is filled explicitly when it is first used — no
// registration from static initializers — with the built-in allocators:
//
//   name       priority  allocator
//   caching    100       CachingAllocator (storage/caching_allocator.h)
//   buddy       50       BuddyAllocator   (storage/buddy_allocator.h)
//   system      10       SystemAllocator  (storage/system_allocator.h)
//
// each given Options::memory_limit and otherwise its defaults. Other registries (tests, tools)
// start empty and may add the built-ins with add_builtin_allocators().
//
// Ordering: entries() and the choice of the default sort by priority, highest first; equal
// priorities go by name, so the choice never depends on the order of add() calls.
//
// Thread-safety: thread-safe. instance() may be called from any thread (a function-local static);
// add, entries, create and default_name take the registry's mutex. Factories run outside it.
// Lifetime: instance() is never destroyed, so allocators may still be created during exit.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "oclvm/storage/allocator.h"
#include "oclvm/storage/backend.h"
#include "oclvm/storage/options.h"
#include "oclvm/storage/thread_annotations.h"

namespace oclvm {

class AllocatorRegistry {
 public:
  // Builds an allocator for one device's backend. Throws whatever the allocator's constructor
  // throws (InvalidArgument for bad options).
  using Factory = std::function<std::unique_ptr<Allocator>(MemoryBackend&, const Options&)>;

  // Priorities of the built-in allocators.
  static constexpr int kCachingPriority = 100;
  static constexpr int kBuddyPriority = 50;
  static constexpr int kSystemPriority = 10;

  // The process-wide registry, holding the built-in allocators.
  static AllocatorRegistry& instance();

  // An empty registry.
  AllocatorRegistry() = default;
  AllocatorRegistry(const AllocatorRegistry&) = delete;
  AllocatorRegistry& operator=(const AllocatorRegistry&) = delete;

  // Registers `factory` as `name`. Throws InvalidArgument, and registers nothing, when the name is
  // empty, already registered, or the factory is empty.
  void add(std::string name, int priority, Factory factory);
  // Adds caching, buddy and system with the priorities above.
  void add_builtin_allocators();

  // (name, priority) of every entry, highest priority first, then by name.
  std::vector<std::pair<std::string, int>> entries() const;

  // The name create() would use: options.allocator when not empty, else the highest priority
  // entry. Throws InvalidArgument when options.allocator names no entry (the message lists the
  // names there are) or when the registry is empty.
  std::string default_name(const Options& options) const;

  // Builds the allocator default_name(options) names, for `backend`.
  std::unique_ptr<Allocator> create(MemoryBackend& backend, const Options& options) const;

 private:
  struct Entry {
    std::string name;  // unique in the registry, not empty
    int priority;      // higher wins when no name is asked for
    Factory factory;   // not empty
  };

  // The entry default_name(options) names.
  const Entry& choose(const Options& options) const OCLVM_REQUIRES(mutex_);

  mutable Mutex mutex_;
  std::vector<Entry> entries_ OCLVM_GUARDED_BY(mutex_);  // sorted: priority desc, then name asc
};

}  // namespace oclvm
