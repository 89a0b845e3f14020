// bench/stress.cc — `stress`: P producer threads x D devices x N random instructions (N per
// producer) through one VirtualMachine, with every byte that comes back checked, optionally under injected faults.
//
//   stress [--threads P] [--devices D] [--instructions N] [--seed S] [--faults RULES] [--quiet]
//
// Each producer owns up to 16 live blobs (64 B .. 512 KiB, on random devices) and a host shadow of
// each blob's bytes. It builds lists of up to 8 random instructions — allocate (+ fill, so the
// contents are known), fill of a range, upload, device copy within and across devices, download
// (checked against the shadow after the sync point), kernels (a LaunchKernel that xors a byte
// range with a value, and one that adds one blob's bytes into another's on the same device),
// soft sync between its two streams of a device, release, empty_cache, QueryStats — on the
// device's compute stream or the producer's user stream, and runs them with vm::Run. Under --faults (OCLVM_FAULTS syntax, storage/faults.h) a list
// may fail: the error must be OutOfMemoryError or BackendError naming the device, and every blob
// the list touched has unknown contents until a whole-blob fill makes them known again.
//
// At the end: every blob released; on every device allocated 0 and, after empty_cache, reserved 0;
// the tracking allocator (which wraps the caching allocator here) has no live record; and every
// backend holds exactly the segments it held at the start. Exit 0 when all of that holds, 1
// otherwise (the first failure is printed), 2 for bad arguments. The seed is printed first, so a
// failing run replays with --seed.
//
// Thread-safety: each producer touches only its own blobs and shadows; the VM is shared.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/storage/allocator_registry.h"
#include "oclvm/storage/caching_allocator.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/tracking_allocator.h"
#include "oclvm/vm/virtual_machine.h"

namespace {

using namespace oclvm;

constexpr size_t kMaxBlobs = 16;
constexpr size_t kMaxList = 8;

struct Config {
  int threads = 4;
  int devices = 1;
  uint64_t instructions = 100000;  // per producer
  uint64_t seed = 0;
  FaultOptions faults;
  bool quiet = false;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "stress: %s\nusage: stress [--threads P] [--devices D] [--instructions N] "
               "[--seed S] [--faults RULES] [--quiet]\n",
               problem.c_str());
  std::exit(2);
}

uint64_t number(const char* text, const char* flag) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    usage(std::string("Expected a non-negative integer after ") + flag + ", but got \"" + text +
          "\"");
  }
  return value;
}

Config parse(int argc, char** argv) {
  Config config;
  config.seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quiet") {
      config.quiet = true;
      continue;
    }
    if (i + 1 >= argc) usage("Expected a value after " + flag);
    const char* value = argv[++i];
    if (flag == "--threads") {
      config.threads = static_cast<int>(std::min<uint64_t>(number(value, "--threads"), 256));
    } else if (flag == "--devices") {
      config.devices = static_cast<int>(std::min<uint64_t>(number(value, "--devices"), 256));
    } else if (flag == "--instructions") {
      config.instructions = number(value, "--instructions");
    } else if (flag == "--seed") {
      config.seed = number(value, "--seed");
    } else if (flag == "--faults") {
      try {
        config.faults = FaultOptions::parse(value, "--faults");
      } catch (const InvalidArgument& e) {
        usage(e.what());
      }
    } else {
      usage("Expected one of --threads, --devices, --instructions, --seed, --faults, --quiet, "
            "but got \"" + flag + "\"");
    }
  }
  if (config.threads < 1) usage("Expected --threads of at least 1");
  if (config.devices < 1) usage("Expected --devices of at least 1");
  return config;
}

// What every producer adds up; printed at the end.
struct Totals {
  std::atomic<uint64_t> instructions{0};
  std::atomic<uint64_t> lists{0};
  std::atomic<uint64_t> failed_lists{0};
  std::atomic<uint64_t> out_of_memory{0};
  std::atomic<uint64_t> backend_errors{0};
  std::atomic<uint64_t> checked_bytes{0};
  std::atomic<uint64_t> downloads{0};
};

