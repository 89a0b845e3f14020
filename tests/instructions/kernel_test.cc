// tests/instructions/kernel_test.cc — LaunchKernel end to end on PoCL: results against the host,
// the builder's checks, build errors, the kernel cache in memory and on disk, ordering across
// streams, injected build and launch failures, and two devices.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/kernel_cache.h"
#include "oclvm/vm/host_section.h"
#include "oclvm/vm/virtual_machine.h"
#include "tests/instructions/vm_fixture.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using testing::kCpu;
using testing::kOpenCL0;
using testing::kOpenCL1;
using testing::VmTest;

// A source no earlier test compiled, so cache counts start from a known point.
std::string unique_source(const std::string& body) {
  static std::atomic<int> counter{0};
  return "// test program " + std::to_string(getpid()) + "." + std::to_string(counter++) + "\n" +
         body;
}

const char* const kAxpy = R"(
__kernel void axpy(OCLVM_BLOB(float, y), OCLVM_BLOB(const float, x), float a, uint n) {
  size_t i = get_global_id(0);
  if (i < n) OCLVM_PTR(float, y)[i] += a * OCLVM_PTR(const float, x)[i];
}
)";

using testing::message_of;

class KernelTest : public VmTest {
 protected:
  void TearDown() override {
    for (Device device : DeviceManager::instance().devices()) {
      DeviceManager::instance().backend(device).faults().configure(FaultOptions{});
    }
    VmTest::TearDown();
  }

  std::shared_ptr<BlobObject> upload(Device device, const std::vector<float>& values) {
    return upload_values(device, values, DType::kF32);
  }
  std::vector<float> download(const std::shared_ptr<BlobObject>& blob, size_t n) {
    return download_values<float>(blob, n);
  }
  static LaunchRange range1(size_t global, size_t local = 0) {
    LaunchRange range;
    range.global[0] = global;
    range.local[0] = local;
    return range;
  }
  MemoryBackend& backend(Device device = kOpenCL0) {
    return DeviceManager::instance().backend(device);
  }
};

TEST_F(KernelTest, AxpyWithOffsetsEqualsTheHost) {
  std::vector<float> y(300), x(300);
  for (size_t i = 0; i < y.size(); ++i) {
    y[i] = static_cast<float>(i);
    x[i] = 0.5f * static_cast<float>(i % 7);
  }
  auto yb = upload(kOpenCL0, y);
  auto xb = upload(kOpenCL0, x);
  InstructionsBuilder builder(*vm_);
  // y[10:210] += 3 * x[50:250], the offsets in bytes from element 0.
  builder.launch(builder.stream(kOpenCL0), KernelSource{kAxpy, "axpy", ""}, range1(256, 64),
                 {LaunchArg::of_blob(yb, 10 * sizeof(float), KernelAccess::kReadWrite),
                  LaunchArg::of_blob(xb, 50 * sizeof(float), KernelAccess::kRead),
                  LaunchArg::of(3.0f), LaunchArg::of(uint32_t{200})});
  vm_->run(builder.take());
  std::vector<float> expected = y;
  for (size_t i = 0; i < 200; ++i) expected[10 + i] += 3.0f * x[50 + i];
  EXPECT_EQ(download(yb, y.size()), expected);
  release(yb);
  release(xb);
}

TEST_F(KernelTest, ChainedLaunchesInOneListAndAcrossListsRunInOrder) {
  const KernelSource step{"__kernel void advance(OCLVM_BLOB(float, v)) {\n"
                          "  __global float* p = OCLVM_PTR(float, v);\n"
                          "  p[get_global_id(0)] = p[get_global_id(0)] * 2.0f + 1.0f; }",
                          "advance", ""};
  auto v = upload(kOpenCL0, std::vector<float>(64, 0.0f));
  InstructionsBuilder builder(*vm_);
  auto kernel = builder.kernel(kOpenCL0, step);
  for (int i = 0; i < 10; ++i) {
    builder.launch(builder.stream(kOpenCL0), kernel, range1(64),
                   {LaunchArg::of_blob(v, 0, KernelAccess::kReadWrite)});
  }
  vm_->run(builder.take());
  for (int i = 0; i < 5; ++i) {
    builder.launch(builder.stream(kOpenCL0), kernel, range1(64),
                   {LaunchArg::of_blob(v, 0, KernelAccess::kReadWrite)});
    vm::Ticket ticket = vm_->submit(builder.take());
    (void)ticket;  // the download below is ordered after it
  }
  EXPECT_EQ(download(v, 64), std::vector<float>(64, 32767.0f));  // 2^15 - 1
  release(v);
}

