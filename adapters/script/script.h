// adapters/script/script.h — the instruction script language: parse a script, then execute it.
//
// A script is a small line-oriented text that names streams, host buffers, events and blobs, builds
// instructions with InstructionsBuilder, runs them with vm::Run (`run`), and states what must hold
// afterwards (`expect`). design/scripts.md is the reference of the language; in short:
//
//   require devices 2              # options first: they configure the script's VM
//   allocator caching
//   limit 8M
//   stream s2 = opencl:0 user 1    # named streams; a device name is its compute stream
//   host h 64                      # named host buffers (zeroed, or `= ab cd*4`)
//   alloc b = opencl:0 4096        # named blobs, allocated on a stream
//   fill b[0] 4096 0xab on s2      # the instructions of builder.h, see design/scripts.md
//   run                            # one vm::Run of what was built since the last run
//   expect allocated opencl:0 = 4K # expectations: statistics, bytes, errors, barriers
//   expect fill b[0] 4096 0xab
//   release b
//   run
//
// Two phases (the promise `oclvm run` and the tests rely on):
//   parse_script   reads the whole text and checks everything that can be known without running:
//                  syntax, names declared before use and not twice, devices present, numbers that
//                  fit, positive sizes, host-buffer bounds, `run` before expectations, `expect
//                  error` right after a `run`. The first problem throws ScriptError, whose what()
//                  is "FILE:LINE:COL: error: message"; no VM is created, nothing runs.
//   execute        runs a parsed Script on a fresh VirtualMachine built from the script's options
//                  and reports every expectation that did not hold (ExecuteResult). What can only
//                  be known when running (out of memory, a copy past a blob's end, a released blob,
//                  a double release) is the VM's and the builder's business: the run fails and the
//                  script states it with `expect error ...`. Blobs still live at the end are
//                  released and each is reported as a failure "leaked blob b (4096 bytes)".
//
// The entry header of the front end (the `oclvm run` command, the tests and the fuzzer include
// it); the language lives in file pairs beside it:
//   ast.h       Script, the parsed form: options, declarations, statements (op::*)
//   lexer.h     ScriptError, tokens of a line, the cursor that reads operands and literals
//   parser.h    ParseOptions, parse_script, load_script; the one table of statements
//   executor.h  ExecuteOptions, ExecuteResult, Failure, execute
// The library is oclvm_script (CMakeLists.txt): built on oclvm_instructions, not installed.
//
// Thread-safety: parse_script is a pure function. execute uses its own VM; one Script may be
// executed by several threads at once (it is only read).
#pragma once

#include "adapters/script/ast.h"
#include "adapters/script/executor.h"
#include "adapters/script/lexer.h"
#include "adapters/script/parser.h"
