// storage/log.cc — the log handler and its default.
#include "oclvm/storage/log.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>

#include "oclvm/storage/thread_annotations.h"

namespace oclvm {

namespace {

void write_to_stderr(LogLevel level, const char* message, void* /*context*/) {
  if (level == LogLevel::kWarning) {
    std::fprintf(stderr, "oclvm: warning: %s\n", message);
  } else {
    std::fprintf(stderr, "oclvm: %s\n", message);
  }
}

// The installed handler. Held while a handler runs, so set_log_handler waits for calls of the
// handler it replaces. Never destroyed: messages may come from static destructors.
struct Sink {
  Mutex mutex;
  LogHandler handler OCLVM_GUARDED_BY(mutex) = &write_to_stderr;
  void* context OCLVM_GUARDED_BY(mutex) = nullptr;
};

Sink& sink() {
  static Sink* const installed = new Sink();
  return *installed;
}

// Set while this thread runs the handler: a message logged from inside it goes to stderr.
thread_local bool t_in_handler = false;

void deliver(LogLevel level, const char* message) noexcept {
  if (t_in_handler) {
    write_to_stderr(level, message, nullptr);
    return;
  }
  Sink& installed = sink();
  MutexLock lock(installed.mutex);
  t_in_handler = true;
  try {
    installed.handler(level, message, installed.context);
  } catch (...) {
    // A handler must not throw; the message is lost rather than the process.
  }
  t_in_handler = false;
}

}  // namespace

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
    case LogLevel::kFatal:
      return "fatal";
  }
  return "unknown";
}

void set_log_handler(LogHandler handler, void* context) {
  Sink& installed = sink();
  MutexLock lock(installed.mutex);
  installed.handler = handler != nullptr ? handler : &write_to_stderr;
  installed.context = handler != nullptr ? context : nullptr;
}

void log_message(LogLevel level, const char* format, ...) {
  char local[1024];
  va_list arguments;
  va_start(arguments, format);
  va_list again;
  va_copy(again, arguments);
  const int length = std::vsnprintf(local, sizeof local, format, arguments);
  va_end(arguments);
  if (length < 0) {
    va_end(again);
    deliver(level, "(a message that could not be formatted)");
    return;
  }
  if (static_cast<size_t>(length) < sizeof local) {
    va_end(again);
    deliver(level, local);
    return;
  }
  // Longer than the stack buffer: the whole message from the heap, or the part that fit, marked.
  std::unique_ptr<char[]> whole(new (std::nothrow) char[static_cast<size_t>(length) + 1]);
  if (whole != nullptr) std::vsnprintf(whole.get(), static_cast<size_t>(length) + 1, format, again);
  va_end(again);
  if (whole != nullptr) {
    deliver(level, whole.get());
    return;
  }
  static constexpr char kCut[] = " [message cut: out of memory]";
  std::snprintf(local + sizeof local - sizeof kCut, sizeof kCut, "%s", kCut);
  deliver(level, local);
}

}  // namespace oclvm
