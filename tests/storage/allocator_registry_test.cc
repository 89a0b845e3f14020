// tests/storage/allocator_registry_test.cc — AllocatorRegistry: priority order, choice by name,
// errors for unknown and duplicate names, and the process-wide registry's built-in allocators.
#include "oclvm/storage/allocator_registry.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <thread>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/system_allocator.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using testing::opencl_backend;
using Entries = std::vector<std::pair<std::string, int>>;

class AllocatorRegistryTest : public testing::LeakCheckedTest {
 protected:
  // A factory that builds a SystemAllocator and notes its name in `built_`.
  AllocatorRegistry::Factory noting(std::string name) {
    return [this, name](MemoryBackend& backend, const Options& options) {
      built_.push_back(name);
      return std::unique_ptr<Allocator>(
          std::make_unique<SystemAllocator>(backend, options.memory_limit));
    };
  }
  std::vector<std::string> built_;
};

TEST_F(AllocatorRegistryTest, EntriesAreSortedByPriorityThenName) {
  AllocatorRegistry registry;
  EXPECT_TRUE(registry.entries().empty());
  registry.add("low", 1, noting("low"));
  registry.add("high", 90, noting("high"));
  registry.add("mid-b", 40, noting("mid-b"));
  registry.add("mid-a", 40, noting("mid-a"));
  registry.add("negative", -5, noting("negative"));
  EXPECT_EQ(registry.entries(),
            (Entries{{"high", 90}, {"mid-a", 40}, {"mid-b", 40}, {"low", 1}, {"negative", -5}}));
}

TEST_F(AllocatorRegistryTest, HighestPriorityWinsUnlessOptionsNameOne) {
  AllocatorRegistry registry;
  registry.add("low", 1, noting("low"));
  registry.add("high", 90, noting("high"));
  registry.add("mid", 40, noting("mid"));
  Options options;
  EXPECT_EQ(registry.default_name(options), "high");
  std::unique_ptr<Allocator> a = registry.create(opencl_backend(0), options);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(built_, std::vector<std::string>{"high"});

  options.allocator = "low";
  EXPECT_EQ(registry.default_name(options), "low");
  std::unique_ptr<Allocator> b = registry.create(opencl_backend(0), options);
  EXPECT_EQ(built_, (std::vector<std::string>{"high", "low"}));

  options.memory_limit = 12345;  // handed to the factory
  EXPECT_EQ(registry.create(opencl_backend(0), options)->memory_limit(), 12345u);
  testing::expect_nothing_live(*a);
  testing::expect_nothing_live(*b);
}

TEST_F(AllocatorRegistryTest, UnknownNameListsTheKnownOnes) {
  AllocatorRegistry registry;
  registry.add("alpha", 2, noting("alpha"));
  registry.add("beta", 1, noting("beta"));
  Options options;
  options.allocator = "gamma";
  for (int call = 0; call < 2; ++call) {
    try {
      if (call == 0)
        registry.create(opencl_backend(0), options);
      else
        registry.default_name(options);
      FAIL() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("'gamma'"), std::string::npos) << message;
      EXPECT_NE(message.find("alpha, beta"), std::string::npos) << message;
      EXPECT_NE(message.find("OCLVM_ALLOCATOR"), std::string::npos) << message;
    }
  }
  EXPECT_TRUE(built_.empty());
}

TEST_F(AllocatorRegistryTest, EmptyRegistryCannotCreate) {
  AllocatorRegistry registry;
  EXPECT_THROW(registry.create(opencl_backend(0), Options{}), InvalidArgument);
  EXPECT_THROW(registry.default_name(Options{}), InvalidArgument);
}

