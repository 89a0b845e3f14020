// storage/errors.cc — the failure path of OCLVM_DCHECK.
#include "oclvm/storage/errors.h"

#include <cstdio>
#include <cstdlib>

namespace oclvm::internal {

void dcheck_failed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "oclvm: internal invariant violated: %s at %s:%d\n", condition, file, line);
  std::abort();
}

}  // namespace oclvm::internal
