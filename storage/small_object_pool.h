// storage/small_object_pool.h — per-thread caches for the small objects made at instruction rate.
//
// Instructions, BlobObjects and BlobStorages are created and destroyed once per instruction. A list
// of 1000 of them outruns glibc's per-thread cache (7 blocks per size), and every free then goes
// to the arena's bins; these caches keep up to kMaxCachedPerClass freed blocks per size class and
// thread, so a steady stream of such objects reuses memory without touching malloc.
//
//   allocate(bytes)            a block of at least `bytes` (16-byte aligned) from this thread's
//                              cache, or from ::operator new when the cache is empty or the size
//                              is over kMaxPooledBytes
//   deallocate(p, bytes)       back to this thread's cache (any thread may free any block: every
//                              block is an ::operator new block of its class size), or to
//                              ::operator delete when the cache is full
//   PoolAllocator<T>           a std allocator over them, for std::allocate_shared
//
// Thread-safety: thread-safe; each thread has its own cache (freed at thread exit).
#pragma once

#include <cstddef>

namespace oclvm::pool {

inline constexpr size_t kGranule = 32;
inline constexpr size_t kMaxPooledBytes = 512;
inline constexpr size_t kMaxCachedPerClass = 1024;

void* allocate(size_t bytes);
void deallocate(void* pointer, size_t bytes) noexcept;

template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() noexcept = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(pool::allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { pool::deallocate(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const noexcept { return true; }
};

}  // namespace oclvm::pool
