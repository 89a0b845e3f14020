// adapters/torch/generator.h — the random number generators of the "opencl" device.
//
// A DeviceGenerator, the c10::GeneratorImpl of device opencl:N, holds two streams under one seed:
//   - a CPU generator (Mersenne Twister, the CPU's algorithm and state layout), for the host path:
//     random operators there run CPU kernels (the boxed CPU fallback, dropout.cc), and a CPU
//     kernel takes only a generator whose device is the CPU (ATen's check_generator). The
//     fallback hands a kernel the host generator of the generator the caller chose, or of the
//     device's default generator when the caller chose none (Note [Random operators on the
//     device] in fallback.cc), so the same seed gives the device the CPU's numbers;
//   - a Philox offset, for the native path (native_random.cc): each random operator there takes
//     the seed and the next offset (philox_draw) and its kernel computes every element from them,
//     as CUDA's generator does; the numbers are not the CPU's.
// Seeding sets both (the offset to 0). The state (get_state) is the CPU generator's bytes followed
// by the offset's 8 bytes, little-endian; set_state also takes the CPU generator's layout alone
// (what torch.get_rng_state() returns), with offset 0.
//
// Types:
//   DeviceGenerator  c10::GeneratorImpl for PrivateUse1. Every method locks the host generator's
//                    mutex (the one CPU kernels take), so seeding from Python and a kernel drawing
//                    numbers on another thread are ordered; the offset is guarded by it too.
//
// Thread-safety: thread-safe (each generator's state is guarded by its host generator's mutex);
// default_generator's table is made once, thread-safely.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <optional>

namespace oclvm::torch_adapter {

class DeviceGenerator final : public c10::GeneratorImpl {
 public:
  // A generator of opencl:`index` seeded with `seed` (torch's default seed, as every default
  // generator of torch starts).
  explicit DeviceGenerator(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  // The Philox offset (native_random.cc).
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  // Seeds with a nondeterministic value and returns it.
  uint64_t seed() override;
  // The state: a uint8 CPU tensor of the host generator's bytes and the offset's (kOffsetBytes).
  // set_state takes that or the host generator's bytes alone (offset 0); a state of another size
  // or type is refused with a c10 error and changes nothing.
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The CPU generator of the host path: what CPU kernels are given in place of this generator.
  const at::Generator& host() const { return host_; }

  // The seed and the offset a native random operator computes from; the offset advances by one,
  // so no two operators see the same counters.
  struct PhiloxDraw {
    uint64_t seed, offset;
  };
  PhiloxDraw philox_draw();

  static constexpr int64_t kOffsetBytes = 8;

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  DeviceGenerator(c10::DeviceIndex index, at::Generator host, uint64_t offset);
  DeviceGenerator* clone_impl() const override;

  const at::Generator host_;  // immutable after construction; its state is guarded by its mutex_
  uint64_t offset_;           // guarded by host_'s mutex_
};

// The default generator of opencl:`index` (the current device for a negative index); throws a
// c10 error for an index that names no device.
const at::Generator& default_generator(c10::DeviceIndex index);

// The CPU generator a CPU kernel must use for `generator` (a DeviceGenerator, or a generator of
// the CPU, which is returned as it is).
const at::Generator& host_generator(const at::Generator& generator);

// How many times any generator's philox_draw was called in this process (tests and the OpInfo
// sweep read it: whether a call drew from a Philox stream).
uint64_t philox_draws();

// The generator a native random operator on opencl:`device` draws from: `generator`'s, or the
// device's default generator when it is absent; nullptr for a generator of another device type
// (the fallback raises the CPU's error for it).
DeviceGenerator* device_generator(const std::optional<at::Generator>& generator,
                                  c10::DeviceIndex device);

}  // namespace oclvm::torch_adapter