TEST_F(KernelTest, ScalarTypesAndLocalMemoryReachTheKernel) {
  const KernelSource source{unique_source(R"(
__kernel void mix_args(OCLVM_BLOB(long, out), char c, ushort s, int i, ulong u, double d,
                  __local long* scratch) {
  size_t l = get_local_id(0);
  scratch[l] = (long)l;
  barrier(CLK_LOCAL_MEM_FENCE);
  long sum = 0;
  for (size_t k = 0; k < get_local_size(0); ++k) sum += scratch[k];
  if (get_global_id(0) == 0) {
    __global long* o = OCLVM_PTR(long, out);
    o[0] = c; o[1] = s; o[2] = i; o[3] = (long)u; o[4] = (long)(d * 4.0); o[5] = sum;
  }
})"),
                            "mix_args", ""};
  InstructionsBuilder builder(*vm_);
  auto out = builder.allocate_blob(builder.stream(kOpenCL0), {6}, DType::kI64);
  builder.launch(builder.stream(kOpenCL0), source, range1(8, 8),
                 {LaunchArg::of_blob(out, 0, KernelAccess::kWrite), LaunchArg::of(int8_t{-5}),
                  LaunchArg::of(uint16_t{65000}), LaunchArg::of(int32_t{-123456}),
                  LaunchArg::of(uint64_t{1} << 40), LaunchArg::of(2.25),
                  LaunchArg::local(8 * sizeof(int64_t))});
  std::vector<int64_t> host(6);
  builder.copy_device_to_host(out, 0, host.data(), sizeof(int64_t) * 6);
  vm_->run(builder.take());
  EXPECT_EQ(host, (std::vector<int64_t>{-5, 65000, -123456, int64_t{1} << 40, 9, 28}));
  release(out);
}

TEST_F(KernelTest, ABuildErrorCarriesTheLogAndChangesNothing) {
  InstructionsBuilder builder(*vm_);
  auto v = upload(kOpenCL0, {1.0f});
  builder.fill(v, 0, 4, 0);
  const KernelSource broken{unique_source("__kernel void broken(OCLVM_BLOB(float, v)) {\n"
                                          "  undeclared_name = 1; }"),
                            "broken", ""};
  try {
    builder.launch(builder.stream(kOpenCL0), broken, range1(1),
                   {LaunchArg::of_blob(v, 0, KernelAccess::kWrite)});
    ADD_FAILURE() << "did not throw";
  } catch (const KernelBuildError& e) {
    EXPECT_CONTAINS(e.what(), "kernel 'broken'");
    EXPECT_CONTAINS(e.what(), "opencl:0");
    EXPECT_CONTAINS(e.log(), "undeclared_name");
  }
  EXPECT_EQ(builder.size(), 1u);  // only the fill
  vm_->run(builder.take());
  // The failure was not cached and the VM goes on.
  EXPECT_THROW(builder.kernel(kOpenCL0, broken), KernelBuildError);
  EXPECT_EQ(download(v, 1), std::vector<float>{0.0f});
  release(v);
}

