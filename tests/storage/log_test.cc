// tests/storage/log_test.cc — the log handler: a library message reaches the embedder's handler,
// whole, on any thread, and the default goes back to stderr.
#include "oclvm/storage/log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "oclvm/storage/caching_allocator.h"
#include "oclvm/storage/thread_annotations.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

// What a handler received. Thread-safe.
struct Received {
  Mutex mutex;
  std::vector<std::pair<LogLevel, std::string>> messages OCLVM_GUARDED_BY(mutex);

  static void handler(LogLevel level, const char* message, void* context) {
    auto* self = static_cast<Received*>(context);
    MutexLock lock(self->mutex);
    self->messages.emplace_back(level, message);
  }
  std::vector<std::pair<LogLevel, std::string>> taken() {
    MutexLock lock(mutex);
    return messages;
  }
};

class LogTest : public testing::LeakCheckedTest {
 protected:
  void TearDown() override {
    set_log_handler(nullptr);
    LeakCheckedTest::TearDown();
  }
};

TEST_F(LogTest, ALibraryWarningReachesTheInstalledHandlerAndNotStderr) {
  Received received;
  set_log_handler(&Received::handler, &received);
  ::testing::internal::CaptureStderr();
  {
    CachingAllocator allocator(testing::opencl_backend(0));
    (void)allocator.allocate(4096);  // never given back: the destructor warns
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  const auto messages = received.taken();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].first, LogLevel::kWarning);
  EXPECT_NE(messages[0].second.find("1 live block(s)"), std::string::npos) << messages[0].second;
  EXPECT_NE(messages[0].second.find("opencl:0"), std::string::npos) << messages[0].second;
}

TEST_F(LogTest, NoHandlerMeansStderrWithTheLevel) {
  Received received;
  set_log_handler(&Received::handler, &received);
  set_log_handler(nullptr);
  ::testing::internal::CaptureStderr();
  log_message(LogLevel::kWarning, "disk %d of %s", 3, "7");
  log_message(LogLevel::kError, "gone");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "oclvm: warning: disk 3 of 7\noclvm: gone\n");
  EXPECT_TRUE(received.taken().empty());
}

TEST_F(LogTest, ALongMessageArrivesWhole) {
  Received received;
  set_log_handler(&Received::handler, &received);
  const std::string long_text(5000, 'x');
  log_message(LogLevel::kError, "[%s]", long_text.c_str());
  const auto messages = received.taken();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].second, "[" + long_text + "]");
}

// A handler that logs goes around itself to stderr instead of deadlocking; one that throws loses
// its message, not the process.
void logs_again(LogLevel, const char* message, void* context) {
  static_cast<std::atomic<int>*>(context)->fetch_add(1);
  log_message(LogLevel::kError, "inner: %s", message);
}
void throws(LogLevel, const char*, void*) { throw std::runtime_error("a handler that throws"); }

TEST_F(LogTest, AHandlerThatLogsOrThrowsNeitherHangsNorEscapes) {
  std::atomic<int> calls{0};
  set_log_handler(&logs_again, &calls);
  ::testing::internal::CaptureStderr();
  log_message(LogLevel::kError, "outer");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "oclvm: inner: outer\n");
  EXPECT_EQ(calls.load(), 1);
  set_log_handler(&throws);
  EXPECT_NO_THROW(log_message(LogLevel::kWarning, "dropped"));
}

// For ThreadSanitizer: threads logging while the handler is replaced; every message reaches one
// of the handlers, none is lost or torn.
TEST_F(LogTest, ReplacingTheHandlerWhileThreadsLogLosesNothing) {
  Received first;
  Received second;
  set_log_handler(&Received::handler, &first);
  constexpr int kThreads = 2;
  constexpr int kEach = 500;
  std::vector<std::thread> loggers;
  for (int t = 0; t < kThreads; ++t) {
    loggers.emplace_back([t] {
      for (int i = 0; i < kEach; ++i) log_message(LogLevel::kWarning, "thread %d message %d", t, i);
    });
  }
  for (int swap = 0; swap < 50; ++swap) {
    set_log_handler(&Received::handler, swap % 2 == 0 ? &second : &first);
    std::this_thread::yield();
  }
  for (std::thread& logger : loggers) logger.join();
  const size_t total = first.taken().size() + second.taken().size();
  EXPECT_EQ(total, static_cast<size_t>(kThreads * kEach));
  for (const auto& [level, text] : first.taken()) ASSERT_EQ(text.rfind("thread ", 0), 0u) << text;
}

}  // namespace
}  // namespace oclvm
