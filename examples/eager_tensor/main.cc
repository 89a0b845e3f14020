// examples/eager_tensor/main.cc — the eager tensor example at work on two devices.
//
// Creates tensors on the first OpenCL device and on a second device (opencl:1 when the platform
// has two, e.g. POCL_DEVICES="basic basic"; else the host device cpu), takes views, fills and
// copies them, computes on the device with kernels (a broadcast add and a sum, ops.h), prints them
// and the memory statistics of both devices, and shows the memory going back through the
// releaser hook when the last tensor of a storage dies.
//
//   eager_tensor_demo            configuration from the environment (OCLVM_ALLOCATOR, ...)
//
// Exit status 0 on success; 1 with "eager_tensor_demo: error: ..." on any error.
#include <cstdio>
#include <exception>
#include <iostream>
#include <vector>

#include "oclvm/oclvm.h"
#include "ops.h"
#include "tensor.h"

namespace {

using eager::Tensor;
using oclvm::Device;
using oclvm::DType;

void print_memory(oclvm::Runtime& runtime, Device device, const char* when) {
  const oclvm::DeviceStats stats = runtime.stats(device);
  auto bytes = [](int64_t n) { return oclvm::format_bytes(static_cast<uint64_t>(n)); };
  std::printf("  %-9s %-28s allocated %10s in %lld blobs, reserved %10s, peak %s\n",
              device.str().c_str(), when, bytes(stats.allocated_bytes.aggregate().current).c_str(),
              static_cast<long long>(stats.allocation.aggregate().current),
              bytes(stats.reserved_bytes.aggregate().current).c_str(),
              bytes(stats.allocated_bytes.aggregate().peak).c_str());
}

int demo() {
  oclvm::Runtime runtime(oclvm::Options::from_environment());
  const Device first{oclvm::DeviceType::kOpenCL, 0};
  const Device second = runtime.opencl_device_count() > 1
                            ? Device{oclvm::DeviceType::kOpenCL, 1}
                            : Device{oclvm::DeviceType::kCpu, 0};
  std::printf("oclvm %s, devices:", oclvm::library_version());
  for (Device device : runtime.devices()) {
    std::printf(" %s (%s)", device.str().c_str(), runtime.properties(device).name.c_str());
  }
  std::printf("\nusing %s and %s\n\n", first.str().c_str(), second.str().c_str());

  {
    Tensor a = Tensor::arange(runtime, 12, DType::kF32, first).view({3, 4});
    std::cout << "a = arange(12).view(3, 4)\n" << a << "\n\n";

    Tensor row = a[1];                 // views: same storage, no allocation
    Tensor column = a.slice(1, 2, 3);
    Tensor at = a.transpose(0, 1);
    std::printf("views of a share its storage: row %s, column %s, transpose %s\n\n",
                row.shares_storage_with(a) ? "yes" : "no",
                column.shares_storage_with(a) ? "yes" : "no",
                at.shares_storage_with(a) ? "yes" : "no");

    row.fill(-1);     // one FillBlob
    column.fill(0.5); // one FillBlob per element: the column is strided
    std::cout << "after a[1].fill(-1) and a[:, 2:3].fill(0.5), a =\n" << a << "\n\n";

    Tensor b = at.copy_to(second);  // the transposed view, made contiguous on the other device
    std::cout << "b = a.transpose(0, 1).copy_to(" << second.str() << ")\n" << b << "\n\n";

    Tensor h = Tensor::full(runtime, {2, 3}, 1.5, DType::kF16, second);
    Tensor i = Tensor::arange(runtime, 6, DType::kI64, first).view({2, 3});
    i.slice(1, 0, 3, 2).copy_from(Tensor::full(runtime, {2, 2}, 7, DType::kI64, second));
    std::cout << "h = full((2, 3), 1.5, f16)\n" << h << "\n";
    std::cout << "i = arange(6).view(2, 3), columns 0 and 2 copied from another device\n"
              << i << "\n\n";

    // Kernels on the device: submitted without waiting; printing downloads, after them.
    Tensor c = eager::add(a, a[0]);  // every row plus row 0 (broadcast), one LaunchKernel
    Tensor total = eager::sum(c);    // two LaunchKernels: partial sums, then their sum
    std::cout << "c = add(a, a[0])\n" << c << "\nsum(c) = " << total << "\n\n";
    Tensor p = eager::matmul(c, c.transpose(0, 1));  // one NativeCall: CLBlast's GEMM
    std::cout << "p = matmul(c, c.transpose(0, 1))\n" << p << "\n\n";

    const std::vector<float> back = b.to_host<float>();
    std::printf("b.to_host<float>() has %zu values, first %.1f, last %.1f\n\n", back.size(),
                back.front(), back.back());

    std::printf("memory while the tensors live:\n");
    print_memory(runtime, first, "(a, i and their views)");
    print_memory(runtime, second, "(b, h)");

    a = Tensor::zeros(runtime, {1}, DType::kF32, first);  // a's old storage still has views
    print_memory(runtime, first, "a reassigned, views alive");
  }
  // Every tensor above is gone: each storage's last owner ran its releaser (a ReleaseTensor).
  std::printf("\nmemory after every tensor died (released through the releaser hook):\n");
  print_memory(runtime, first, "");
  print_memory(runtime, second, "");

  runtime.empty_cache(first);
  runtime.empty_cache(second);
  std::printf("\nstatistics of %s after empty_cache:\n%s", first.str().c_str(),
              runtime.stats(first).to_string().c_str());
  return 0;
}

}  // namespace

int main() {
  try {
    return demo();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eager_tensor_demo: error: %s\n", e.what());
    return 1;
  }
}
