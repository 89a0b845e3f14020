# tests/scripts/scripts.cmake — ctest entries for the instruction scripts (`oclvm run`).
#
# Included from CMakeLists.txt inside the tests block, after tests/cli/cli_tests.cmake, whose
# checker (`cmake -P cli_tests.cmake`: exact exit status, stdout / stderr regular expressions)
# every entry here runs. Kinds of scripts, one ctest entry (or two) each:
#
#   tests/scripts/*.oclvm            must hold: exit 0 and "FILE: N expectations, all held".
#                                    Run on one PoCL device (POCL_DEVICES=basic), where a script
#                                    that says `require devices 2` must print "skipped"; such a
#                                    script runs again as NAME.two_devices on "basic basic". Every
#                                    script also runs as NAME.pthread on "pthread pthread" (two
#                                    devices of PoCL's pthread driver, whose queues really run
#                                    concurrently — what the hazard scripts are about).
#   tests/scripts/malformed/*.oclvm  must be refused: exit 2, nothing on stdout (nothing ran), and
#                                    stderr starting with "FILE:" followed by the text of the
#                                    script's own `# expect-parse-error: LINE:COL: error: ...` line.
#   tests/scripts/failing/*.oclvm    must fail: exit 1, and stdout containing the text of each of
#                                    the script's `# expect-output: ...` lines (the checker's
#                                    output, that failures name their line and what was seen).
#
# plus a few command-line cases (--trace, several files, a malformed file among good ones).

if(NOT DEFINED OCLVM_CLI_TESTS_SCRIPT)
  set(OCLVM_CLI_TESTS_SCRIPT ${PROJECT_SOURCE_DIR}/tests/cli/cli_tests.cmake)
endif()
set(OCLVM_SCRIPTS_DIR ${CMAKE_CURRENT_LIST_DIR})

# oclvm_script_test(NAME EXIT_STATUS [ARGS a b ...] [STDOUT re ...] [STDERR re ...] [ENV VAR=value ...])
# One ctest entry oclvm_script.NAME running `oclvm ARGS` through the cli_tests.cmake checker.
function(oclvm_script_test name exit_status)
  cmake_parse_arguments(T "" "" "ARGS;STDOUT;STDERR;ENV" ${ARGN})
  list(JOIN T_ARGS "|" joined_args)
  list(JOIN T_STDOUT "@@" joined_stdout)
  list(JOIN T_STDERR "@@" joined_stderr)
  add_test(NAME oclvm_script.${name}
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:oclvm> "-DARGS=${joined_args}"
                   -DEXPECT_EXIT=${exit_status} "-DEXPECT_STDOUT=${joined_stdout}"
                   "-DEXPECT_STDERR=${joined_stderr}" -P ${OCLVM_CLI_TESTS_SCRIPT})
  # A hang (a VM deadlock) fails the test instead of blocking the whole run.
  set_tests_properties(oclvm_script.${name} PROPERTIES TIMEOUT 120)
  if(T_ENV)
    set_tests_properties(oclvm_script.${name} PROPERTIES ENVIRONMENT "${T_ENV}")
  endif()
endfunction()