TEST_F(KernelTest, TheBuilderRefusesArgumentsThatDoNotFit) {
  auto v = upload(kOpenCL0, std::vector<float>(4, 1.0f));
  InstructionsBuilder builder(*vm_);
  vm::Stream& stream = builder.stream(kOpenCL0);
  const KernelSource axpy{kAxpy, "axpy", ""};
  const auto blob = [&](size_t offset = 0) { return LaunchArg::of_blob(v, offset, KernelAccess::kRead); };
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] {
                    builder.launch(stream, axpy, range1(4), {blob(), blob(), LaunchArg::of(3.0f)});
                  }),
                  "Expected arguments for all 6 parameters of kernel 'axpy'");
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] {
                    builder.launch(stream, axpy, range1(4),
                                   {blob(), blob(), LaunchArg::of(3.0), LaunchArg::of(4u)});
                  }),
                  "to fit parameter 4 'a' (float), but got double");
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] {
                    builder.launch(stream, axpy, range1(4),
                                   {blob(), LaunchArg::of(3.0f), blob(), LaunchArg::of(4u)});
                  }),
                  "to fit parameter 2 'x_base' (__global float*), but got float");
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] {
                    builder.launch(stream, axpy, range1(4), {blob(), blob(), blob()});
                  }),
                  "to fit a pointer and a ulong offset at parameter 4 'a' (float)");
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] {
                    builder.launch(stream, axpy, range1(4),
                                   {blob(17), blob(), LaunchArg::of(3.0f), LaunchArg::of(4u)});
                  }),
                  "Expected a kernel argument range within the 16 bytes");
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] {
                    builder.launch(stream, axpy, range1(10, 4),
                                   {blob(), blob(), LaunchArg::of(3.0f), LaunchArg::of(4u)});
                  }),
                  "global 10 and local 4");
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] {
                    builder.launch(stream, KernelSource{kAxpy, "nope", ""}, range1(4), {});
                  }),
                  "Expected a kernel the program defines (axpy), but got 'nope'");
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] { builder.kernel(kCpu, axpy); }),
                  "Expected a device that runs OpenCL kernels, but got cpu");
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] {
                    builder.launch(builder.stream(kCpu), builder.kernel(kOpenCL0, axpy), range1(4),
                                   {});
                  }),
                  "Expected a kernel compiled for cpu");
  EXPECT_EQ(builder.size(), 0u);
  release(v);
}

TEST_F(KernelTest, DescribeNamesTheKernelAndEveryArgument) {
  auto v = upload(kOpenCL0, std::vector<float>(4, 1.0f));
  InstructionsBuilder builder(*vm_);
  builder.launch(builder.stream(kOpenCL0), KernelSource{kAxpy, "axpy", ""}, range1(2, 2),
                 {LaunchArg::of_blob(v, 8, KernelAccess::kReadWrite),
                  LaunchArg::of_blob(v, 0, KernelAccess::kRead), LaunchArg::of(2.5f),
                  LaunchArg::of(2u)});
  vm::InstructionList list = builder.take();
  const vm::Instruction& launch = list.items().front();
  EXPECT_STREQ(launch.name(), "LaunchKernel");
  const std::string text = launch.describe();
  EXPECT_CONTAINS(text, "'axpy' global [2] local [2]");
  EXPECT_CONTAINS(text, "+8 read-write");
  EXPECT_CONTAINS(text, "+0 read");
  EXPECT_CONTAINS(text, "float 2.5");
  EXPECT_CONTAINS(text, "uint 2");
  // One blob named twice is one operand, written.
  ASSERT_EQ(launch.operands().size(), 1u);
  EXPECT_EQ(launch.operands()[0].access, vm::Access::kWrite);
  vm_->run(std::move(list));
  EXPECT_EQ(download(v, 4), (std::vector<float>{1.0f, 1.0f, 3.5f, 3.5f}));
  release(v);
}

TEST_F(KernelTest, ConcurrentCallersCompileAProgramOnce) {
  const KernelSource source{unique_source(kAxpy), "axpy", ""};
  const KernelCacheStats before = backend().kernel_cache_stats();
  std::vector<std::shared_ptr<const Kernel>> kernels(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kernels.size(); ++t) {
    threads.emplace_back([&, t] { kernels[t] = backend().kernel(source); });
  }
  for (std::thread& thread : threads) thread.join();
  const KernelCacheStats after = backend().kernel_cache_stats();
  EXPECT_EQ(after.compiled + after.loaded - before.compiled - before.loaded, 1u);
  for (const auto& kernel : kernels) EXPECT_EQ(kernel.get(), kernels[0].get());
  ASSERT_EQ(kernels[0]->params().size(), 6u);
  EXPECT_TRUE(kernels[0]->params_known());
  EXPECT_EQ(kernels[0]->params()[0].space, KernelParam::Space::kGlobal);
  EXPECT_EQ(kernels[0]->params()[1].type_name, "ulong");
}

