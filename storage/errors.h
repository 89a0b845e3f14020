// storage/errors.h — the exception types every oclvm layer throws.
//
// Two tiers: errors caused by the user or the environment throw one of the typed
// exceptions below, with a message of the form "Expected X, but got Y" where that reads naturally;
// broken internal invariants are debug assertions (OCLVM_DCHECK), never exceptions.
//
//   Error               base class of everything oclvm throws.
//   InvalidArgument     bad input to a public function (size, device, handle). Nothing changed.
//   OutOfMemoryError    the device (or its configured limit) cannot hold the request. The
//                       allocator has already tried to free cached memory.
//   BackendError        a device call failed for another reason; names the call, the error and the
//                       device (for OpenCL: "clEnqueueWriteBuffer failed with CL_INVALID_VALUE (-30)
//                       on opencl:0").
//
// ErrorInfo tells these types apart, in one place, for code that carries an error over into
// another form: an instruction's name put before its message (vm/device_worker.cc), a script's
// `expect error` kind (adapters/script/executor.cc), torch's matching c10 error
// (adapters/torch/device.h).
//
// Thread-safety: exception objects are immutable after construction; the functions are pure.
#pragma once

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>

namespace oclvm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class InvalidArgument : public Error {
 public:
  using Error::Error;
};

class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

class BackendError : public Error {
 public:
  BackendError(const std::string& message, int code) : Error(message), code_(code) {}
  // The backend's own error code (an OpenCL cl_int for the OpenCL backend, errno for the host).
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// What an exception is and says.
struct ErrorInfo {
  enum class Type : uint8_t {
    kOutOfMemory,      // OutOfMemoryError
    kInvalidArgument,  // InvalidArgument
    kBackend,          // BackendError
    kOther,            // another Error
    kForeign,          // a std::exception that is not an oclvm Error
    kUnknown,          // not a std::exception
  };
  Type type = Type::kUnknown;
  std::string message;   // what(); for kUnknown, "an exception that is not a std::exception"
  int backend_code = 0;  // BackendError::code(), for kBackend
};

// Rethrows `error` (not null) and catches it to say what it is.
ErrorInfo error_info(const std::exception_ptr& error);

// An exception of the type `error` describes, carrying `message` (and the backend code): the same
// oclvm type, or Error for kOther, kForeign and kUnknown.
std::exception_ptr make_error(const ErrorInfo& error, const std::string& message);

}  // namespace oclvm

// Internal invariants: checked in debug builds and in tests (which build with OCLVM_CHECKS=1),
// compiled out otherwise. A failure prints the condition and aborts: it is a bug in oclvm, not a
// user error.
#if defined(OCLVM_CHECKS) || !defined(NDEBUG)
#define OCLVM_DCHECK(cond)                                                        \
  do {                                                                            \
    if (!(cond)) ::oclvm::internal::dcheck_failed(#cond, __FILE__, __LINE__);     \
  } while (0)
#else
#define OCLVM_DCHECK(cond) \
  do {                     \
  } while (0)
#endif

namespace oclvm::internal {
[[noreturn]] void dcheck_failed(const char* condition, const char* file, int line);
}  // namespace oclvm::internal
