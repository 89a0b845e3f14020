// adapters/torch/generator.cc — DeviceGenerator and the devices' default generators
// (generator.h).
#include "adapters/torch/generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/TensorImpl.h>

#include <mutex>
#include <vector>

#include "adapters/torch/device.h"

namespace oclvm::torch_adapter {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

at::CPUGeneratorImpl& cpu_impl(const at::Generator& host) {
  return *static_cast<at::CPUGeneratorImpl*>(host.unsafeGetGeneratorImpl());
}

}  // namespace

DeviceGenerator::DeviceGenerator(c10::DeviceIndex index, uint64_t seed)
    : DeviceGenerator(index, at::detail::createCPUGenerator(seed)) {}

DeviceGenerator::DeviceGenerator(c10::DeviceIndex index, at::Generator host)
    : c10::GeneratorImpl(c10::Device(kType, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      host_(std::move(host)) {}

void DeviceGenerator::set_current_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  cpu_impl(host_).set_current_seed(seed);
}

void DeviceGenerator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  cpu_impl(host_).set_offset(offset);
}

uint64_t DeviceGenerator::get_offset() const {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  return cpu_impl(host_).get_offset();
}

uint64_t DeviceGenerator::current_seed() const {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  return cpu_impl(host_).current_seed();
}

uint64_t DeviceGenerator::seed() {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  return cpu_impl(host_).seed();
}

void DeviceGenerator::set_state(const c10::TensorImpl& new_state) {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  cpu_impl(host_).set_state(new_state);  // checks size and dtype before changing anything
}

c10::intrusive_ptr<c10::TensorImpl> DeviceGenerator::get_state() const {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  return cpu_impl(host_).get_state();
}

DeviceGenerator* DeviceGenerator::clone_impl() const {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  return new DeviceGenerator(device_.index(), host_.clone());
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  // Never destroyed: random operators may run on other threads while the process exits.
  static const std::vector<at::Generator>* const generators = [] {
    auto* all = new std::vector<at::Generator>();
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      all->push_back(at::make_generator<DeviceGenerator>(d));
    }
    return all;
  }();
  return (*generators)[static_cast<size_t>(checked_index(index))];
}

const at::Generator& host_generator(const at::Generator& generator) {
  if (generator.device().type() != kType) return generator;
  return static_cast<const DeviceGenerator*>(generator.unsafeGetGeneratorImpl())->host();
}

}  // namespace oclvm::torch_adapter
