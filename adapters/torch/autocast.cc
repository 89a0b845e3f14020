// adapters/torch/autocast.cc — mixed precision for the "opencl" device: the kernels of the
// AutocastPrivateUse1 dispatch key, which torch.autocast(device_type="opencl") turns on.
//
// The policy is the one PyTorch gives its GPU backends, from the operator lists ATen exports for
// that purpose (ATen/autocast_mode.h): matrix products, convolutions and RNN cells run in the
// autocast dtype (float16 by default, bfloat16 when asked); operators that lose accuracy in
// 16 bits (exp, log, norms, softmax, losses, ...) run in float32; operators of several inputs
// (addcmul, cat-like, index_put, ...) run in the widest input type. Every other operator falls
// through to the device's kernels unchanged. torch.opencl.get_amp_supported_dtype() lists the
// dtypes torch.autocast accepts for the device.
//
// Thread-safety: registration only (autocast's state is torch's, per thread).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include "adapters/torch/registration.h"

namespace oclvm::torch_adapter {
namespace {

// The signature lists of AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE name ATen's types unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// One policy per operator list; the (operator) or (operator, overload) arguments come from the
// list macros.
#define OCLVM_AUTOCAST_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define OCLVM_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define OCLVM_AUTOCAST_FP32_SET_OPT_DTYPE(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define OCLVM_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

}  // namespace

void register_autocast_kernels(torch::Library& m) {
  AT_FORALL_LOWER_PRECISION_FP(OCLVM_AUTOCAST_LOWER_PRECISION_FP)
  AT_FORALL_FP32(OCLVM_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(OCLVM_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(OCLVM_AUTOCAST_PROMOTE)
}

void register_autocast_fallthrough(torch::Library& m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

#undef OCLVM_AUTOCAST_LOWER_PRECISION_FP
#undef OCLVM_AUTOCAST_FP32
#undef OCLVM_AUTOCAST_FP32_SET_OPT_DTYPE
#undef OCLVM_AUTOCAST_PROMOTE

}  // namespace oclvm::torch_adapter
