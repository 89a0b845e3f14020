// storage/errors.cc — the failure path of OCLVM_DCHECK.
#include "oclvm/storage/errors.h"
#include "oclvm/storage/log.h"

#include <cstdio>
#include <cstdlib>

namespace oclvm::internal {

void dcheck_failed(const char* condition, const char* file, int line) {
  log_message(LogLevel::kFatal, "internal invariant violated: %s at %s:%d", condition, file, line);
  std::abort();
}

}  // namespace oclvm::internal