// The first failure any thread saw; the run stops at it.
class Failure {
 public:
  void set(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (message_.empty()) message_ = what;
    failed_.store(true);
  }
  bool failed() const { return failed_.load(); }
  std::string message() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return message_;
  }

 private:
  mutable std::mutex mutex_;
  std::string message_;
  std::atomic<bool> failed_{false};
};

struct Blob {
  std::shared_ptr<BlobObject> object;
  std::vector<uint8_t> shadow;  // the contents, when `known`
  bool known = false;
};

// One download of a list: checked after the sync point against the shadow as it was when built.
struct Download {
  std::unique_ptr<uint8_t[]> host;
  std::vector<uint8_t> expected;  // empty when the source's contents were unknown
  size_t bytes = 0;
  std::string what;
};

class Producer {
 public:
  Producer(int index, const Config& config, vm::VirtualMachine& vm, Totals& totals,
           Failure& failure)
      : index_(index), config_(config), vm_(vm), totals_(totals), failure_(failure),
        random_(config.seed + static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull) {}

  void run(uint64_t instructions) {
    try {
      uint64_t done = 0;
      while (done < instructions && !failure_.failed()) done += run_list();
      release_all();
    } catch (const std::exception& e) {
      failure_.set("producer " + std::to_string(index_) + ": " + e.what());
    }
  }

 private:
  Device device(size_t i) const { return Device{DeviceType::kOpenCL, static_cast<DeviceIndex>(i)}; }
  size_t random_below(size_t n) { return static_cast<size_t>(random_() % n); }
  vm::Stream& stream_on(Device d) {
    return random_below(2) == 0 ? vm_.stream(d) : vm_.stream(d, vm::StreamRole::kUser, index_);
  }
  size_t random_size() {
    const int shift = 6 + static_cast<int>(random_below(13));  // 64 B .. 512 KiB, log-uniform
    return (size_t{1} << shift) + random_below(size_t{1} << shift);
  }

  // The kernel `name` of kKernels for device d, compiled on first use; nullptr when an injected
  // build fault refused it (the next use tries again).
  std::shared_ptr<const Kernel> kernel(InstructionsBuilder& builder, Device d, const char* name) {
    static const char* const kKernels =
        "__kernel void xor_bytes(OCLVM_BLOB(uchar, v), uchar value, ulong n) {\n"
        "  if (get_global_id(0) < n) OCLVM_PTR(uchar, v)[get_global_id(0)] ^= value; }\n"
        "__kernel void add_bytes(OCLVM_BLOB(uchar, dst), OCLVM_BLOB(const uchar, src), ulong n) {\n"
        "  size_t i = get_global_id(0);\n"
        "  if (i < n) OCLVM_PTR(uchar, dst)[i] += OCLVM_PTR(const uchar, src)[i]; }\n";
    try {
      return builder.kernel(d, KernelSource{kKernels, name, ""});
    } catch (const BackendError&) {
      if (!config_.faults.any() && !std::getenv("OCLVM_FAULTS")) throw;
      return nullptr;
    }
  }

