// adapters/torch/generator.h — the random number generators of the "opencl" device.
//
// Random operators on the device run CPU kernels (the boxed CPU fallback), and a CPU kernel takes
// only a generator whose device is the CPU (ATen's check_generator). So the device's random state
// is a CPU generator (Mersenne Twister, the CPU's algorithm and state layout) owned by a
// DeviceGenerator, a c10::GeneratorImpl of device opencl:N that forwards seed and state to it.
// The fallback hands a kernel the host generator of the generator the caller chose, or of the
// device's default generator when the caller chose none (Note [Random operators on the device]
// in fallback.cc) — so the device has its own stream of random numbers, as CUDA's does, and the
// same seed gives the device the same numbers as the CPU.
//
// Types:
//   DeviceGenerator  c10::GeneratorImpl for PrivateUse1. Every method locks the host generator's
//                    mutex (the one CPU kernels take), so seeding from Python and a kernel drawing
//                    numbers on another thread are ordered.
//
// Thread-safety: thread-safe (each generator's state is guarded by its host generator's mutex);
// default_generator's table is made once, thread-safely.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>

namespace oclvm::torch_adapter {

class DeviceGenerator final : public c10::GeneratorImpl {
 public:
  // A generator of opencl:`index` seeded with `seed` (torch's default seed, as every default
  // generator of torch starts).
  explicit DeviceGenerator(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  // Seeds with a nondeterministic value and returns it.
  uint64_t seed() override;
  // The state is the host generator's (a uint8 CPU tensor in the CPU generator's layout); a state
  // of another size or type is refused with a c10 error and changes nothing.
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The CPU generator holding the state: what CPU kernels are given in place of this generator.
  const at::Generator& host() const { return host_; }

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  DeviceGenerator(c10::DeviceIndex index, at::Generator host);
  DeviceGenerator* clone_impl() const override;

  const at::Generator host_;  // immutable after construction; its state is guarded by its mutex_
};

// The default generator of opencl:`index` (the current device for a negative index); throws a
// c10 error for an index that names no device.
const at::Generator& default_generator(c10::DeviceIndex index);

// The CPU generator a CPU kernel must use for `generator` (a DeviceGenerator, or a generator of
// the CPU, which is returned as it is).
const at::Generator& host_generator(const at::Generator& generator);

}  // namespace oclvm::torch_adapter
