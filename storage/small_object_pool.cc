// storage/small_object_pool.cc — thread-local free lists by size class.
#include "oclvm/storage/small_object_pool.h"

#include <new>

#include "oclvm/storage/hot_thread_local.h"

namespace oclvm::pool {
namespace {

constexpr size_t kClasses = kMaxPooledBytes / kGranule;

struct FreeBlock {
  FreeBlock* next;
};

// This thread's free lists, made on the thread's first allocation and freed at its exit by a
// Reaper. The thread-local itself is one pointer, initial-exec (storage/hot_thread_local.h): the
// hot path reads it with one load relative to the thread pointer, no __tls_get_addr call and no
// initialisation guard, and it keeps the module's static TLS small. Before the first allocation,
// and after the Reaper has run (objects freed by atexit handlers, static destructors or later
// thread_local destructors), the pointer is null and blocks go straight to ::operator new /
// delete; t_reaped keeps a thread whose cache is gone from making another.
struct Cache {
  FreeBlock* head[kClasses] = {};
  size_t count[kClasses] = {};
};

OCLVM_HOT_TLS thread_local Cache* t_cache = nullptr;
thread_local bool t_reaped = false;

struct Reaper {
  ~Reaper() {
    Cache* mine = t_cache;
    t_cache = nullptr;  // never touch the lists again
    t_reaped = true;
    for (size_t c = 0; c < kClasses; ++c) {
      FreeBlock* block = mine->head[c];
      while (block != nullptr) {
        FreeBlock* next = block->next;
        ::operator delete(block);
        block = next;
      }
    }
    delete mine;
  }
};

// Gives this thread its cache, on its first allocation (never after the Reaper). A thread that
// cannot get one (out of memory) goes on without.
void make_cache() noexcept {
  if (t_reaped) return;
  Cache* mine = new (std::nothrow) Cache();
  if (mine == nullptr) return;
  t_cache = mine;
  static thread_local Reaper reaper;  // registers the thread-exit cleanup
  (void)&reaper;
}

// Class c holds blocks of (c + 1) * kGranule bytes.
size_t class_of(size_t bytes) { return bytes == 0 ? 0 : (bytes - 1) / kGranule; }

}  // namespace

void* allocate(size_t bytes) {
  if (bytes > kMaxPooledBytes) return ::operator new(bytes);
  const size_t c = class_of(bytes);
  Cache* mine = t_cache;
  if (mine == nullptr) {
    make_cache();
  } else if (FreeBlock* block = mine->head[c]) {
    mine->head[c] = block->next;
    --mine->count[c];
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
  Cache* mine = t_cache;
  if (mine == nullptr || mine->count[c] >= kMaxCachedPerClass) {
    ::operator delete(pointer);
    return;
  }
  auto* block = static_cast<FreeBlock*>(pointer);
  block->next = mine->head[c];
  mine->head[c] = block;
  ++mine->count[c];
}

}  // namespace oclvm::pool
