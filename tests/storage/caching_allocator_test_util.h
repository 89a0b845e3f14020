// tests/storage/caching_allocator_test_util.h — what the CachingAllocator tests share
// (caching_allocator_test.cc, caching_allocator_limits_test.cc): the fixture on opencl:0, options
// under which every free merges at once, and small helpers.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "oclvm/storage/caching_allocator.h"
#include "oclvm/storage/errors.h"
#include "tests/storage/test_util.h"

namespace oclvm::testing {

inline size_t round_up(size_t n, size_t q) { return (n + q - 1) / q * q; }
inline int64_t i64(size_t n) { return static_cast<int64_t>(n); }

// Runs `fn`, expects InvalidArgument whose message contains every string of `needles`.
template <typename Fn>
inline void expect_invalid_argument(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "'" << needle << "' not in: " << e.what();
    }
  }
}

// opencl:99, the device of the tests' FaultInjectionBackends ("opencl:99" in their messages).
constexpr Device kScriptedDevice{DeviceType::kOpenCL, 99};

class CachingAllocatorTest : public LeakCheckedTest {
 protected:
  static MemoryBackend& device() { return opencl_backend(0); }
};

// Options under which every free merges at once (quick reuse off, Note [Quick reuse]): the tests
// of splitting and coalescing, best fit and exact out-of-memory statistics use them.
// tests/storage/quick_reuse_test.cc covers parking.
inline CachingAllocatorOptions merge_at_once() {
  CachingAllocatorOptions options;
  options.quick_reuse_bytes = 0;
  return options;
}

}  // namespace oclvm::testing
