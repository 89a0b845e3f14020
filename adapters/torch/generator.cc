// adapters/torch/generator.cc — DeviceGenerator and the devices' default generators
// (generator.h).
#include "adapters/torch/generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/TensorImpl.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "adapters/torch/device.h"

namespace oclvm::torch_adapter {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

std::atomic<uint64_t> g_philox_draws{0};

at::CPUGeneratorImpl& cpu_impl(const at::Generator& host) {
  return *static_cast<at::CPUGeneratorImpl*>(host.unsafeGetGeneratorImpl());
}

// The CPU generator's state length, which its header does not name: read once from a fresh one.
int64_t host_state_bytes() {
  static const int64_t bytes =
      cpu_impl(at::detail::createCPUGenerator()).get_state()->numel();
  return bytes;
}

}  // namespace

DeviceGenerator::DeviceGenerator(c10::DeviceIndex index, uint64_t seed)
    : DeviceGenerator(index, at::detail::createCPUGenerator(seed), 0) {}

DeviceGenerator::DeviceGenerator(c10::DeviceIndex index, at::Generator host, uint64_t offset)
    : c10::GeneratorImpl(c10::Device(kType, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      host_(std::move(host)),
      offset_(offset) {}

void DeviceGenerator::set_current_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  cpu_impl(host_).set_current_seed(seed);
  offset_ = 0;
}

void DeviceGenerator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  offset_ = offset;
}

uint64_t DeviceGenerator::get_offset() const {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  return offset_;
}

DeviceGenerator::PhiloxDraw DeviceGenerator::philox_draw() {
  g_philox_draws.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  return PhiloxDraw{cpu_impl(host_).current_seed(), offset_++};
}

uint64_t DeviceGenerator::current_seed() const {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  return cpu_impl(host_).current_seed();
}

uint64_t DeviceGenerator::seed() {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  offset_ = 0;
  return cpu_impl(host_).seed();
}

void DeviceGenerator::set_state(const c10::TensorImpl& new_state) {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  const int64_t host_bytes = host_state_bytes();
  const int64_t size = new_state.numel();
  if (size != host_bytes + kOffsetBytes) {
    cpu_impl(host_).set_state(new_state);  // checks size and dtype before changing anything
    offset_ = 0;
    return;
  }
  TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                   "RNG state must be a torch.ByteTensor");
  const at::Tensor whole = at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(
                                          const_cast<c10::TensorImpl*>(&new_state)))
                               .reshape({-1})
                               .contiguous();
  cpu_impl(host_).set_state(*whole.narrow(0, 0, host_bytes).unsafeGetTensorImpl());
  uint64_t offset = 0;
  const auto* bytes = whole.const_data_ptr<uint8_t>() + host_bytes;
  for (int64_t i = kOffsetBytes - 1; i >= 0; --i) offset = (offset << 8) | bytes[i];
  offset_ = offset;
}

c10::intrusive_ptr<c10::TensorImpl> DeviceGenerator::get_state() const {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  const at::Tensor host_state(cpu_impl(host_).get_state());
  const int64_t host_bytes = host_state.numel();
  at::Tensor state = at::empty({host_bytes + kOffsetBytes}, host_state.options());
  state.narrow(0, 0, host_bytes).copy_(host_state);
  auto* bytes = state.mutable_data_ptr<uint8_t>() + host_bytes;
  for (int64_t i = 0; i < kOffsetBytes; ++i) bytes[i] = static_cast<uint8_t>(offset_ >> (8 * i));
  return state.getIntrusivePtr();
}

DeviceGenerator* DeviceGenerator::clone_impl() const {
  std::lock_guard<std::mutex> lock(host_.unsafeGetGeneratorImpl()->mutex_);
  return new DeviceGenerator(device_.index(), host_.clone(), offset_);
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

uint64_t philox_draws() { return g_philox_draws.load(std::memory_order_relaxed); }

DeviceGenerator* device_generator(const std::optional<at::Generator>& generator,
                                  c10::DeviceIndex device) {
  const at::Generator& chosen =
      generator.has_value() && generator->defined() ? *generator : default_generator(device);
  if (chosen.device().type() != kType) return nullptr;
  return static_cast<DeviceGenerator*>(chosen.unsafeGetGeneratorImpl());
}

const at::Generator& host_generator(const at::Generator& generator) {
  if (generator.device().type() != kType) return generator;
  return static_cast<const DeviceGenerator*>(generator.unsafeGetGeneratorImpl())->host();
}

}  // namespace oclvm::torch_adapter
