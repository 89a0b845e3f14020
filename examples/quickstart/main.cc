// The quickstart of design/embedding.md (scripts/check_package.sh keeps the two identical).
#include <bit>
#include <cstdio>
#include <vector>

#include "oclvm/oclvm.h"

int main() try {
  oclvm::Runtime runtime(oclvm::Options::from_environment());  // OCLVM_ALLOCATOR, ... apply
  const oclvm::Device device = oclvm::parse_device("opencl:0");
  std::printf("oclvm %s on %s\n", oclvm::library_version(),
              runtime.properties(device).name.c_str());

  // 1024 floats on the device. The storage's last owner releases them (a ReleaseTensor).
  std::shared_ptr<oclvm::TensorStorage> storage =
      runtime.create_storage(device, {1024}, oclvm::DType::kF32);

  std::vector<float> host(1024);
  oclvm::InstructionsBuilder list = runtime.builder();
  list.fill(storage->blob(), 0, 4096, std::bit_cast<uint32_t>(2.5f), /*pattern_size=*/4);
  list.copy_device_to_host(storage->blob(), 0, host.data(), 4096);
  runtime.run(list.take());  // returns when both have completed; throws the first error

  std::printf("host[1023] = %.1f, allocated %lld bytes\n", host[1023],
              static_cast<long long>(runtime.stats(device).allocated_bytes.aggregate().current));
  storage.reset();
  std::printf("after release: %lld bytes\n",
              static_cast<long long>(runtime.stats(device).allocated_bytes.aggregate().current));
  return host[1023] == 2.5f ? 0 : 1;
} catch (const oclvm::Error& e) {  // InvalidArgument, OutOfMemoryError, BackendError
  std::fprintf(stderr, "quickstart: %s\n", e.what());
  return 1;
}
