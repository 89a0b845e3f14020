// fuzz/replay_main.cc — runs a fuzz target over stored inputs without libFuzzer (ctest replay).
//
//   oclvm_fuzz_replay_script PATH...      (likewise oclvm_fuzz_replay_trace)
//
// Linked with one fuzz target (fuzz/script_fuzzer.cc or fuzz/trace_fuzzer.cc), built by the normal
// compiler: it calls that target's LLVMFuzzerTestOneInput once per input, exactly as the fuzzer
// does. A PATH is a file, or a directory whose regular files all run (sorted by name, not
// recursive). The top-level CMakeLists.txt registers oclvm_fuzz_regressions.{script,trace} with
// fuzz/regressions/<parser> and fuzz/corpus/<parser>, so `make test` replays every input that once
// crashed a parser.
//
// Exit status: 0 when every input returned; 2 for a missing path, an unreadable file or an empty
// directory (so a wrong path cannot pass unnoticed). A finding aborts inside the target; the last
// "replay: FILE" line on stdout names the input.
//
// Memory: libFuzzer stops an input that takes more than 2048 MB (-rss_limit_mb, fuzz/run.sh). The
// replay bounds its address space to the same 2 GiB, so that an input which once made a parser
// allocate without bound fails here too, as a std::bad_alloc the target reports as an unexpected
// exception, rather than passing on a machine with memory to spare. Not in sanitizer builds
// (`make asan`, `make tsan`): their runtimes reserve terabytes of address space up front.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include <sys/resource.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "replay: error: %s\n", message.c_str());
  std::exit(2);
}

// The files a PATH stands for.
std::vector<fs::path> inputs_of(const fs::path& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path};
  if (!fs::is_directory(path, ec)) {
    usage_error("Expected a file or a directory, but '" + path.string() + "' is neither");
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  if (files.empty()) {
    usage_error("Expected inputs in directory '" + path.string() + "', but it holds no files");
  }
  std::sort(files.begin(), files.end());
  return files;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

constexpr rlim_t kAddressSpaceLimit = rlim_t{2} << 30;  // libFuzzer's default -rss_limit_mb

void limit_address_space() {
  if (kSanitized) return;
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0) usage_error("Expected getrlimit(RLIMIT_AS) to succeed");
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur <= kAddressSpaceLimit) return;
  limit.rlim_cur = kAddressSpaceLimit;
  if (setrlimit(RLIMIT_AS, &limit) != 0) usage_error("Expected setrlimit(RLIMIT_AS) to succeed");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage_error("Expected at least one input file or directory, but got none");
  limit_address_space();
  size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    for (const fs::path& file : inputs_of(argv[i])) {
      std::ifstream in(file, std::ios::binary);
      if (!in) usage_error("Expected a readable file, but opening '" + file.string() + "' failed");
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
      std::printf("replay: %s (%zu bytes)\n", file.c_str(), bytes.size());
      std::fflush(stdout);
      // libFuzzer never passes a null pointer, even for an empty input.
      static const uint8_t kEmpty = 0;
      LLVMFuzzerTestOneInput(bytes.empty() ? &kEmpty : bytes.data(), bytes.size());
      ++count;
    }
  }
  std::printf("replay: %zu inputs, no finding\n", count);
  return 0;
}
