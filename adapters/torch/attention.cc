// adapters/torch/attention.cc — scaled dot-product attention on the "opencl" device chooses its
// kernel: on the host path as the CPU does, on the native path the math decomposition.
//
// torch.nn.functional.scaled_dot_product_attention is composite: it asks the device's
// _fused_sdp_choice_stub which kernel to use and takes the math decomposition on a device that
// registered none. On the CPU it picks the flash kernel (_scaled_dot_product_flash_attention_for_cpu)
// when the inputs allow it, so the device computed attention by another route than the CPU and
// differed in the last bits (OpInfo's scaled_dot_product_attention; eval-mode transformers). This
// file gives PrivateUse1 the CPU's own choice: the choice reads only the inputs' shapes,
// dtypes and flags, and the chosen CPU kernel then runs through the CPU fallback on the device's
// tensors, so the device's attention is the CPU's, bit for bit (registered in registration.cc).
// On a native-path device (native_kernels() in device.h) the CPU's flash kernel would be a CPU
// kernel on the device's tensors, so it chooses the math decomposition instead: scaling, matrix
// products, the mask's arithmetic and softmax, forward and backward, all of which run natively.
// For float16 and bfloat16 torch's decomposition converts the inputs to float32 and rounds the
// result once, as the flash kernel accumulates in float. Its values differ from the flash
// kernel's by float rounding (another order of sums). It keeps the CPU's choice where the user
// turned the math backend off (torch.nn.attention.sdpa_kernel).
//
// Thread-safety: stateless.
#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <ATen/ops/_fused_sdp_choice_native.h>

#include <optional>

#include "adapters/torch/device.h"
#include "adapters/torch/registration.h"

namespace oclvm::torch_adapter {

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa) {
  const at::ScalarType type = query.scalar_type();
  if (query.device().type() == c10::DeviceType::PrivateUse1 &&
      native_kernels(query.device().index()) &&
      (type == at::kFloat || type == at::kDouble || type == at::kHalf || type == at::kBFloat16) &&
      at::globalContext().userEnabledMathSDP()) {
    return static_cast<int64_t>(at::SDPBackend::math);
  }
  return at::native::_fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal,
                                           scale, enable_gqa);
}

}  // namespace oclvm::torch_adapter
