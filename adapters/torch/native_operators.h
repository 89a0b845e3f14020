// adapters/torch/native_operators.h — which torch operator each native function answers: the
// NativeKernel<Op> specialisations the unboxed kernels' templates (host_kernels.cc) try before the
// host kernel or the CPU fallback; the reductions' are in native_reduction_operators.h. The
// functions themselves are declared in native_kernels.h.
//
// Thread-safety: any thread, as the functions they call.
#pragma once

#include <ATen/Operators.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

#include "adapters/torch/native_kernels.h"

namespace oclvm::torch_adapter {

// The native kernel of a torch operator, for the unboxed kernels' templates (host_kernels.cc):
// `exists` says whether there is one; call() returns the result, nullopt (or false for an
// in-place operator) when the native path does not take the call.
template <class Op>
struct NativeKernel {
  static constexpr bool exists = false;
};

template <BinaryOp kOp>
struct NativeBinaryKernel {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, const at::Tensor& other,
                                        const at::Scalar& alpha) {
    return native_binary(kOp, self, other, alpha);
  }
  static std::optional<at::Tensor> call(const at::Tensor& self, const at::Tensor& other) {
    return native_binary(kOp, self, other, 1);
  }
  static std::optional<at::Tensor> call(const at::Tensor& self, const at::Scalar& other) {
    return native_binary(kOp, self, at::native::wrapped_scalar_tensor(other), 1);
  }
};

template <BinaryOp kOp>
struct NativeBinaryInPlaceKernel {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
    return native_binary_(kOp, self, other, alpha);
  }
  static bool call(const at::Tensor& self, const at::Tensor& other) {
    return native_binary_(kOp, self, other, 1);
  }
};

template <>
struct NativeKernel<at::_ops::add_Tensor> : NativeBinaryKernel<BinaryOp::kAdd> {};
template <>
struct NativeKernel<at::_ops::sub_Tensor> : NativeBinaryKernel<BinaryOp::kSub> {};
template <>
struct NativeKernel<at::_ops::eq_Tensor> : NativeBinaryKernel<BinaryOp::kEq> {};
template <>
struct NativeKernel<at::_ops::eq_Scalar> : NativeBinaryKernel<BinaryOp::kEq> {};
template <>
struct NativeKernel<at::_ops::ne_Tensor> : NativeBinaryKernel<BinaryOp::kNe> {};
template <>
struct NativeKernel<at::_ops::ne_Scalar> : NativeBinaryKernel<BinaryOp::kNe> {};
template <>
struct NativeKernel<at::_ops::lt_Tensor> : NativeBinaryKernel<BinaryOp::kLt> {};
template <>
struct NativeKernel<at::_ops::lt_Scalar> : NativeBinaryKernel<BinaryOp::kLt> {};
template <>
struct NativeKernel<at::_ops::le_Tensor> : NativeBinaryKernel<BinaryOp::kLe> {};
template <>
struct NativeKernel<at::_ops::le_Scalar> : NativeBinaryKernel<BinaryOp::kLe> {};
template <>
struct NativeKernel<at::_ops::gt_Tensor> : NativeBinaryKernel<BinaryOp::kGt> {};
template <>
struct NativeKernel<at::_ops::gt_Scalar> : NativeBinaryKernel<BinaryOp::kGt> {};
template <>
struct NativeKernel<at::_ops::ge_Tensor> : NativeBinaryKernel<BinaryOp::kGe> {};
template <>
struct NativeKernel<at::_ops::ge_Scalar> : NativeBinaryKernel<BinaryOp::kGe> {};
template <>
struct NativeKernel<at::_ops::bitwise_and_Tensor> : NativeBinaryKernel<BinaryOp::kBitwiseAnd> {};
template <>
struct NativeKernel<at::_ops::bitwise_or_Tensor> : NativeBinaryKernel<BinaryOp::kBitwiseOr> {};
template <>
struct NativeKernel<at::_ops::bitwise_xor_Tensor> : NativeBinaryKernel<BinaryOp::kBitwiseXor> {};
template <>
struct NativeKernel<at::_ops::minimum> : NativeBinaryKernel<BinaryOp::kMinimum> {};
template <>
struct NativeKernel<at::_ops::maximum> : NativeBinaryKernel<BinaryOp::kMaximum> {};
template <>
struct NativeKernel<at::_ops::mul_Tensor> : NativeBinaryKernel<BinaryOp::kMul> {};
template <>
struct NativeKernel<at::_ops::div_Tensor> : NativeBinaryKernel<BinaryOp::kDiv> {};
template <>
struct NativeKernel<at::_ops::add__Tensor> : NativeBinaryInPlaceKernel<BinaryOp::kAdd> {};
template <>
struct NativeKernel<at::_ops::sub__Tensor> : NativeBinaryInPlaceKernel<BinaryOp::kSub> {};
template <>
struct NativeKernel<at::_ops::mul__Tensor> : NativeBinaryInPlaceKernel<BinaryOp::kMul> {};
template <>
struct NativeKernel<at::_ops::div__Tensor> : NativeBinaryInPlaceKernel<BinaryOp::kDiv> {};