// Two VMs share the device's kernel cache, so they launch one Kernel from two workers at once.
// Each must launch with its own arguments (Note [A queue's own kernel objects]): with one
// cl_kernel for both, a launch could take the other thread's buffer or scalar.
// PoCL 3.1's basic driver runs commands in the enqueuing thread and deadlocks, about one
// process in six here, when two threads enqueue to two queues of one device (both block on one
// event lock inside PoCL; design/architecture.md), so this runs on the pthread driver (the
// two_devices entry of ctest) and on other platforms.
TEST_F(KernelTest, TwoVmsLaunchingOneKernelAtOnceKeepTheirOwnArguments) {
  const char* pocl_devices = std::getenv("POCL_DEVICES");
  if (DeviceManager::instance().platform_name().find("Portable Computing Language") !=
          std::string::npos &&
      (pocl_devices == nullptr || std::string(pocl_devices).find("basic") != std::string::npos))
    GTEST_SKIP() << "two threads enqueuing to one PoCL basic device can deadlock inside PoCL; "
                    "run with POCL_DEVICES=pthread";
  const KernelSource source{unique_source(
                                "__kernel void add(OCLVM_BLOB(float, v), float a) {\n"
                                "  OCLVM_PTR(float, v)[get_global_id(0)] += a; }"),
                            "add", ""};
  vm::VirtualMachine other(DeviceManager::instance(), Options{});
  constexpr int kLaunches = 400;
  constexpr size_t kItems = 64;
  std::vector<std::vector<float>> results(2);
  std::atomic<int> ready{0};
  const auto launches = [&](vm::VirtualMachine& vm, int which) {
    InstructionsBuilder builder(vm);
    vm::Stream& stream = builder.stream(kOpenCL0);
    auto v = builder.allocate_blob(stream, {int64_t{kItems}}, DType::kF32);
    builder.fill(v, 0, kItems * sizeof(float), 0);
    vm.run(builder.take());
    const auto kernel = builder.kernel(kOpenCL0, source);
    const float a = which == 0 ? 1.0f : 1000.0f;
    ready.fetch_add(1);
    while (ready.load() < 2) std::this_thread::yield();
    for (int i = 0; i < kLaunches; ++i) {
      builder.launch(stream, kernel, range1(kItems),
                     {LaunchArg::of_blob(v, 0, KernelAccess::kReadWrite), LaunchArg::of(a)});
      vm.run(builder.take());
    }
    results[which].resize(kItems);
    builder.copy_device_to_host(v, 0, results[which].data(), kItems * sizeof(float));
    builder.release(std::move(v));
    vm.run(builder.take());
  };
  std::thread first([&] { launches(*vm_, 0); });
  std::thread second([&] { launches(other, 1); });
  first.join();
  second.join();
  EXPECT_EQ(results[0], std::vector<float>(kItems, 1.0f * kLaunches));
  EXPECT_EQ(results[1], std::vector<float>(kItems, 1000.0f * kLaunches));
}

TEST_F(KernelTest, BinariesKeptOnDiskBuildASecondTimeWithoutTheCompiler) {
  const std::string dir = ::testing::TempDir() + "oclvm-kernels-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  backend().set_kernel_cache_dir(dir);
  const KernelSource source{unique_source(kAxpy), "axpy", "-cl-mad-enable"};
  const KernelCacheStats before = backend().kernel_cache_stats();
  backend().kernel(source);
  const KernelCacheStats stored = backend().kernel_cache_stats();
  EXPECT_EQ(stored.compiled - before.compiled, 1u);
  EXPECT_EQ(stored.stored - before.stored, 1u);
  backend().forget_programs();
  auto loaded = backend().kernel(source);
  const KernelCacheStats after = backend().kernel_cache_stats();
  EXPECT_EQ(after.loaded - stored.loaded, 1u);
  EXPECT_EQ(after.compiled, stored.compiled);
  // The loaded kernel computes.
  auto y = upload(kOpenCL0, {1.0f, 2.0f});
  auto x = upload(kOpenCL0, {10.0f, 20.0f});
  InstructionsBuilder builder(*vm_);
  builder.launch(builder.stream(kOpenCL0), loaded, range1(2),
                 {LaunchArg::of_blob(y, 0, KernelAccess::kReadWrite),
                  LaunchArg::of_blob(x, 0, KernelAccess::kRead), LaunchArg::of(2.0f),
                  LaunchArg::of(2u)});
  vm_->run(builder.take());
  EXPECT_EQ(download(y, 2), (std::vector<float>{21.0f, 42.0f}));
  // A file that is not a whole cache file is a miss, counted, and the program compiles.
  KernelDiskCache disk(dir);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::filesystem::resize_file(entry.path(), 40);
  }
  backend().forget_programs();
  backend().kernel(source);
  const KernelCacheStats rebuilt = backend().kernel_cache_stats();
  EXPECT_EQ(rebuilt.compiled - after.compiled, 1u);
  EXPECT_EQ(rebuilt.disk_errors - after.disk_errors, 1u);
  backend().set_kernel_cache_dir("");
  std::filesystem::remove_all(dir);
  release(y);
  release(x);
}

