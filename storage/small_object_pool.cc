// storage/small_object_pool.cc — thread-local free lists by size class.
#include "oclvm/storage/small_object_pool.h"

#include <new>

namespace oclvm::pool {
namespace {

constexpr size_t kClasses = kMaxPooledBytes / kGranule;

struct FreeBlock {
  FreeBlock* next;
};

// This thread's free lists. Trivially constructible and destructible, so the thread_local is
// constant-initialised: the hot path reads it with no guard call (a cache with a constructor cost
// a `__tls_init` call on every access, ~6% of an allocate/release round trip in the torch
// adapter). The lists are freed at thread exit by a Reaper, made on the thread's first use.
// Before that use, and after the Reaper has run (objects freed by atexit handlers, static
// destructors or later thread_local destructors), blocks go straight to ::operator new / delete.
enum class State : unsigned char { kUnused, kAlive, kGone };

struct Cache {
  FreeBlock* head[kClasses];
  size_t count[kClasses];
  State state;
};

thread_local Cache cache{};

struct Reaper {
  ~Reaper() {
    cache.state = State::kGone;  // never touch the lists again
    for (size_t c = 0; c < kClasses; ++c) {
      // Detached first: a block on a list means a live cache (allocate relies on it).
      FreeBlock* block = cache.head[c];
      cache.head[c] = nullptr;
      cache.count[c] = 0;
      while (block != nullptr) {
        FreeBlock* next = block->next;
        ::operator delete(block);
        block = next;
      }
    }
  }
};

// Makes this thread's cache usable: on its first use (state kUnused) only.
void touch_cache() {
  static thread_local Reaper reaper;  // registers the thread-exit cleanup
  (void)&reaper;
  cache.state = State::kAlive;
}

// Class c holds blocks of (c + 1) * kGranule bytes.
size_t class_of(size_t bytes) { return bytes == 0 ? 0 : (bytes - 1) / kGranule; }

}  // namespace

void* allocate(size_t bytes) {
  if (bytes > kMaxPooledBytes) return ::operator new(bytes);
  const size_t c = class_of(bytes);
  // A block on a list means the cache is alive (the lists are empty before the first use and
  // after the Reaper), so the common case reads the thread-local once: in a dlopen'ed module each
  // read is a __tls_get_addr call, which the compiler repeats after any call it cannot see into.
  Cache& mine = cache;
  if (FreeBlock* block = mine.head[c]) {
    mine.head[c] = block->next;
    --mine.count[c];
    return block;
  }
  if (mine.state == State::kUnused) touch_cache();
  return ::operator new((c + 1) * kGranule);
}

void deallocate(void* pointer, size_t bytes) noexcept {
  if (pointer == nullptr) return;
  if (bytes > kMaxPooledBytes) {
    ::operator delete(pointer);
    return;
  }
  const size_t c = class_of(bytes);
  Cache& mine = cache;
  if (mine.state != State::kAlive || mine.count[c] >= kMaxCachedPerClass) {
    ::operator delete(pointer);
    return;
  }
  auto* block = static_cast<FreeBlock*>(pointer);
  block->next = mine.head[c];
  mine.head[c] = block;
  ++mine.count[c];
}

}  // namespace oclvm::pool