  // Adds a LaunchKernel to the list and mirrors it on the shadows: xor of a byte range with a
  // value, or (when another blob of the same device exists) dst[i] += src[i] over a range.
  // False when no kernel was added.
  bool launch_kernel(InstructionsBuilder& builder, std::vector<size_t>& touched) {
    const size_t i = random_below(blobs_.size());
    Blob& b = blobs_[i];
    const Device d = b.object->device();
    const size_t offset = random_below(b.shadow.size());
    size_t bytes = random_below(b.shadow.size() - offset + 1);
    // One work-group size, so PoCL compiles each kernel once (it compiles per local size).
    constexpr size_t kLocal = 64;
    LaunchRange range;
    range.local[0] = kLocal;
    size_t source = blobs_.size();
    for (size_t k = 0; k < blobs_.size(); ++k) {
      if (k != i && blobs_[k].object->device() == d && random_below(2) == 0) source = k;
    }
    if (source == blobs_.size()) {
      std::shared_ptr<const Kernel> xor_bytes = kernel(builder, d, "xor_bytes");
      if (xor_bytes == nullptr) return false;
      const auto value = static_cast<uint8_t>(random_());
      range.global[0] = (bytes + kLocal - 1) / kLocal * kLocal;
      builder.launch(stream_on(d), xor_bytes, range,
                     {LaunchArg::of_blob(b.object, offset, KernelAccess::kReadWrite),
                      LaunchArg::of(value), LaunchArg::of(uint64_t{bytes})});
      for (size_t k = offset; k < offset + bytes; ++k) b.shadow[k] ^= value;
    } else {
      std::shared_ptr<const Kernel> add_bytes = kernel(builder, d, "add_bytes");
      if (add_bytes == nullptr) return false;
      Blob& src = blobs_[source];
      bytes = std::min(bytes, src.shadow.size());
      const size_t src_offset = random_below(src.shadow.size() - bytes + 1);
      range.global[0] = (bytes + kLocal - 1) / kLocal * kLocal;
      builder.launch(stream_on(d), add_bytes, range,
                     {LaunchArg::of_blob(b.object, offset, KernelAccess::kReadWrite),
                      LaunchArg::of_blob(src.object, src_offset, KernelAccess::kRead),
                      LaunchArg::of(uint64_t{bytes})});
      for (size_t k = 0; k < bytes; ++k) {
        b.shadow[offset + k] = static_cast<uint8_t>(b.shadow[offset + k] + src.shadow[src_offset + k]);
      }
      if (!src.known) b.known = false;
    }
    touched.push_back(i);
    return true;
  }

