# tests/cli/cli_tests.cmake — command-line tests of the `oclvm` program.
#
# This file has two roles:
#   - included from CMakeLists.txt (inside the tests block), it registers one ctest entry per case
#     below, named oclvm_cli.<case>;
#   - run as a script (`cmake -DPROGRAM=... -DARGS=a|b -DEXPECT_EXIT=N -DEXPECT_STDOUT=re1@@re2
#     -DEXPECT_STDERR=re -P cli_tests.cmake`), which is what every entry does, it runs one command
#     and checks its exact exit status and that stdout / stderr match every given regular
#     expression ('@@' separates several). ctest's own PASS_REGULAR_EXPRESSION ignores the exit
#     status, hence the script.
#
# The recorded traces are the repository's own (traces/, recorded from the project's example
# models by scripts/record_traces.py), so every case below runs from a fresh clone.

if(CMAKE_SCRIPT_MODE_FILE)
  cmake_minimum_required(VERSION 3.22)
  string(REPLACE "|" ";" command_args "${ARGS}")
  execute_process(COMMAND "${PROGRAM}" ${command_args}
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(problems "")
  if(NOT "${status}" STREQUAL "${EXPECT_EXIT}")
    string(APPEND problems "expected exit status ${EXPECT_EXIT}, but got '${status}'\n")
  endif()
  foreach(stream out err)
    if(stream STREQUAL "out")
      set(patterns "${EXPECT_STDOUT}")
    else()
      set(patterns "${EXPECT_STDERR}")
    endif()
    if(patterns STREQUAL "")
      continue()
    endif()
    string(REPLACE "@@" ";" patterns "${patterns}")
    foreach(pattern IN LISTS patterns)
      if(NOT "${${stream}}" MATCHES "${pattern}")
        string(APPEND problems "expected std${stream} to match '${pattern}', but it does not\n")
      endif()
    endforeach()
  endforeach()
  string(REPLACE ";" " " shown "${command_args}")
  if(problems)
    message(FATAL_ERROR "${PROGRAM} ${shown}\n${problems}--- stdout:\n${out}--- stderr:\n${err}")
  endif()
  message(STATUS "ok (exit ${status}): ${PROGRAM} ${shown}\n--- stdout:\n${out}--- stderr:\n${err}")
  return()
endif()

set(OCLVM_CLI_TESTS_SCRIPT ${CMAKE_CURRENT_LIST_FILE})
set(OCLVM_CLI_DATA ${PROJECT_SOURCE_DIR}/tests/cli/data)
set(OCLVM_TRACES ${PROJECT_SOURCE_DIR}/traces)

# oclvm_cli_test(NAME EXIT_STATUS [ARGS a b ...] [STDOUT re ...] [STDERR re ...] [ENV VAR=value ...])
function(oclvm_cli_test name exit_status)
  cmake_parse_arguments(T "" "" "ARGS;STDOUT;STDERR;ENV" ${ARGN})
  list(JOIN T_ARGS "|" joined_args)
  list(JOIN T_STDOUT "@@" joined_stdout)
  list(JOIN T_STDERR "@@" joined_stderr)
  add_test(NAME oclvm_cli.${name}
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:oclvm> "-DARGS=${joined_args}"
                   -DEXPECT_EXIT=${exit_status} "-DEXPECT_STDOUT=${joined_stdout}"
                   "-DEXPECT_STDERR=${joined_stderr}" -P ${OCLVM_CLI_TESTS_SCRIPT})
  if(T_ENV)
    set_tests_properties(oclvm_cli.${name} PROPERTIES ENVIRONMENT "${T_ENV}")
  endif()
endfunction()

# One JSON object on one line, with every key the report promises.
set(OCLVM_CLI_JSON_KEYS
    "^{\"trace\": .*}\n$"
    "\"events\": [0-9]+," "\"live_peak_bytes\": [0-9]+," "\"reserved_peak_bytes\": [0-9]+,"
    "\"ratio\": [0-9.]+," "\"backend_allocs\": [0-9]+," "\"ooms\": [0-9]+,"
    "\"events_per_s\": [0-9.]+}")

# --- The recorded traces, through every allocator (exact events and live peak; no OOM).
foreach(allocator caching buddy system)
  oclvm_cli_test(replay.transformer.${allocator} 0
    ARGS replay ${OCLVM_TRACES}/transformer_train.trace --allocator ${allocator} --json
    STDOUT ${OCLVM_CLI_JSON_KEYS} "\"allocator\": \"${allocator}\"" "\"events\": 3446,"
           "\"live_peak_bytes\": 585520136," "\"ooms\": 0,")
  oclvm_cli_test(replay.cnn.${allocator} 0
    ARGS replay ${OCLVM_TRACES}/cnn_train.trace --allocator=${allocator} --json
    STDOUT ${OCLVM_CLI_JSON_KEYS} "\"allocator\": \"${allocator}\"" "\"events\": 696,"
           "\"live_peak_bytes\": 73380256," "\"ooms\": 0,")
  oclvm_cli_test(replay.gpt2.${allocator} 0
    ARGS replay ${OCLVM_TRACES}/gpt2_adamw.trace --allocator ${allocator} --json
    STDOUT ${OCLVM_CLI_JSON_KEYS} "\"allocator\": \"${allocator}\"" "\"events\": 5534,"
           "\"live_peak_bytes\": 52532744," "\"ooms\": 0,")
  oclvm_cli_test(replay.mlp.${allocator} 0
    ARGS replay ${OCLVM_TRACES}/mlp_sgd.trace --allocator ${allocator} --json
    STDOUT ${OCLVM_CLI_JSON_KEYS} "\"allocator\": \"${allocator}\"" "\"events\": 620,"
           "\"live_peak_bytes\": 77880," "\"ooms\": 0,")
endforeach()
# The caching allocator under a limit of 1.15 x live peak (design/performance.md): both training
# traces replay with neither an out-of-memory error nor a retry, at the reserved peaks they reach
# without a limit.
oclvm_cli_test(replay.transformer_limit_1_15 0
  ARGS replay ${OCLVM_TRACES}/transformer_train.trace --allocator caching --limit 673348156 --json
  STDOUT "\"reserved_peak_bytes\": 599785472," "\"ooms\": 0," "\"alloc_retries\": 0,")
oclvm_cli_test(replay.cnn_limit_1_15 0
  ARGS replay ${OCLVM_TRACES}/cnn_train.trace --allocator caching --limit 84387294 --json
  STDOUT "\"reserved_peak_bytes\": 83886080," "\"ooms\": 0," "\"alloc_retries\": 0,")

# --- Our own fixtures.
oclvm_cli_test(replay.small_text 0
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --device opencl:0 --repeat 3
  STDOUT "\nevents: +30\n" "\nlive_peak_bytes: +4198400 .4.00 MiB.\n" "\nrepeat: +3\n"
         "\nooms: +0\n" "\nratio: +[0-9.]+ .reserved peak / live peak.\n")
oclvm_cli_test(replay.small_host_device 0
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --device cpu --allocator system --json
  STDOUT "\"device\": \"cpu\"" "\"backend_allocs\": 4," "\"live_peak_bytes\": 4198400,")
oclvm_cli_test(replay.leftover 0
  ARGS replay ${OCLVM_CLI_DATA}/leftover.trace --json
  STDOUT "\"events\": 4," "\"live_peak_bytes\": 66560,")
oclvm_cli_test(replay.oom_exits_3 3
  ARGS replay ${OCLVM_CLI_DATA}/oom.trace --limit 1M --json
  STDOUT ${OCLVM_CLI_JSON_KEYS} "\"ooms\": 2," "\"limit_bytes\": 1048576,"
  STDERR "2 allocation.s. ran out of memory")

oclvm_cli_test(replay.too_large_exits_1 1
  ARGS replay ${OCLVM_CLI_DATA}/too_large.trace
  STDERR "^oclvm: error: [^\n]*4611686018427387904")

# --- Configuration from the environment (Options::from_environment), overridden by flags.
oclvm_cli_test(replay.environment_limit_exits_3 3
  ARGS replay ${OCLVM_CLI_DATA}/oom.trace --json
  ENV OCLVM_MEMORY_LIMIT=1M OCLVM_ALLOCATOR=buddy
  STDOUT "\"allocator\": \"buddy\"" "\"limit_bytes\": 1048576," "\"ooms\": 2,")
oclvm_cli_test(replay.flags_override_environment 0
  ARGS replay ${OCLVM_CLI_DATA}/oom.trace --json --limit 0 --allocator system
  ENV OCLVM_MEMORY_LIMIT=1M OCLVM_ALLOCATOR=buddy
  STDOUT "\"allocator\": \"system\"" "\"limit_bytes\": 0," "\"ooms\": 0," "\"backend_allocs\": 2,")
oclvm_cli_test(usage.bad_environment 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace
  ENV OCLVM_MEMORY_LIMIT=12Q
  STDERR "OCLVM_MEMORY_LIMIT" "usage: oclvm")
# PyTorch's allocator settings reach the caching allocator: rounding to quarter steps between
# powers of two raises the allocated peak of the first 200 events of an earlier CNN trace (kept
# in the fuzz corpus) from 82058240 bytes (the default, replay.cnn_head_default) to 82320384; an
# unknown key is a usage error.
set(OCLVM_CNN_HEAD ${PROJECT_SOURCE_DIR}/fuzz/corpus/trace/cnn_train_head200.trace)
oclvm_cli_test(replay.cnn_head_default 0
  ARGS replay ${OCLVM_CNN_HEAD} --allocator caching
  STDOUT "\nallocated_peak_bytes: +82058240 ")
oclvm_cli_test(replay.alloc_conf_roundup 0
  ARGS replay ${OCLVM_CNN_HEAD} --allocator caching
  ENV PYTORCH_ALLOC_CONF=roundup_power2_divisions:4
  STDOUT "\nallocated_peak_bytes: +82320384 ")
# --plot draws the replay (the SVG itself is checked by parsing it in plot_test.cc);
# --compare replays under every allocator, one report each.
oclvm_cli_test(replay.plot_compare 0
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --plot ${CMAKE_BINARY_DIR}/replay_small_compare.svg --compare
  STDOUT "allocator: +caching\n" "\nallocator: +buddy\n" "\nallocator: +system\n")
oclvm_cli_test(usage.compare_without_plot 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --compare
  STDERR "^oclvm: error: Expected --plot OUT.svg with --compare, but got none\n")
oclvm_cli_test(usage.compare_with_allocator 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --plot x.svg --compare --allocator buddy
  STDERR "Expected either --compare .every allocator. or --allocator buddy, but got both")
# --snapshot writes PyTorch's snapshot pickle (its contents: replay_test.cc, and read back by
# Python in tests/torch/test_memory_snapshot.py).
oclvm_cli_test(replay.snapshot 0
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --snapshot ${CMAKE_BINARY_DIR}/replay_small.pickle
  STDOUT "allocator: +caching\n")
oclvm_cli_test(usage.snapshot_with_compare 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --plot x.svg --compare --snapshot x.pickle
  STDOUT "^$"
  STDERR "^oclvm: error: Expected --snapshot with one allocator, but got --compare .every allocator.\n")
oclvm_cli_test(replay.snapshot_unwritable_exits_1 1
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --snapshot ${CMAKE_BINARY_DIR}/no_such_dir/x.pickle
  STDOUT "^$"
  STDERR "^oclvm: error: Expected to write the snapshot to '[^']*/no_such_dir/x.pickle', but opening it failed .No such file or directory.\n$")
oclvm_cli_test(replay.plot_unwritable_exits_1 1
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --plot ${CMAKE_BINARY_DIR}/no_such_dir/x.svg
  STDOUT "^$"
  STDERR "^oclvm: error: Expected to write the plot to '[^']*/no_such_dir/x.svg', but opening it failed .No such file or directory.\n$")
# The shipped GPT-2 trace (traces/, torch.opencl.memory.record_trace) under a 64 MiB limit: the
# garbage-collection threshold gives cached segments back before growing, so the reserved peak
# drops from 56623104 to 54525952 bytes for more driver allocations (55 instead of 37).
oclvm_cli_test(replay.gpt2_trace_default 0
  ARGS replay ${OCLVM_TRACES}/gpt2_adamw.trace --allocator caching --limit 64M --json
  STDOUT "\"events\": 5534," "\"reserved_peak_bytes\": 56623104," "\"backend_allocs\": 37," "\"ooms\": 0,")
oclvm_cli_test(replay.alloc_conf_gc_threshold 0
  ARGS replay ${OCLVM_TRACES}/gpt2_adamw.trace --allocator caching --limit 64M --json
  ENV PYTORCH_ALLOC_CONF=garbage_collection_threshold:0.6
  STDOUT "\"reserved_peak_bytes\": 54525952," "\"backend_allocs\": 55," "\"ooms\": 0,")
oclvm_cli_test(usage.bad_alloc_conf 2
  ARGS replay ${OCLVM_CNN_HEAD}
  ENV PYTORCH_ALLOC_CONF=max_split_mb:64
  STDERR "Expected PYTORCH_ALLOC_CONF to be key:value pairs" "unknown key 'max_split_mb'" "usage: oclvm")

# --- Malformed traces and bad usage: exit 2 with an exact message.
oclvm_cli_test(replay.double_free_exits_2 2
  ARGS replay ${OCLVM_CLI_DATA}/double_free.trace
  STDERR "^[^\n]*/tests/cli/data/double_free.trace:6: error: expected the ID of a live allocation, but ID 1 was already freed at line 5\n$")
oclvm_cli_test(replay.bad_header_exits_2 2
  ARGS replay ${OCLVM_CLI_DATA}/bad_header.trace --json
  STDERR "bad_header.trace:1: error: expected the header '# oclvm-trace v1' as the first line, but got '# oclvm-trace v0'")
oclvm_cli_test(replay.missing_file_exits_2 2
  ARGS replay ${OCLVM_CLI_DATA}/no_such.trace
  STDERR "no_such.trace: error: expected a readable trace file, but opening it failed .No such file or directory.")
oclvm_cli_test(usage.unknown_command 2
  ARGS frobnicate
  STDERR "oclvm: error: Expected a command .run, replay, devices, version, help., but got 'frobnicate'" "usage: oclvm")
# The version comes from project(VERSION) in CMakeLists.txt, through the generated oclvm/version.h.
oclvm_cli_test(version.long_flag 0
  ARGS --version
  STDOUT "^oclvm ${PROJECT_VERSION}\n$")
oclvm_cli_test(version.command 0
  ARGS version
  STDOUT "^oclvm ${PROJECT_VERSION}\n$")
oclvm_cli_test(version.extra_argument_exits_2 2
  ARGS --version now
  STDERR "Expected no arguments after '--version', but got 'now'")
oclvm_cli_test(usage.unknown_flag 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --fast
  STDERR "but got '--fast'" "usage: oclvm")
oclvm_cli_test(usage.missing_value 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --limit
  STDERR "Expected a value after --limit, but got none" "usage: oclvm")
oclvm_cli_test(usage.missing_file 2
  ARGS replay --json
  STDERR "Expected a trace FILE after 'replay', but got none")
oclvm_cli_test(usage.bad_limit 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --limit 12Q
  STDERR "Expected --limit to be a byte count")
oclvm_cli_test(usage.bad_repeat 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --repeat 0
  STDERR "Expected --repeat to be a whole number of at least 1, but got '0'")
oclvm_cli_test(usage.malformed_device 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --device gpu:0
  STDERR "Expected a device of the form opencl, opencl:N or cpu, but got 'gpu:0'")
oclvm_cli_test(usage.missing_device 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --device opencl:9
  STDERR "opencl:9" "usage: oclvm")
oclvm_cli_test(usage.unknown_allocator 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --allocator nope
  STDERR "nope" "usage: oclvm")

# --- Other commands.
oclvm_cli_test(devices 0
  ARGS devices
  STDOUT "^platform: " "\nopencl:0\n" "\ncpu\n" "global memory: +[0-9]+ " "max allocation: +[0-9]+ "
         "base address alignment: +[0-9]+ bytes\n"
         "host-unified memory: +yes \\(torch operators use it without copies\\)\n"
         "  host addresses: +yes \\(torch operators use it in place, with no command\\)\n")
oclvm_cli_test(devices_two 0
  ARGS devices
  ENV "POCL_DEVICES=basic basic"
  STDOUT "\nopencl:0\n" "\nopencl:1\n" "\ncpu\n")
# With no device, the listing says what was found and what to change (issue 33's "no device,
# no reason").
oclvm_cli_test(devices_none 0
  ARGS devices
  ENV "POCL_DEVICES="
  STDOUT "^platform: \\(no OpenCL platform\\)\n"
         "no OpenCL device: no OpenCL platform has a device \\(platforms: 'Portable Computing Language' with 0 devices; environment: POCL_DEVICES=''\\); PoCL exposes the drivers POCL_DEVICES names")
oclvm_cli_test(devices_extra_argument 2
  ARGS devices --all
  STDERR "Expected no arguments after 'devices', but got '--all'")
oclvm_cli_test(help 0
  ARGS --help
  STDOUT "^usage: oclvm" "replay FILE" "devices")
oclvm_cli_test(no_arguments 0
  STDOUT "^usage: oclvm")

# --- Bad input (design/reliability.md, "Bad input"): the flags and environment variables not
# covered above. Each exits 2 with its "Expected X, but got Y" line and the usage text, and runs
# nothing (no report on stdout).
set(OCLVM_CLI_SCRIPT ${PROJECT_SOURCE_DIR}/tests/scripts/alloc_release.oclvm)
oclvm_cli_test(bad_input.second_trace_file 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace ${OCLVM_CLI_DATA}/oom.trace
  STDOUT "^$"
  STDERR "^oclvm: error: Expected one trace FILE, but got a second one: '[^\n]*/oom.trace'\n" "usage: oclvm")
oclvm_cli_test(bad_input.empty_allocator 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --allocator=
  STDOUT "^$"
  STDERR "^oclvm: error: Expected an allocator name after --allocator, but got ''\n" "usage: oclvm")
oclvm_cli_test(bad_input.json_with_a_value 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --json=1
  STDOUT "^$"
  STDERR "^oclvm: error: Expected one of --allocator, --device, --limit, --repeat, --json, --plot, --compare, --snapshot, but got '--json=1'\n")
oclvm_cli_test(bad_input.repeat_not_a_number 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --repeat abc
  STDOUT "^$"
  STDERR "^oclvm: error: Expected --repeat to be a whole number of at least 1, but got 'abc'\n")
oclvm_cli_test(bad_input.repeat_negative 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --repeat=-1
  STDOUT "^$"
  STDERR "^oclvm: error: Expected --repeat to be a whole number of at least 1, but got '-1'\n")
oclvm_cli_test(bad_input.repeat_overflow 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --repeat 18446744073709551616
  STDOUT "^$"
  STDERR "^oclvm: error: Expected --repeat to be a whole number of at least 1, but got '18446744073709551616'\n")
oclvm_cli_test(bad_input.limit_negative 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --limit=-1
  STDOUT "^$"
  STDERR "^oclvm: error: Expected --limit to be a byte count such as 1048576, 512K, 64M or 2G, but got '-1' .no digits.\n")
oclvm_cli_test(bad_input.limit_overflow 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace --limit 17179869184G
  STDOUT "^$"
  STDERR "^oclvm: error: Expected --limit to be a byte count such as 1048576, 512K, 64M or 2G, but got '17179869184G' .too large.\n")
foreach(device "cpu:1" "opencl:-1" "opencl:007" "opencl:" "")
  string(MAKE_C_IDENTIFIER "device_${device}" case)
  oclvm_cli_test(bad_input.${case} 2
    ARGS replay ${OCLVM_CLI_DATA}/small.trace --device=${device}
    STDOUT "^$"
    STDERR "^oclvm: error: Expected a device of the form opencl, opencl:N or cpu, but got '${device}'\n")
endforeach()
oclvm_cli_test(bad_input.trace_is_a_directory 2
  ARGS replay ${OCLVM_CLI_DATA}
  STDOUT "^$"
  STDERR "^[^\n]*/tests/cli/data: error: expected a trace file, but got a directory\n$")
oclvm_cli_test(bad_input.empty_trace 2
  ARGS replay /dev/null
  STDOUT "^$"
  STDERR "^/dev/null:1: error: expected the header '# oclvm-trace v1', but got an empty file\n$")
oclvm_cli_test(bad_input.run_unknown_short_flag 2
  ARGS run ${OCLVM_CLI_SCRIPT} -x
  STDOUT "^$"
  STDERR "^oclvm: error: Expected a script FILE or --trace after 'run', but got '-x'\n")

# Environment variables, for every command that reads them.
foreach(command devices run replay)
  if(command STREQUAL "run")
    set(command_args run ${OCLVM_CLI_SCRIPT})
  elseif(command STREQUAL "replay")
    set(command_args replay ${OCLVM_CLI_DATA}/small.trace)
  else()
    set(command_args devices)
  endif()
  oclvm_cli_test(bad_input.${command}.memory_limit 2
    ARGS ${command_args}
    ENV OCLVM_MEMORY_LIMIT=12Q
    STDOUT "^$"
    STDERR "^oclvm: error: Expected OCLVM_MEMORY_LIMIT to be a byte count such as 1048576, 512K, 64M or 2G, but got '12Q' .unknown suffix.\n" "usage: oclvm")
  oclvm_cli_test(bad_input.${command}.empty_memory_limit 2
    ARGS ${command_args}
    ENV OCLVM_MEMORY_LIMIT=
    STDOUT "^$"
    STDERR "^oclvm: error: Expected OCLVM_MEMORY_LIMIT to be a byte count [^\n]*, but got '' .no digits.\n")
  oclvm_cli_test(bad_input.${command}.platform 2
    ARGS ${command_args}
    ENV OCLVM_PLATFORM=no_such_platform
    STDOUT "^$"
    STDERR "^oclvm: error: Expected OCLVM_PLATFORM='no_such_platform' to match an OpenCL platform with devices, but the platforms are: '" "usage: oclvm")
  oclvm_cli_test(bad_input.${command}.faults 2
    ARGS ${command_args}
    ENV OCLVM_FAULTS=copy:often
    STDOUT "^$"
    STDERR "^oclvm: error: Expected nth=N, every=N or p=X after the fault point in OCLVM_FAULTS, but got \"copy:often\"" "usage: oclvm")
endforeach()
oclvm_cli_test(bad_input.replay.allocator 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace
  ENV OCLVM_ALLOCATOR=bfc
  STDOUT "^$"
  STDERR "^oclvm: error: Expected the allocator .Options::allocator, OCLVM_ALLOCATOR. to be one of caching, buddy, system, but got 'bfc'\n" "usage: oclvm")
# Scripts take their options from the script only (design/scripts.md): OCLVM_ALLOCATOR is not read.
oclvm_cli_test(bad_input.run.allocator_is_not_read 0
  ARGS run ${OCLVM_CLI_SCRIPT}
  ENV OCLVM_ALLOCATOR=bfc
  STDOUT "alloc_release.oclvm: 18 expectations, all held\n$")
# No OpenCL device at all (PoCL given no driver): only `cpu` exists.
oclvm_cli_test(bad_input.replay.no_opencl_device 2
  ARGS replay ${OCLVM_CLI_DATA}/small.trace
  ENV POCL_DEVICES=no_such_driver
  STDOUT "^$"
  STDERR "^oclvm: error: Expected one of the devices cpu, but got opencl:0\n" "usage: oclvm")
oclvm_cli_test(bad_input.script_is_a_directory 2
  ARGS run ${PROJECT_SOURCE_DIR}/tests/scripts
  STDOUT "^$"
  STDERR "/tests/scripts: error: Expected a script file, but got a directory\n")