// The _foreach_ forms' native kernels count their own calls (native_foreach_).
template <>
struct NativeKernel<at::_ops::_foreach_add__Scalar> {
  static constexpr bool exists = true;
  static bool call(at::TensorList self, const at::Scalar& scalar) {
    return native_foreach_(BinaryOp::kAdd, self, {}, {scalar}, /*one_scalar=*/true, 1);
  }
};
template <>
struct NativeKernel<at::_ops::_foreach_add__List> {
  static constexpr bool exists = true;
  static bool call(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {
    return native_foreach_(BinaryOp::kAdd, self, other, {}, false, alpha);
  }
};
template <>
struct NativeKernel<at::_ops::_foreach_mul__Scalar> {
  static constexpr bool exists = true;
  static bool call(at::TensorList self, const at::Scalar& scalar) {
    return native_foreach_(BinaryOp::kMul, self, {}, {scalar}, /*one_scalar=*/true, 1);
  }
};
template <>
struct NativeKernel<at::_ops::_foreach_mul__List> {
  static constexpr bool exists = true;
  static bool call(at::TensorList self, at::TensorList other) {
    return native_foreach_(BinaryOp::kMul, self, other, {}, false, 1);
  }
};
template <>
struct NativeKernel<at::_ops::_foreach_div__Scalar> {
  static constexpr bool exists = true;
  static bool call(at::TensorList self, const at::Scalar& scalar) {
    return native_foreach_(BinaryOp::kDiv, self, {}, {scalar}, /*one_scalar=*/true, 1);
  }
};
template <>
struct NativeKernel<at::_ops::_foreach_div__ScalarList> {
  static constexpr bool exists = true;
  static bool call(at::TensorList self, at::ArrayRef<at::Scalar> scalars) {
    return native_foreach_(BinaryOp::kDiv, self, {}, scalars, /*one_scalar=*/false, 1);
  }
};

template <>
struct NativeKernel<at::_ops::_foreach_addcmul__Scalar> {
  static constexpr bool exists = true;
  static bool call(at::TensorList self, at::TensorList first, at::TensorList second,
                   const at::Scalar& value) {
    return native_foreach_pointwise_(BinaryOp::kAddcmul, self, first, second, {value},
                                     /*one_scalar=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::_foreach_addcdiv__Scalar> {
  static constexpr bool exists = true;
  static bool call(at::TensorList self, at::TensorList first, at::TensorList second,
                   const at::Scalar& value) {
    return native_foreach_pointwise_(BinaryOp::kAddcdiv, self, first, second, {value},
                                     /*one_scalar=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::_foreach_addcdiv__ScalarList> {
  static constexpr bool exists = true;
  static bool call(at::TensorList self, at::TensorList first, at::TensorList second,
                   at::ArrayRef<at::Scalar> scalars) {
    return native_foreach_pointwise_(BinaryOp::kAddcdiv, self, first, second, scalars,
                                     /*one_scalar=*/false);
  }
};
template <>
struct NativeKernel<at::_ops::_foreach_lerp__Scalar> {
  static constexpr bool exists = true;
  static bool call(at::TensorList self, at::TensorList end, const at::Scalar& weight) {
    return native_foreach_pointwise_(BinaryOp::kLerp, self, end, {}, {weight},
                                     /*one_scalar=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::_foreach_sqrt> {
  static constexpr bool exists = true;
  static std::optional<std::vector<at::Tensor>> call(at::TensorList self) {
    return native_foreach_sqrt(self);
  }
};
template <>
struct NativeKernel<at::_ops::gelu> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, c10::string_view approximate) {
    return native_gelu(self, approximate);
  }
};
template <>
struct NativeKernel<at::_ops::gelu_backward> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad, const at::Tensor& self,
                                        c10::string_view approximate) {
    if (approximate != "none" && approximate != "tanh") return std::nullopt;
    return native_activation_backward(
        approximate == "tanh" ? BinaryOp::kGeluTanhBackward : BinaryOp::kGeluBackward, grad,
        self);
  }
};
template <>
struct NativeKernel<at::_ops::silu> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) { return native_silu(self); }
};
template <>
struct NativeKernel<at::_ops::silu_backward> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad, const at::Tensor& self) {
    return native_activation_backward(BinaryOp::kSiluBackward, grad, self);
  }
};
template <>
struct NativeKernel<at::_ops::relu> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) { return native_relu(self); }
};
template <>
struct NativeKernel<at::_ops::threshold_backward> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad, const at::Tensor& self,
                                        const at::Scalar& threshold) {
    return native_threshold_backward(grad, self, threshold);
  }
};
template <>
struct NativeKernel<at::_ops::rsqrt> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) { return native_rsqrt(self); }
};
template <>
struct NativeKernel<at::_ops::neg> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) { return native_neg(self); }
};
template <>
struct NativeKernel<at::_ops::arange_start_out> {
  static constexpr bool exists = true;
  static bool call(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                   at::Tensor& out) {
    return native_arange_out(start, end, step, out);
  }
};
template <>
struct NativeKernel<at::_ops::sqrt> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) { return native_sqrt(self); }
};

template <>
struct NativeKernel<at::_ops::native_dropout_backward> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad, const at::Tensor& mask,
                                        double scale) {
    return native_dropout_grad(grad, mask, scale);
  }
};
template <>
struct NativeKernel<at::_ops::pow_Tensor_Scalar> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, const at::Scalar& exponent) {
    return native_pow(self, exponent);
  }
};

template <>
struct NativeKernel<at::_ops::cat> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::ITensorListRef& tensors, int64_t dim) {
    return native_cat(tensors, dim);
  }
};

template <BinaryOp kOp>
struct NativeMathKernel {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) { return native_math(kOp, self); }
};
template <>
struct NativeKernel<at::_ops::sin> : NativeMathKernel<BinaryOp::kSin> {};
template <>
struct NativeKernel<at::_ops::cos> : NativeMathKernel<BinaryOp::kCos> {};
template <>
struct NativeKernel<at::_ops::exp> : NativeMathKernel<BinaryOp::kExp> {};
template <>
struct NativeKernel<at::_ops::log> : NativeMathKernel<BinaryOp::kLog> {};
template <>
struct NativeKernel<at::_ops::sigmoid> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) { return native_sigmoid(self); }
};
template <>
struct NativeKernel<at::_ops::sigmoid_backward> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad, const at::Tensor& output) {
    return native_sigmoid_backward(grad, output);
  }
};
template <>
struct NativeKernel<at::_ops::abs_out> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, const at::Tensor& out) {
    return native_abs_out(self, out);
  }
};
template <>
struct NativeKernel<at::_ops::clamp> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self,
                                        const std::optional<at::Scalar>& min,
                                        const std::optional<at::Scalar>& max) {
    return native_clamp(self, min, max);
  }
};
template <>
struct NativeKernel<at::_ops::clamp_min> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, const at::Scalar& min) {
    return native_clamp(self, min, std::nullopt);
  }
};
template <>
struct NativeKernel<at::_ops::clamp_max> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, const at::Scalar& max) {
    return native_clamp(self, std::nullopt, max);
  }
};
template <>
struct NativeKernel<at::_ops::tanh> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) { return native_tanh(self); }
};
template <>
struct NativeKernel<at::_ops::tanh_backward> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad, const at::Tensor& output) {
    return native_tanh_backward(grad, output);
  }
};
template <>
struct NativeKernel<at::_ops::isneginf> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) { return native_isneginf(self); }
};
template <>
struct NativeKernel<at::_ops::where_self> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& condition, const at::Tensor& self,
                                        const at::Tensor& other) {
    return native_where(condition, self, other);
  }
};
template <>
struct NativeKernel<at::_ops::where_self_out> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other,
                   at::Tensor& out) {
    return native_where_out(condition, self, other, out);
  }
};
template <>
struct NativeKernel<at::_ops::masked_fill__Scalar> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
    return native_masked_fill_(self, mask, value);
  }
};
template <>
struct NativeKernel<at::_ops::tril> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, c10::SymInt diagonal) {
    const std::optional<int64_t> value = diagonal.maybe_as_int();
    if (!value) return std::nullopt;
    return native_triangle(self, *value, /*lower=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::triu> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, c10::SymInt diagonal) {
    const std::optional<int64_t> value = diagonal.maybe_as_int();
    if (!value) return std::nullopt;
    return native_triangle(self, *value, /*lower=*/false);
  }
};
template <>
struct NativeKernel<at::_ops::index_Tensor> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self,
                                        const c10::List<std::optional<at::Tensor>>& indices) {
    return native_index(self, indices);
  }
};
template <>
struct NativeKernel<at::_ops::index_select> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, int64_t dim,
                                        const at::Tensor& index) {
    return native_index_select(self, dim, index);
  }
};
template <>
struct NativeKernel<at::_ops::embedding_dense_backward> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad, const at::Tensor& indices,
                                        c10::SymInt num_weights, c10::SymInt padding_idx,
                                        bool scale_grad_by_freq) {
    const std::optional<int64_t> weights = num_weights.maybe_as_int();
    const std::optional<int64_t> padding = padding_idx.maybe_as_int();
    if (!weights || !padding) return std::nullopt;
    return native_embedding_backward(grad, indices, *weights, *padding, scale_grad_by_freq);
  }
};
template <>
struct NativeKernel<at::_ops::gather> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, int64_t dim,
                                        const at::Tensor& index, bool /*sparse_grad: backward*/) {
    return native_gather(self, dim, index);
  }
};
template <>
struct NativeKernel<at::_ops::scatter_src> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, int64_t dim,
                                        const at::Tensor& index, const at::Tensor& src) {
    return native_scatter(self, dim, index, src);
  }
};
template <>
struct NativeKernel<at::_ops::scatter_value> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, int64_t dim,
                                        const at::Tensor& index, const at::Scalar& value) {
    return native_scatter(self, dim, index, value);
  }
};
template <>
struct NativeKernel<at::_ops::scatter_add> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, int64_t dim,
                                        const at::Tensor& index, const at::Tensor& src) {
    return native_scatter_add(self, dim, index, src);
  }
};
template <>
struct NativeKernel<at::_ops::scatter__src> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                   const at::Tensor& src) {
    return native_scatter_(self, dim, index, src);
  }
};
template <>
struct NativeKernel<at::_ops::scatter__value> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                   const at::Scalar& value) {
    return native_scatter_(self, dim, index, value);
  }
};
template <>
struct NativeKernel<at::_ops::scatter_add_> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                   const at::Tensor& src) {
    return native_scatter_add_(self, dim, index, src);
  }
};
template <>
struct NativeKernel<at::_ops::mm_out> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& out) {
    return native_mm_out(self, mat2, out);
  }
};
template <>
struct NativeKernel<at::_ops::index_add> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, int64_t dim,
                                        const at::Tensor& index, const at::Tensor& source,
                                        const at::Scalar& alpha) {
    return native_index_add(self, dim, index, source, alpha);
  }
};
template <>
struct NativeKernel<at::_ops::index_add_> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                   const at::Tensor& source, const at::Scalar& alpha) {
    return native_index_add_(self, dim, index, source, alpha);
  }
};
template <>
struct NativeKernel<at::_ops::nll_loss_forward> {
  static constexpr bool exists = true;
  static std::optional<std::tuple<at::Tensor, at::Tensor>> call(
      const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
      int64_t reduction, c10::SymInt ignore_index) {
    return native_nll_loss(self, target, weight, reduction, ignore_index);
  }
};
template <>
struct NativeKernel<at::_ops::nll_loss_backward> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad_output, const at::Tensor& self,
                                        const at::Tensor& target,
                                        const std::optional<at::Tensor>& weight,
                                        int64_t reduction, c10::SymInt ignore_index,
                                        const at::Tensor& total_weight) {
    return native_nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index,
                                    total_weight);
  }
};
template <>
struct NativeKernel<at::_ops::native_layer_norm> {
  static constexpr bool exists = true;
  static std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> call(
      const at::Tensor& input, c10::SymIntArrayRef normalized,
      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
      double eps) {
    return native_layer_norm(input, normalized, weight, bias, eps);
  }
};
template <>
struct NativeKernel<at::_ops::native_layer_norm_backward> {
  static constexpr bool exists = true;
  static std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> call(
      const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized,
      const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
      const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
    return native_layer_norm_backward(grad_out, input, normalized, mean, rstd, weight, bias,
                                      output_mask);
  }
};
template <>
struct NativeKernel<at::_ops::native_batch_norm> {
  static constexpr bool exists = true;
  static std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> call(
      const at::Tensor& input, const std::optional<at::Tensor>& weight,
      const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
      const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
    return torch_adapter::native_batch_norm(input, weight, bias, running_mean, running_var,
                                            training, momentum, eps);
  }
};
template <>
struct NativeKernel<at::_ops::native_batch_norm_backward> {
  static constexpr bool exists = true;
  static std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> call(
      const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
      const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
      const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd,
      bool train, double eps, std::array<bool, 3> output_mask) {
    return torch_adapter::native_batch_norm_backward(grad_out, input, weight, running_mean,
                                                     running_var, save_mean, save_invstd, train,
                                                     eps, output_mask);
  }
};
template <>
struct NativeKernel<at::_ops::native_group_norm> {
  static constexpr bool exists = true;
  static std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> call(
      const at::Tensor& input, const std::optional<at::Tensor>& weight,
      const std::optional<at::Tensor>& bias, c10::SymInt n, c10::SymInt c, c10::SymInt hw,
      int64_t groups, double eps) {
    return torch_adapter::native_group_norm(input, weight, bias, std::move(n), std::move(c),
                                            std::move(hw), groups, eps);
  }
};
template <>
struct NativeKernel<at::_ops::native_group_norm_backward> {
  static constexpr bool exists = true;
  static std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> call(
      const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
      const at::Tensor& rstd, const std::optional<at::Tensor>& weight, c10::SymInt n,
      c10::SymInt c, c10::SymInt hw, int64_t groups, std::array<bool, 3> output_mask) {
    return torch_adapter::native_group_norm_backward(grad_out, input, mean, rstd, weight,
                                                     std::move(n), std::move(c), std::move(hw),
                                                     groups, output_mask);
  }
};
template <>
struct NativeKernel<at::_ops::mm> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, const at::Tensor& mat2) {
    return native_mm(self, mat2);
  }
};
template <>
struct NativeKernel<at::_ops::bmm> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, const at::Tensor& mat2) {
    return native_bmm(self, mat2);
  }
};
template <>
struct NativeKernel<at::_ops::addmm> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, const at::Tensor& mat1,
                                        const at::Tensor& mat2, const at::Scalar& beta,
                                        const at::Scalar& alpha) {
    return native_addmm(self, mat1, mat2, beta, alpha);
  }
};