  // Builds and runs one list; returns its length.
  size_t run_list() {
    InstructionsBuilder builder(vm_);
    std::vector<Download> downloads;
    std::vector<std::vector<uint8_t>> uploads;  // alive until the sync point
    std::vector<size_t> touched;                // indices into blobs_ of blobs this list wrote
    std::vector<std::shared_ptr<BlobObject>> pending;  // allocated in this list
    const size_t length = 1 + random_below(kMaxList);
    size_t built = 0;
    while (built < length) {
      const size_t choice = random_below(100);
      if (blobs_.empty() || (choice < 15 && blobs_.size() < kMaxBlobs)) {
        Blob blob;
        const Device d = device(random_below(static_cast<size_t>(config_.devices)));
        const size_t bytes = random_size();
        blob.object = builder.allocate_blob(vm_.stream(d), bytes);
        const auto value = static_cast<uint8_t>(random_());
        builder.fill(blob.object, 0, bytes, value);
        blob.shadow.assign(bytes, value);
        blob.known = true;
        pending.push_back(blob.object);
        blobs_.push_back(std::move(blob));
        touched.push_back(blobs_.size() - 1);
        built += 2;
      } else if (choice < 30) {  // fill a range
        const size_t i = random_below(blobs_.size());
        Blob& b = blobs_[i];
        const size_t offset = random_below(b.shadow.size());
        const size_t bytes = random_below(b.shadow.size() - offset + 1);
        const auto value = static_cast<uint8_t>(random_());
        builder.fill(b.object, offset, bytes, value, 1, &stream_on(b.object->device()));
        std::fill_n(b.shadow.begin() + static_cast<ptrdiff_t>(offset), bytes, value);
        if (offset == 0 && bytes == b.shadow.size()) b.known = true;
        touched.push_back(i);
        ++built;
      } else if (choice < 45) {  // upload
        const size_t i = random_below(blobs_.size());
        Blob& b = blobs_[i];
        const size_t offset = random_below(b.shadow.size());
        const size_t bytes = random_below(b.shadow.size() - offset + 1);
        std::vector<uint8_t> data(bytes);
        for (uint8_t& byte : data) byte = static_cast<uint8_t>(random_());
        builder.copy_host_to_device(data.data(), b.object, offset, bytes,
                                    &stream_on(b.object->device()));
        std::copy(data.begin(), data.end(), b.shadow.begin() + static_cast<ptrdiff_t>(offset));
        uploads.push_back(std::move(data));
        touched.push_back(i);
        ++built;
      } else if (choice < 62 && blobs_.size() >= 2) {  // device copy, same or across devices
        const size_t from = random_below(blobs_.size());
        size_t to = random_below(blobs_.size() - 1);
        if (to >= from) ++to;
        Blob& src = blobs_[from];
        Blob& dst = blobs_[to];
        const size_t bytes = random_below(std::min(src.shadow.size(), dst.shadow.size()) + 1);
        const size_t src_offset = random_below(src.shadow.size() - bytes + 1);
        const size_t dst_offset = random_below(dst.shadow.size() - bytes + 1);
        vm::Stream* stream = src.object->device() == dst.object->device()
                                 ? &stream_on(dst.object->device())
                                 : nullptr;
        builder.copy(src.object, src_offset, dst.object, dst_offset, bytes, stream);
        std::copy_n(src.shadow.begin() + static_cast<ptrdiff_t>(src_offset), bytes,
                    dst.shadow.begin() + static_cast<ptrdiff_t>(dst_offset));
        if (!src.known) dst.known = false;
        touched.push_back(to);
        ++built;
      } else if (choice < 66 && launch_kernel(builder, touched)) {  // a kernel
        ++built;
      } else if (choice < 80) {  // download, checked after the sync point
        const size_t i = random_below(blobs_.size());
        Blob& b = blobs_[i];
        const size_t offset = random_below(b.shadow.size());
        const size_t bytes = random_below(b.shadow.size() - offset + 1);
        Download download;
        download.host = std::make_unique<uint8_t[]>(bytes + 1);
        download.bytes = bytes;
        if (b.known) {
          download.expected.assign(b.shadow.begin() + static_cast<ptrdiff_t>(offset),
                                   b.shadow.begin() + static_cast<ptrdiff_t>(offset + bytes));
        }
        download.what = std::to_string(bytes) + " bytes at " + std::to_string(offset) + " of a " +
                        std::to_string(b.shadow.size()) + "-byte blob on " +
                        b.object->device().str();
        builder.copy_device_to_host(b.object, offset, download.host.get(), bytes,
                                    &stream_on(b.object->device()));
        downloads.push_back(std::move(download));
        ++built;
      } else if (choice < 85) {  // soft sync between this producer's two streams of a device
        const Device d = device(random_below(static_cast<size_t>(config_.devices)));
        vm::Stream& compute = vm_.stream(d);
        vm::Stream& user = vm_.stream(d, vm::StreamRole::kUser, index_);
        if (random_below(2) == 0) {
          builder.soft_sync(compute, user);
        } else {
          builder.soft_sync(user, compute);
        }
        ++built;
      } else if (choice < 95) {  // release
        const size_t i = random_below(blobs_.size());
        builder.release(blobs_[i].object);
        blobs_.erase(blobs_.begin() + static_cast<ptrdiff_t>(i));
        touched.erase(std::remove(touched.begin(), touched.end(), i), touched.end());
        for (size_t& t : touched) t -= t > i ? 1 : 0;
        ++built;
      } else if (choice < 97) {
        builder.empty_cache(device(random_below(static_cast<size_t>(config_.devices))));
        ++built;
      } else {
        query_stats_.emplace_back();
        builder.query_stats(device(random_below(static_cast<size_t>(config_.devices))),
                            &query_stats_.back());
        ++built;
      }
    }
    totals_.instructions.fetch_add(builder.size());
    totals_.lists.fetch_add(1);
    try {
      vm_.run(builder.take());
    } catch (const OutOfMemoryError& e) {
      note_failure(e, touched, /*out_of_memory=*/true);
      downloads.clear();
    } catch (const BackendError& e) {
      note_failure(e, touched, /*out_of_memory=*/false);
      downloads.clear();
    }
    for (const Download& d : downloads) {
      if (d.expected.empty()) continue;
      if (std::memcmp(d.host.get(), d.expected.data(), d.bytes) != 0) {
        throw std::runtime_error("a download of " + d.what + " did not read what was written");
      }
      totals_.checked_bytes.fetch_add(d.bytes);
      totals_.downloads.fetch_add(1);
    }
    for (const DeviceStats& s : query_stats_) check_stats(s);
    query_stats_.clear();
    // A blob whose AllocateBlob failed has no storage: nothing to release, drop it.
    blobs_.erase(std::remove_if(blobs_.begin(), blobs_.end(),
                                [](const Blob& b) { return b.object->storage() == nullptr; }),
                 blobs_.end());
    return built;
  }

