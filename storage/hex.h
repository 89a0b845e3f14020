// storage/hex.h — a number as "0x..." text, for the addresses and fill patterns messages show.
//
// Not installed: only oclvm's own .cc files (every layer and the script front end) use it.
//
// Thread-safety: a pure function; any thread.
#pragma once

#include <cstdint>
#include <string>

namespace oclvm {

// "0x" and the lowercase hexadecimal digits of `value`, zero-padded to at least `min_digits`
// (at most 16): hex(255) == "0xff", hex(0xab, 4) == "0x00ab". An address: hex(reinterpret_cast<
// uintptr_t>(pointer)).
std::string hex(uint64_t value, int min_digits = 1);

}  // namespace oclvm