TEST_F(KernelTest, AReaderOnAnotherStreamWaitsForTheKernel) {
  auto v = upload(kOpenCL0, std::vector<float>(1 << 16, 1.0f));
  vm::Stream& side = vm_->stream(kOpenCL0, vm::StreamRole::kUser, 1);
  InstructionsBuilder builder(*vm_);
  const KernelSource slow{unique_source(R"(
__kernel void slow(OCLVM_BLOB(float, v)) {
  __global float* p = OCLVM_PTR(float, v);
  float x = p[get_global_id(0)];
  for (int k = 0; k < 200; ++k) x = x * 1.0001f + 0.5f;
  p[get_global_id(0)] = x;
})"),
                          "slow", ""};
  builder.launch(side, slow, range1(1 << 16), {LaunchArg::of_blob(v, 0, KernelAccess::kWrite)});
  std::vector<float> out(1 << 16);
  builder.copy_device_to_host(v, 0, out.data(), out.size() * sizeof(float));  // compute stream
  vm_->run(builder.take());
  float expected = 1.0f;
  for (int k = 0; k < 200; ++k) expected = expected * 1.0001f + 0.5f;
  EXPECT_FLOAT_EQ(out[0], expected);
  EXPECT_FLOAT_EQ(out.back(), expected);
  release(v);
}

TEST_F(KernelTest, InjectedBuildAndLaunchFailuresReachTheCallerAndNothingLeaks) {
  const KernelSource source{unique_source(kAxpy), "axpy", ""};
  backend().faults().configure(FaultOptions::parse("build:nth=1", "test"));
  InstructionsBuilder builder(*vm_);
  EXPECT_CONTAINS(message_of<BackendError>([&] { builder.kernel(kOpenCL0, source); }),
                  "injected fault");
  auto kernel = builder.kernel(kOpenCL0, source);  // the failure was not cached
  auto y = upload(kOpenCL0, {1.0f});
  backend().faults().configure(FaultOptions::parse("launch:nth=1", "test"));
  const auto args = [&] {
    return std::vector<LaunchArg>{LaunchArg::of_blob(y, 0, KernelAccess::kReadWrite),
                                  LaunchArg::of_blob(y, 0, KernelAccess::kRead),
                                  LaunchArg::of(1.0f), LaunchArg::of(1u)};
  };
  builder.launch(builder.stream(kOpenCL0), kernel, range1(1), args());
  const std::string message = message_of<BackendError>([&] { vm_->run(builder.take()); });
  EXPECT_CONTAINS(message, "LaunchKernel");
  EXPECT_CONTAINS(message, "injected fault");
  builder.launch(builder.stream(kOpenCL0), kernel, range1(1), args());
  vm_->run(builder.take());
  EXPECT_EQ(download(y, 1), std::vector<float>{2.0f});
  release(y);
}

TEST_F(KernelTest, AReleasedBlobFailsAtTheSyncPoint) {
  auto y = upload(kOpenCL0, {1.0f});
  InstructionsBuilder builder(*vm_);
  builder.release(y);
  builder.launch(builder.stream(kOpenCL0), KernelSource{kAxpy, "axpy", ""}, range1(1),
                 {LaunchArg::of_blob(y, 0, KernelAccess::kReadWrite),
                  LaunchArg::of_blob(y, 0, KernelAccess::kRead), LaunchArg::of(1.0f),
                  LaunchArg::of(1u)});
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] { vm_->run(builder.take()); }),
                  "already released");
}

