// adapters/script/parser.h — parse_script: a script's text to its parsed form (ast.h).
//
// The first of the two phases (design/scripts.md, "Two phases"): the whole text is read and
// everything that can be known without a device is checked — syntax, names declared before use
// and not twice, devices present, numbers that fit, positive sizes, host-buffer bounds, `run`
// before expectations, `expect error` right after a `run`, options before statements. The first
// problem throws ScriptError (lexer.h) with what() = "FILE:LINE:COL: error: message"; no VM is
// created and nothing runs. A Script returned keeps the promises listed in ast.h.
//
// The statements are dispatched from one table in parser.cc (keyword -> parse function); the
// list of keywords in "Expected a statement (...)" is made from it.
//
// Thread-safety: parse_script and load_script are pure functions (load_script reads one file).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "adapters/script/ast.h"
#include "adapters/script/lexer.h"  // ScriptError

namespace oclvm::script {

struct ParseOptions {
  // OpenCL devices present (opencl:0 .. N-1); `cpu` always exists. A script that says `require
  // devices M` may name opencl:0 .. max(N, M)-1 (it is skipped when M > N, see execute).
  size_t opencl_devices = 1;
};

// Parses `text` (the contents of `file`, which is only used in messages). Throws ScriptError.
Script parse_script(std::string_view text, std::string file, const ParseOptions& options);
// Reads and parses a file. Throws ScriptError (also when the file cannot be read).
Script load_script(const std::string& path, const ParseOptions& options);

}  // namespace oclvm::script