TEST_F(AllocatorRegistryTest, DuplicateEmptyNamesAndEmptyFactoriesAreRejected) {
  AllocatorRegistry registry;
  registry.add("alpha", 2, noting("alpha"));
  try {
    registry.add("alpha", 99, noting("alpha again"));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "'alpha'");
    EXPECT_CONTAINS(e.what(), "already registered");
  }
  EXPECT_THROW(registry.add("", 5, noting("")), InvalidArgument);
  EXPECT_THROW(registry.add("none", 5, AllocatorRegistry::Factory{}), InvalidArgument);
  EXPECT_EQ(registry.entries(), (Entries{{"alpha", 2}}));  // nothing was added or replaced
  std::unique_ptr<Allocator> a = registry.create(opencl_backend(0), Options{});
  EXPECT_EQ(built_, std::vector<std::string>{"alpha"});
}

TEST_F(AllocatorRegistryTest, ProcessRegistryHoldsTheBuiltInAllocators) {
  AllocatorRegistry& registry = AllocatorRegistry::instance();
  EXPECT_EQ(registry.entries(), (Entries{{"caching", 100}, {"buddy", 50}, {"system", 10}}));
  EXPECT_EQ(registry.default_name(Options{}), "caching");
  for (const char* name : {"caching", "buddy", "system"}) {
    Options options;
    options.allocator = name;
    options.memory_limit = 64 << 20;
    std::unique_ptr<Allocator> allocator = registry.create(opencl_backend(0), options);
    EXPECT_EQ(allocator->name(), name);
    EXPECT_EQ(allocator->device(), opencl_backend(0).device());
    EXPECT_EQ(allocator->memory_limit(), uint64_t{64} << 20) << name;
    Allocation a = allocator->allocate(1000);
    EXPECT_TRUE(a) << name;
    allocator->deallocate(a);
    testing::expect_nothing_live(*allocator);
  }
  EXPECT_EQ(registry.create(opencl_backend(0), Options{})->name(), "caching");
}

TEST_F(AllocatorRegistryTest, ProcessRegistryIsOneInstanceFromEveryThread) {
  AllocatorRegistry* seen[4] = {};
  std::vector<std::thread> threads;
  for (auto& slot : seen) threads.emplace_back([&slot] { slot = &AllocatorRegistry::instance(); });
  for (std::thread& t : threads) t.join();
  for (AllocatorRegistry* r : seen) EXPECT_EQ(r, &AllocatorRegistry::instance());
}

// OCLVM_ALLOCATOR reaches the registry through Options::from_environment.
TEST_F(AllocatorRegistryTest, EnvironmentNamesTheAllocator) {
  const char* saved = std::getenv("OCLVM_ALLOCATOR");
  const std::optional<std::string> previous =
      saved ? std::optional<std::string>(saved) : std::nullopt;
  setenv("OCLVM_ALLOCATOR", "buddy", 1);
  const Options options = Options::from_environment();
  if (previous)
    setenv("OCLVM_ALLOCATOR", previous->c_str(), 1);
  else
    unsetenv("OCLVM_ALLOCATOR");
  EXPECT_EQ(AllocatorRegistry::instance().default_name(options), "buddy");
  EXPECT_EQ(AllocatorRegistry::instance().create(opencl_backend(0), options)->name(), "buddy");
}

TEST_F(AllocatorRegistryTest, BuiltInsCanBeAddedToAnotherRegistry) {
  AllocatorRegistry registry;
  registry.add_builtin_allocators();
  registry.add("mine", 200, noting("mine"));
  EXPECT_EQ(registry.entries(),
            (Entries{{"mine", 200}, {"caching", 100}, {"buddy", 50}, {"system", 10}}));
  EXPECT_EQ(registry.default_name(Options{}), "mine");
  Options options;
  options.allocator = "system";
  EXPECT_EQ(registry.create(opencl_backend(0), options)->name(), "system");
  EXPECT_THROW(registry.add_builtin_allocators(), InvalidArgument);  // already there
  EXPECT_EQ(registry.entries().size(), 4u);
}

}  // namespace
}  // namespace oclvm