TEST_F(KernelTest, EachDeviceRunsItsOwnKernelAndCopiesJoinThem) {
  if (!DeviceManager::instance().has(kOpenCL1)) {
    GTEST_SKIP() << "needs two OpenCL devices (POCL_DEVICES=\"basic basic\")";
  }
  auto a = upload(kOpenCL0, {1.0f, 2.0f});
  auto b = upload(kOpenCL1, {0.0f, 0.0f});
  auto ones = upload(kOpenCL1, {1.0f, 1.0f});
  InstructionsBuilder builder(*vm_);
  const KernelSource axpy{kAxpy, "axpy", ""};
  const auto launch = [&](Device device, std::shared_ptr<BlobObject> y,
                          std::shared_ptr<BlobObject> x, float s) {
    builder.launch(builder.stream(device), axpy, range1(2),
                   {LaunchArg::of_blob(y, 0, KernelAccess::kReadWrite),
                    LaunchArg::of_blob(x, 0, KernelAccess::kRead), LaunchArg::of(s),
                    LaunchArg::of(2u)});
  };
  launch(kOpenCL0, a, a, 1.0f);                 // a = 2a on opencl:0
  builder.copy(a, 0, b, 0, 2 * sizeof(float));  // to opencl:1, after the kernel
  launch(kOpenCL1, b, ones, 10.0f);             // b += 10 on opencl:1, after the copy
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] { launch(kOpenCL1, b, a, 1.0f); }),
                  "the kernel argument's device");
  vm_->run(builder.take());
  EXPECT_EQ(download(b, 2), (std::vector<float>{12.0f, 14.0f}));
  release(a);
  release(b);
  release(ones);
}

// Note [Batches that end with a marker]: a submitted list returns once queued; its ticket waits
// for the device; a host section entered right after a submission sees what its kernels wrote;
// more batches than the worker keeps markers for still complete in order.
TEST_F(KernelTest, SubmittedKernelsCompleteAtTheTicketAndBeforeAHostSection) {
  const KernelSource slow{unique_source(R"(
__kernel void slow_fill(OCLVM_BLOB(float, v), float value) {
  __global float* p = OCLVM_PTR(float, v);
  float x = 0.0f;
  for (int k = 0; k < 2000; ++k) x = x * 0.5f + value;  // converges to 2 * value
  p[get_global_id(0)] = x;
})"),
                          "slow_fill", ""};
  constexpr size_t kItems = 1 << 14;
  InstructionsBuilder builder(*vm_);
  auto v = builder.allocate_blob(builder.stream(kOpenCL0), {int64_t{kItems}}, DType::kF32);
  vm_->run(builder.take());
  auto kernel = builder.kernel(kOpenCL0, slow);
  builder.launch(builder.stream(kOpenCL0), kernel, range1(kItems),
                 {LaunchArg::of_blob(v, 0, KernelAccess::kWrite), LaunchArg::of(1.5f)});
  vm::Ticket ticket = vm_->submit(builder.take());
  ticket.wait();
  EXPECT_EQ(download(v, 1), std::vector<float>{3.0f});

  float start = 3.0f;  // what the 200 batches below add to
  if (backend().properties().host_addressable) {
    start = 8.0f;
    builder.launch(builder.stream(kOpenCL0), kernel, range1(kItems),
                   {LaunchArg::of_blob(v, 0, KernelAccess::kWrite), LaunchArg::of(4.0f)});
    vm::Ticket pending = vm_->submit(builder.take());
    {
      std::optional<vm::HostSection> section = vm::HostSection::enter(*vm_, kOpenCL0);
      ASSERT_TRUE(section.has_value());
      const auto* host = static_cast<const float*>(v->storage()->host_address());
      EXPECT_EQ(host[0], 8.0f);
      EXPECT_EQ(host[kItems - 1], 8.0f);
    }
    pending.wait();
  }

  // 200 batches, past the 64 whose markers the worker keeps: each adds 1.
  const KernelSource add_one{"__kernel void add_one(OCLVM_BLOB(float, v)) {\n"
                             "  OCLVM_PTR(float, v)[get_global_id(0)] += 1.0f; }",
                             "add_one", ""};
  std::vector<vm::Ticket> tickets;
  for (int i = 0; i < 200; ++i) {
    builder.launch(builder.stream(kOpenCL0), add_one, range1(kItems),
                   {LaunchArg::of_blob(v, 0, KernelAccess::kReadWrite)});
    tickets.push_back(vm_->submit(builder.take()));
  }
  for (vm::Ticket& t : tickets) t.wait();
  const std::vector<float> out = download(v, kItems);
  EXPECT_EQ(out.front(), start + 200.0f);
  EXPECT_EQ(out.back(), start + 200.0f);
  release(v);
}

}  // namespace
}  // namespace oclvm
