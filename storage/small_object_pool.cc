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
      while (cache.head[c] != nullptr) {
        FreeBlock* block = cache.head[c];
        cache.head[c] = block->next;
        ::operator delete(block);
      }
      cache.count[c] = 0;
    }
  }
};

// Makes this thread's cache usable on first use; false once it has been freed (thread exit).
bool touch_cache() {
  if (cache.state == State::kGone) return false;
  static thread_local Reaper reaper;  // registers the thread-exit cleanup
  (void)&reaper;
  cache.state = State::kAlive;
  return true;
}

// Class c holds blocks of (c + 1) * kGranule bytes.
size_t class_of(size_t bytes) { return bytes == 0 ? 0 : (bytes - 1) / kGranule; }

}  // namespace

void* allocate(size_t bytes) {
  if (bytes > kMaxPooledBytes) return ::operator new(bytes);
  const size_t c = class_of(bytes);
  if (cache.state != State::kAlive && !touch_cache()) return ::operator new((c + 1) * kGranule);
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
  if (cache.state != State::kAlive || cache.count[c] >= kMaxCachedPerClass) {
    ::operator delete(pointer);
    return;
  }
  auto* block = static_cast<FreeBlock*>(pointer);
  block->next = cache.head[c];
  cache.head[c] = block;
  ++cache.count[c];
}

}  // namespace oclvm::pool
