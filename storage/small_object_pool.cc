// storage/small_object_pool.cc — thread-local free lists by size class.
#include "oclvm/storage/small_object_pool.h"

#include <new>

namespace oclvm::pool {
namespace {

constexpr size_t kClasses = kMaxPooledBytes / kGranule;

struct FreeBlock {
  FreeBlock* next;
};

// False before this thread's cache is built and after it is destroyed (objects freed by atexit
// handlers, static destructors or later thread_local destructors): then blocks go straight to
// ::operator new / delete. Trivially destructible, so it outlives the cache.
thread_local bool cache_alive = false;
thread_local bool cache_destroyed = false;  // never touch the cache again (it is gone)

struct Cache {
  FreeBlock* head[kClasses] = {};
  size_t count[kClasses] = {};
  Cache() { cache_alive = true; }
  ~Cache() {
    cache_alive = false;
    cache_destroyed = true;
    for (size_t c = 0; c < kClasses; ++c) {
      while (head[c] != nullptr) {
        FreeBlock* block = head[c];
        head[c] = block->next;
        ::operator delete(block);
      }
      count[c] = 0;
    }
  }
};

thread_local Cache cache;

// Builds this thread's cache on first use; false once it has been destroyed (thread exit).
bool touch_cache() {
  if (cache_destroyed) return false;
  (void)cache.count[0];  // the first access constructs the thread_local, which sets cache_alive
  return cache_alive;
}

// Class c holds blocks of (c + 1) * kGranule bytes.
size_t class_of(size_t bytes) { return bytes == 0 ? 0 : (bytes - 1) / kGranule; }

}  // namespace

void* allocate(size_t bytes) {
  if (bytes > kMaxPooledBytes) return ::operator new(bytes);
  const size_t c = class_of(bytes);
  if (!cache_alive && !touch_cache()) return ::operator new((c + 1) * kGranule);
  if (FreeBlock* block = cache.head[c]) {
    cache.head[c] = block->next;
    --cache.count[c];
    return block;
  }
  return ::operator new((c + 1) * kGranule);
}

void deallocate(void* pointer, size_t bytes) noexcept {
  if (pointer == nullptr) return;
  if (bytes > kMaxPooledBytes) {
    ::operator delete(pointer);
    return;
  }
  const size_t c = class_of(bytes);
  if (!cache_alive || cache.count[c] >= kMaxCachedPerClass) {
    ::operator delete(pointer);
    return;
  }
  auto* block = static_cast<FreeBlock*>(pointer);
  block->next = cache.head[c];
  cache.head[c] = block;
  ++cache.count[c];
}

}  // namespace oclvm::pool
