// storage/small_object_pool.cc — thread-local free lists by size class.
#include "storage/small_object_pool.h"

#include <new>

namespace oclvm::pool {
namespace {

constexpr size_t kClasses = kMaxPooledBytes / kGranule;

struct FreeBlock {
  FreeBlock* next;
};

struct Cache {
  FreeBlock* head[kClasses] = {};
  size_t count[kClasses] = {};
  ~Cache() {
    for (size_t c = 0; c < kClasses; ++c) {
      while (head[c] != nullptr) {
        FreeBlock* block = head[c];
        head[c] = block->next;
        ::operator delete(block);
      }
    }
  }
};

thread_local Cache cache;

// Class c holds blocks of (c + 1) * kGranule bytes.
size_t class_of(size_t bytes) { return bytes == 0 ? 0 : (bytes - 1) / kGranule; }

}  // namespace

void* allocate(size_t bytes) {
  if (bytes > kMaxPooledBytes) return ::operator new(bytes);
  const size_t c = class_of(bytes);
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
  if (cache.count[c] >= kMaxCachedPerClass) {
    ::operator delete(pointer);
    return;
  }
  auto* block = static_cast<FreeBlock*>(pointer);
  block->next = cache.head[c];
  cache.head[c] = block;
  ++cache.count[c];
}

}  // namespace oclvm::pool