  void note_failure(const Error& e, const std::vector<size_t>& touched, bool out_of_memory) {
    if (!config_.faults.any() && !std::getenv("OCLVM_FAULTS")) {
      throw std::runtime_error(std::string("a list failed without injected faults: ") + e.what());
    }
    if (std::strstr(e.what(), "opencl:") == nullptr) {
      throw std::runtime_error(std::string("an error that names no device: ") + e.what());
    }
    totals_.failed_lists.fetch_add(1);
    (out_of_memory ? totals_.out_of_memory : totals_.backend_errors).fetch_add(1);
    // Any instruction of the list may have failed: what it wrote is unknown until refilled.
    for (size_t i : touched) {
      if (i < blobs_.size()) blobs_[i].known = false;
    }
  }

  static void check_stats(const DeviceStats& s) {
    if (s.allocated_bytes.aggregate().current < 0 || s.reserved_bytes.aggregate().current < 0 ||
        s.allocated_bytes.aggregate().current > s.reserved_bytes.aggregate().current) {
      throw std::runtime_error("inconsistent statistics: " + s.to_string());
    }
  }

  void release_all() {
    InstructionsBuilder builder(vm_);
    for (Blob& b : blobs_) builder.release(b.object);
    blobs_.clear();
    try {
      vm_.run(builder.take());
    } catch (const BackendError&) {
      // An injected finish failure: the blocks are given back all the same (ReleaseTensor).
    }
  }

  const int index_;
  const Config& config_;
  vm::VirtualMachine& vm_;
  Totals& totals_;
  Failure& failure_;
  std::mt19937_64 random_;
  std::vector<Blob> blobs_;
  std::deque<DeviceStats> query_stats_;  // deque: the builder holds pointers into it
};

}  // namespace

