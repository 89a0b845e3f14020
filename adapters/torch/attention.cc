// adapters/torch/attention.cc — scaled dot-product attention on the "opencl" device chooses its
// kernel as the CPU does.
//
// torch.nn.functional.scaled_dot_product_attention is composite: it asks the device's
// _fused_sdp_choice_stub which kernel to use and takes the math decomposition on a device that
// registered none. On the CPU it picks the flash kernel (_scaled_dot_product_flash_attention_for_cpu)
// when the inputs allow it, so the device computed attention by another route than the CPU and
// differed in the last bits (OpInfo's scaled_dot_product_attention; eval-mode transformers). This
// file gives PrivateUse1 the CPU's own choice: the choice reads only the inputs' shapes,
// dtypes and flags, and the chosen CPU kernel then runs through the CPU fallback on the device's
// tensors, so the device's attention is the CPU's, bit for bit (registered in registration.cc).
//
// Thread-safety: stateless.
#include <ATen/ATen.h>
#include <ATen/ops/_fused_sdp_choice_native.h>

#include <optional>

#include "adapters/torch/registration.h"

namespace oclvm::torch_adapter {

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa) {
  return at::native::_fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal,
                                           scale, enable_gqa);
}

}  // namespace oclvm::torch_adapter
