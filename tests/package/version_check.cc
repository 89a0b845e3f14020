// tests/package/version_check.cc — the installed headers, the installed library and the version
// the package was asked for agree; a Runtime starts and stops.
#include <cstdio>
#include <cstring>

#include "oclvm/oclvm.h"

int main() {
  oclvm::Runtime runtime{oclvm::Options{}};
  std::printf("headers %s, library %s, expected %s, %zu devices\n", oclvm::kVersion,
              oclvm::library_version(), OCLVM_EXPECTED_VERSION, runtime.devices().size());
  const bool same = std::strcmp(oclvm::kVersion, oclvm::library_version()) == 0 &&
                    std::strcmp(oclvm::kVersion, OCLVM_EXPECTED_VERSION) == 0;
  return same ? 0 : 1;
}
