// storage/hex.cc — hex().
#include "oclvm/storage/hex.h"

#include <cinttypes>
#include <cstdio>

namespace oclvm {

std::string hex(uint64_t value, int min_digits) {
  char text[2 + 16 + 1];  // "0x", the 16 digits of the widest value, the terminator
  std::snprintf(text, sizeof text, "0x%0*" PRIx64, min_digits, value);
  return text;
}

}  // namespace oclvm
