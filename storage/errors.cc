// storage/errors.cc — ErrorInfo (the one catch ladder over oclvm's exception types) and the
// failure path of OCLVM_DCHECK.
#include "oclvm/storage/errors.h"
#include "oclvm/storage/log.h"

#include <cstdio>
#include <cstdlib>

namespace oclvm {

// Most derived first: every typed exception is also an Error, and every Error a std::exception.
ErrorInfo error_info(const std::exception_ptr& error) {
  using Type = ErrorInfo::Type;
  try {
    std::rethrow_exception(error);
  } catch (const OutOfMemoryError& e) {
    return {Type::kOutOfMemory, e.what()};
  } catch (const InvalidArgument& e) {
    return {Type::kInvalidArgument, e.what()};
  } catch (const BackendError& e) {
    return {Type::kBackend, e.what(), e.code()};
  } catch (const Error& e) {
    return {Type::kOther, e.what()};
  } catch (const std::exception& e) {
    return {Type::kForeign, e.what()};
  } catch (...) {
    return {Type::kUnknown, "an exception that is not a std::exception"};
  }
}

std::exception_ptr make_error(const ErrorInfo& error, const std::string& message) {
  switch (error.type) {
    case ErrorInfo::Type::kOutOfMemory:
      return std::make_exception_ptr(OutOfMemoryError(message));
    case ErrorInfo::Type::kInvalidArgument:
      return std::make_exception_ptr(InvalidArgument(message));
    case ErrorInfo::Type::kBackend:
      return std::make_exception_ptr(BackendError(message, error.backend_code));
    default:
      return std::make_exception_ptr(Error(message));
  }
}

}  // namespace oclvm

namespace oclvm::internal {

void dcheck_failed(const char* condition, const char* file, int line) {
  log_message(LogLevel::kFatal, "internal invariant violated: %s at %s:%d", condition, file, line);
  std::abort();
}

}  // namespace oclvm::internal
