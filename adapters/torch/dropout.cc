// adapters/torch/dropout.cc — native_dropout of the "opencl" device, drawing from the device's
// generator: on the native path its Philox stream (native_dropout_on_device in native_kernels.h),
// on the host path its CPU generator, as follows.
//
// ATen's CPU kernel of native_dropout draws its mask from the CPU's default generator and takes no
// generator argument, so through the CPU fallback every dropout on the device consumed the CPU's
// random stream: torch.opencl.manual_seed did not make dropout reproducible, and a random draw on
// the CPU changed the device's masks (Note [Random operators on the device] in fallback.cc). This
// kernel computes what the CPU kernel computes — a mask of Bernoulli(1 - p) draws in the input's
// contiguous element order, output = input * (mask * 1 / (1 - p)), the mask returned as bool —
// on CPU copies, with the device's default generator: equal seeds give the CPU's masks and values
// bit for bit (tests/torch/test_rng_device.py checks it). Evaluation mode and empty inputs take the
// CPU kernel as they are (no randomness).
//
// Thread-safety: as ATen's operators (the generator's mutex orders the draws).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <tuple>

#include "adapters/torch/generator.h"
#include "adapters/torch/native_kernels.h"
#include "adapters/torch/registration.h"

namespace oclvm::torch_adapter {
namespace {

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  const c10::Device device = input.device();
  if (input.numel() != 0 && (!train.has_value() || *train)) {
    // The native path draws on the device (Note [Native random numbers] in native_random.cc).
    if (auto native = native_dropout_on_device(input, p)) {
      count_native_call();
      return std::move(*native);
    }
  }
  const at::Tensor host = input.cpu();
  if (input.numel() == 0 || (train.has_value() && !*train)) {
    auto [output, mask] = at::native_dropout(host, p, train);
    return {output.to(device), mask.to(device)};
  }
  const double keep = 1. - p;
  const double scale = keep == 0 ? 0. : 1. / keep;
  at::Tensor noise = at::empty_like(host, at::MemoryFormat::Contiguous);
  noise.bernoulli_(keep, host_generator(default_generator(device.index())));
  const at::Tensor output = host.mul(noise.mul(scale));
  return {output.to(device), noise.to(at::kBool).to(device)};
}

}  // namespace

void register_dropout(torch::Library& m) { m.impl("native_dropout", native_dropout); }

}  // namespace oclvm::torch_adapter
