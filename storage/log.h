// storage/log.h — where oclvm's own messages go: a handler the embedder may replace.
//
// oclvm reports through exceptions wherever a caller is there to catch one. A few events have no
// such caller: a destructor that had to free memory nobody released, a release that failed on a
// worker thread, a detached release's error, a Runtime kept alive past its destruction, a broken
// internal invariant just before the process aborts. Those messages go to the log handler. The
// default handler writes "oclvm: <message>\n" to stderr; an embedder that has a log of its own
// installs a handler with set_log_handler (the torch adapter and the CLI keep the default).
//
// The handler is called on whatever thread the event happened on (often a device's worker),
// possibly inside a destructor, while oclvm holds no lock of its own but the handler's. It must not
// throw (an exception is swallowed) and should not block for long. A handler that calls into
// oclvm in a way that logs again gets that message written to stderr instead (no recursion).
// Messages are passed whole, never truncated; when memory for a long message cannot be had, the
// message says so at its end.
//
// Thread-safety: thread-safe. set_log_handler may race with logging; once it returns, no call of
// the previous handler is in progress or will start.
#pragma once

#include <cstdarg>

namespace oclvm {

enum class LogLevel {
  kWarning,  // something was repaired (memory freed that should have been released)
  kError,    // an operation failed with nobody to tell but the log
  kFatal,    // a broken invariant; the process aborts right after the message
};

// "warning", "error" or "fatal".
const char* log_level_name(LogLevel level);

// `message` is valid only during the call. `context` is the pointer given to set_log_handler.
using LogHandler = void (*)(LogLevel level, const char* message, void* context);

// Installs `handler` (nullptr: the default, stderr) with `context`, for every thread.
void set_log_handler(LogHandler handler, void* context = nullptr);

// Formats as printf does and hands the message to the handler. Allocates only for a message
// longer than 1 KiB; never throws.
void log_message(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace oclvm