# A regular expression that matches `text` literally, except that ';', '[' and ']' become '.'
# (which matches them too): the checker's patterns travel as CMake lists, which a ';' would split
# and an unbalanced bracket would glue together.
function(oclvm_literal_regex out text)
  string(REGEX REPLACE "[][;]" "OCLVMANYCHAR" text "${text}")
  string(REGEX REPLACE "([.*+?^$(){}|\\\\])" "\\\\\\1" text "${text}")
  string(REPLACE "OCLVMANYCHAR" "." text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# The regular expressions (oclvm_literal_regex) for the text after `marker` on each line of
# `file` that starts with it.
function(oclvm_marked_lines out file marker)
  file(READ ${file} content)
  # Neutralized first: list elements with ';' or unbalanced brackets do not survive MATCHALL.
  string(REGEX REPLACE "[][;]" "OCLVMANYCHAR" content "${content}")
  string(REGEX MATCHALL "(^|\n)${marker}[^\n]*" matches "${content}")
  set(patterns "")
  foreach(match IN LISTS matches)
    string(REGEX REPLACE "^\n?${marker}" "" text "${match}")
    oclvm_literal_regex(pattern "${text}")
    list(APPEND patterns "${pattern}")
  endforeach()
  set(${out} "${patterns}" PARENT_SCOPE)
endfunction()

# --- Scripts that must hold.
file(GLOB OCLVM_GOOD_SCRIPTS CONFIGURE_DEPENDS ${OCLVM_SCRIPTS_DIR}/*.oclvm)
foreach(script IN LISTS OCLVM_GOOD_SCRIPTS)
  get_filename_component(name ${script} NAME_WE)
  file(STRINGS ${script} requires REGEX "^require devices ")
  set(held "/${name}\\.oclvm: [0-9]+ expectations?, (all )?held\n$")
  if(requires)
    oclvm_script_test(${name} 0 ARGS run ${script} ENV POCL_DEVICES=basic
      STDOUT "/${name}\\.oclvm: skipped \\(requires 2 OpenCL devices, 1 present\\)\n$")
    oclvm_script_test(${name}.two_devices 0 ARGS run ${script} ENV "POCL_DEVICES=basic basic"
      STDOUT "${held}")
  else()
    oclvm_script_test(${name} 0 ARGS run ${script} ENV POCL_DEVICES=basic STDOUT "${held}")
  endif()
  oclvm_script_test(${name}.pthread 0 ARGS run ${script} ENV "POCL_DEVICES=pthread pthread"
    STDOUT "${held}")
endforeach()

# --- Malformed scripts: refused with the exact message, nothing run.
file(GLOB OCLVM_MALFORMED_SCRIPTS CONFIGURE_DEPENDS ${OCLVM_SCRIPTS_DIR}/malformed/*.oclvm)
foreach(script IN LISTS OCLVM_MALFORMED_SCRIPTS)
  get_filename_component(name ${script} NAME_WE)
  oclvm_marked_lines(expected ${script} "# expect-parse-error: ")
  list(LENGTH expected count)
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "${script}: expected one '# expect-parse-error: ' line, but got ${count}")
  endif()
  oclvm_script_test(malformed.${name} 2 ARGS run ${script} ENV POCL_DEVICES=basic
    STDOUT "^$"
    STDERR "^[^\n]*/malformed/${name}\\.oclvm:${expected}\n"
           "\noclvm: nothing was run: the script is malformed\n$")
endforeach()

# --- Scripts whose expectations must fail, with the report that says how.
file(GLOB OCLVM_FAILING_SCRIPTS CONFIGURE_DEPENDS ${OCLVM_SCRIPTS_DIR}/failing/*.oclvm)
foreach(script IN LISTS OCLVM_FAILING_SCRIPTS)
  get_filename_component(name ${script} NAME_WE)
  oclvm_marked_lines(expected ${script} "# expect-output: ")
  if(NOT expected)
    message(FATAL_ERROR "${script}: expected at least one '# expect-output: ' line, but got none")
  endif()
  oclvm_script_test(failing.${name} 1 ARGS run ${script} ENV POCL_DEVICES=basic STDOUT ${expected})
endforeach()

# --- The command line.
oclvm_script_test(cli.trace 0
  ARGS run ${OCLVM_SCRIPTS_DIR}/write_and_read.oclvm --trace
  ENV POCL_DEVICES=basic
  STDOUT "^  trace: [^\n]*/write_and_read\\.oclvm:5: AllocateBlob on opencl:0/compute [^\n]*\\[b write\\] [0-9.]+ us\n"
         "\n  trace: [^\n]*/write_and_read\\.oclvm:6: CopyBlob on opencl:0/compute [^\n]* us\n"
         "\n  trace: [^\n]*/write_and_read\\.oclvm:8: CopyBlob [^\n]*\\[b read\\]"
         "\n  trace: [^\n]*/write_and_read\\.oclvm:22: QueryStats on opencl:0/compute"
         "/write_and_read\\.oclvm: 6 expectations, all held\n$")
oclvm_script_test(cli.several_files 0
  ARGS run ${OCLVM_SCRIPTS_DIR}/alloc_release.oclvm ${OCLVM_SCRIPTS_DIR}/two_devices.oclvm
       ${OCLVM_SCRIPTS_DIR}/fill_patterns.oclvm
  ENV POCL_DEVICES=basic
  STDOUT "^[^\n]*/alloc_release\\.oclvm: 18 expectations, all held\n[^\n]*/two_devices\\.oclvm: skipped [^\n]*\n[^\n]*/fill_patterns\\.oclvm: 9 expectations, all held\n$")
oclvm_script_test(cli.one_failing_file_fails_all 1
  ARGS run ${OCLVM_SCRIPTS_DIR}/alloc_release.oclvm ${OCLVM_SCRIPTS_DIR}/failing/leak.oclvm
  ENV POCL_DEVICES=basic
  STDOUT "/alloc_release\\.oclvm: 18 expectations, all held\n" "/leak\\.oclvm: 1 expectation, 1 failure\n$")
oclvm_script_test(cli.one_malformed_file_runs_nothing 2
  ARGS run ${OCLVM_SCRIPTS_DIR}/alloc_release.oclvm ${OCLVM_SCRIPTS_DIR}/malformed/size_zero.oclvm
       ${OCLVM_SCRIPTS_DIR}/malformed/no_run_at_end.oclvm
  ENV POCL_DEVICES=basic
  STDOUT "^$"
  STDERR "^[^\n]*/size_zero\\.oclvm:3:20: error: [^\n]*\n[^\n]*/no_run_at_end\\.oclvm:5:1: error: "
         "\noclvm: nothing was run: at least one script is malformed\n$")
oclvm_script_test(cli.missing_file 2
  ARGS run ${OCLVM_SCRIPTS_DIR}/no_such_script.oclvm
  STDOUT "^$"
  STDERR "no_such_script\\.oclvm: error: Expected a readable script file, but opening it failed \\(No such file or directory\\)\n")
oclvm_script_test(cli.no_file 2
  ARGS run --trace
  STDERR "oclvm: error: Expected at least one script FILE after 'run', but got none" "usage: oclvm")
oclvm_script_test(cli.unknown_flag 2
  ARGS run ${OCLVM_SCRIPTS_DIR}/alloc_release.oclvm --fast
  STDERR "Expected a script FILE or --trace after 'run', but got '--fast'" "usage: oclvm")