// The random fills (native_random.cc): in place, so call() says whether it took the call.
template <>
struct NativeKernel<at::_ops::uniform_> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, double from, double to,
                   const std::optional<at::Generator>& generator) {
    return native_uniform_(self, from, to, generator);
  }
};
template <>
struct NativeKernel<at::_ops::normal_> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, double mean, double std,
                   const std::optional<at::Generator>& generator) {
    return native_normal_(self, mean, std, generator);
  }
};
template <>
struct NativeKernel<at::_ops::bernoulli__float> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, double p,
                   const std::optional<at::Generator>& generator) {
    return native_bernoulli_(self, p, generator);
  }
};
template <>
struct NativeKernel<at::_ops::random_> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, const std::optional<at::Generator>& generator) {
    return native_random_(self, std::nullopt, std::nullopt, generator);
  }
};
template <>
struct NativeKernel<at::_ops::random__to> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, int64_t to,
                   const std::optional<at::Generator>& generator) {
    return native_random_(self, 0, to, generator);
  }
};
template <>
struct NativeKernel<at::_ops::random__from> {
  static constexpr bool exists = true;
  static bool call(const at::Tensor& self, int64_t from, std::optional<int64_t> to,
                   const std::optional<at::Generator>& generator) {
    return native_random_(self, from, to, generator);
  }
};