int main(int argc, char** argv) {
  const Config config = parse(argc, argv);
  std::printf("stress: seed %llu, %d threads x %d devices x %llu instructions each%s%s\n",
              static_cast<unsigned long long>(config.seed), config.threads, config.devices,
              static_cast<unsigned long long>(config.instructions),
              config.faults.any() ? ", faults " : "", config.faults.str().c_str());
  std::fflush(stdout);
  try {
    DeviceManager& devices = DeviceManager::instance();
    if (static_cast<size_t>(config.devices) > devices.opencl_device_count()) {
      usage("Expected --devices of at most " + std::to_string(devices.opencl_device_count()) +
            " (the OpenCL devices found; POCL_DEVICES=\"pthread pthread\" gives two), but got " +
            std::to_string(config.devices));
    }
    // The tracking allocator wraps the caching allocator, so its records can be checked at the
    // end against the device layer's live segments.
    std::mutex tracked_mutex;
    std::vector<TrackingAllocator*> tracked;
    AllocatorRegistry::instance().add(
        "stress-tracking", 0, [&](MemoryBackend& backend, const Options&) {
          auto allocator = std::make_unique<TrackingAllocator>(
              std::make_unique<CachingAllocator>(backend, CachingAllocatorOptions{}));
          std::lock_guard<std::mutex> lock(tracked_mutex);
          tracked.push_back(allocator.get());
          return allocator;
        });
    std::vector<size_t> segments_before;
    for (Device d : devices.devices()) segments_before.push_back(devices.backend(d).live_segments());
    if (config.faults.any()) {
      for (Device d : devices.devices()) devices.backend(d).faults().configure(config.faults);
    }
    Options options = devices.options();
    options.allocator = "stress-tracking";
    Totals totals;
    Failure failure;
    uint64_t injected = 0;
    const auto start = std::chrono::steady_clock::now();
    {
      vm::VirtualMachine vm(devices, options);
      std::vector<std::thread> producers;
      const uint64_t per_thread = config.instructions;
      const uint64_t total = per_thread * static_cast<uint64_t>(config.threads);
      for (int t = 0; t < config.threads; ++t) {
        producers.emplace_back([&, t] {
          Producer producer(t, config, vm, totals, failure);
          producer.run(per_thread);
        });
      }
      // Progress for long runs: a line about every 10 % (stderr, so --quiet output stays short).
      uint64_t next_report = total / 10;
      while (true) {
        bool all_done = totals.instructions.load() >= total || failure.failed();
        if (!config.quiet && total >= 200000 &&
            totals.instructions.load() >= next_report && !all_done) {
          const double seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          std::fprintf(stderr, "  %llu instructions, %.0f /s\n",
                       static_cast<unsigned long long>(totals.instructions.load()),
                       static_cast<double>(totals.instructions.load()) / seconds);
          next_report += total / 10;
        }
        if (all_done) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      for (std::thread& t : producers) t.join();
      for (Device d : devices.devices()) {
        injected += devices.backend(d).faults().injected_total();
        devices.backend(d).faults().configure(FaultOptions{});
      }

      // Everything is released: check the allocators, then give the caches back.
      InstructionsBuilder builder(vm);
      std::vector<DeviceStats> before_flush(devices.devices().size());
      std::vector<DeviceStats> after_flush(devices.devices().size());
      const std::vector<Device> all = devices.devices();
      for (size_t i = 0; i < all.size(); ++i) {
        builder.query_stats(all[i], &before_flush[i]);
        builder.empty_cache(all[i]);
        builder.query_stats(all[i], &after_flush[i]);
      }
      vm.run(builder.take());
      for (size_t i = 0; i < all.size() && !failure.failed(); ++i) {
        if (before_flush[i].allocated_bytes.aggregate().current != 0 ||
            before_flush[i].allocation.aggregate().current != 0) {
          failure.set(all[i].str() + " still has allocations at the end: " +
                      before_flush[i].to_string());
        } else if (after_flush[i].reserved_bytes.aggregate().current != 0) {
          failure.set(all[i].str() + " still reserves memory after empty_cache: " +
                      after_flush[i].to_string());
        }
      }
      for (TrackingAllocator* allocator : tracked) {
        if (!allocator->live_records().empty() && !failure.failed()) {
          failure.set(allocator->device().str() + ": the tracking allocator still has " +
                      std::to_string(allocator->live_records().size()) + " live records");
        }
      }
      vm.shutdown();
    }
    for (size_t i = 0; i < segments_before.size() && !failure.failed(); ++i) {
      const Device d = devices.devices()[i];
      if (devices.backend(d).live_segments() != segments_before[i]) {
        failure.set(d.str() + " holds " + std::to_string(devices.backend(d).live_segments()) +
                    " segments at the end, " + std::to_string(segments_before[i]) +
                    " at the start");
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "stress: %llu instructions in %llu lists, %.2f s, %.0f instructions/s; %llu downloads "
        "checked (%llu bytes); %llu faults injected, %llu lists failed (%llu out of memory, %llu "
        "backend errors)\n",
        static_cast<unsigned long long>(totals.instructions.load()),
        static_cast<unsigned long long>(totals.lists.load()), seconds,
        static_cast<double>(totals.instructions.load()) / seconds,
        static_cast<unsigned long long>(totals.downloads.load()),
        static_cast<unsigned long long>(totals.checked_bytes.load()),
        static_cast<unsigned long long>(injected),
        static_cast<unsigned long long>(totals.failed_lists.load()),
        static_cast<unsigned long long>(totals.out_of_memory.load()),
        static_cast<unsigned long long>(totals.backend_errors.load()));
    if (failure.failed()) {
      std::printf("stress: FAILED (seed %llu): %s\n", static_cast<unsigned long long>(config.seed),
                  failure.message().c_str());
      return 1;
    }
    std::printf("stress: ok: every device back to 0 allocated and 0 reserved, no live record, "
                "segments as at the start\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("stress: FAILED (seed %llu): %s\n", static_cast<unsigned long long>(config.seed),
                e.what());
    return 1;
  }
}