// Pooling (native_pool.cc).
template <>
struct NativeKernel<at::_ops::max_pool2d_with_indices> {
  static constexpr bool exists = true;
  static std::optional<std::tuple<at::Tensor, at::Tensor>> call(
      const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
      at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
    return native_max_pool2d_with_indices(self, kernel_size, stride, padding, dilation,
                                          ceil_mode);
  }
};
template <>
struct NativeKernel<at::_ops::max_pool2d_with_indices_backward> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad_output, const at::Tensor& self,
                                        at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                        at::IntArrayRef padding, at::IntArrayRef dilation,
                                        bool ceil_mode, const at::Tensor& indices) {
    return native_max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride,
                                                   padding, dilation, ceil_mode, indices);
  }
};
template <>
struct NativeKernel<at::_ops::avg_pool2d> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, at::IntArrayRef kernel_size,
                                        at::IntArrayRef stride, at::IntArrayRef padding,
                                        bool ceil_mode, bool count_include_pad,
                                        std::optional<int64_t> divisor_override) {
    return native_avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                             divisor_override);
  }
};
template <>
struct NativeKernel<at::_ops::avg_pool2d_backward> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad_output, const at::Tensor& self,
                                        at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                        at::IntArrayRef padding, bool ceil_mode,
                                        bool count_include_pad,
                                        std::optional<int64_t> divisor_override) {
    return native_avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
                                      count_include_pad, divisor_override);
  }
};
template <>
struct NativeKernel<at::_ops::_adaptive_avg_pool2d> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, c10::SymIntArrayRef output_size) {
    return native_adaptive_avg_pool2d(self, output_size);
  }
};
template <>
struct NativeKernel<at::_ops::_adaptive_avg_pool2d_backward> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad_output, const at::Tensor& self) {
    return native_adaptive_avg_pool2d_backward(grad_output, self);
  }
};

}  // namespace oclvm::torch_adapter
