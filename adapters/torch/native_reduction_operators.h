// adapters/torch/native_reduction_operators.h — which torch reduction each native function
// answers (sums, means, all and any, softmax, the extremes, the moments, vector norms): the
// NativeKernel<Op> specialisations of native_operators.h for native_reduce.cc's and
// native_composite.cc's reductions, tried by the unboxed kernels' templates (host_kernels.cc).
//
// Thread-safety: any thread, as the functions they call.
#pragma once

#include <ATen/Operators.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

#include "adapters/torch/native_kernels.h"
#include "adapters/torch/native_operators.h"

namespace oclvm::torch_adapter {

template <bool kRoot>
struct NativeMomentsWithMean {
  static constexpr bool exists = true;
  static std::optional<std::tuple<at::Tensor, at::Tensor>> call(
      const at::Tensor& self, at::OptionalIntArrayRef dim,
      const std::optional<at::Scalar>& correction, bool keepdim) {
    return native_moments(self, dim, correction, keepdim, kRoot, /*with_mean=*/true);
  }
};
template <bool kRoot>
struct NativeMoments {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                        const std::optional<at::Scalar>& correction,
                                        bool keepdim) {
    auto result = native_moments(self, dim, correction, keepdim, kRoot, /*with_mean=*/false);
    if (!result) return std::nullopt;
    return std::get<0>(std::move(*result));
  }
};
template <>
struct NativeKernel<at::_ops::all_dim> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, int64_t dim, bool keepdim) {
    return native_all_or_any(self, dim, keepdim, /*any=*/false);
  }
};
template <>
struct NativeKernel<at::_ops::any_dim> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, int64_t dim, bool keepdim) {
    return native_all_or_any(self, dim, keepdim, /*any=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::all> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) {
    return native_all_or_any(self, std::nullopt, /*keepdim=*/false, /*any=*/false);
  }
};
template <>
struct NativeKernel<at::_ops::any> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) {
    return native_all_or_any(self, std::nullopt, /*keepdim=*/false, /*any=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::_softmax> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, int64_t dim, bool half_to_float) {
    return native_softmax(self, dim, half_to_float);
  }
};
template <>
struct NativeKernel<at::_ops::_softmax_backward_data> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad, const at::Tensor& output,
                                        int64_t dim, at::ScalarType input_dtype) {
    return native_softmax_backward(grad, output, dim, input_dtype);
  }
};
template <>
struct NativeKernel<at::_ops::_log_softmax> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, int64_t dim, bool half_to_float) {
    return native_softmax(self, dim, half_to_float, /*log=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::_log_softmax_backward_data> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& grad, const at::Tensor& output,
                                        int64_t dim, at::ScalarType input_dtype) {
    return native_softmax_backward(grad, output, dim, input_dtype, /*log=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::sum_dim_IntList> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                        bool keepdim, std::optional<at::ScalarType> dtype) {
    return native_sum(self, dim, keepdim, dtype);
  }
};
template <>
struct NativeKernel<at::_ops::amax> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, at::IntArrayRef dim,
                                        bool keepdim) {
    return native_amax(self, dim, keepdim, /*max=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::amin> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, at::IntArrayRef dim,
                                        bool keepdim) {
    return native_amax(self, dim, keepdim, /*max=*/false);
  }
};
template <>
struct NativeKernel<at::_ops::max_dim> {
  static constexpr bool exists = true;
  static std::optional<std::tuple<at::Tensor, at::Tensor>> call(const at::Tensor& self,
                                                                int64_t dim, bool keepdim) {
    return native_max_dim(self, dim, keepdim, /*max=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::min_dim> {
  static constexpr bool exists = true;
  static std::optional<std::tuple<at::Tensor, at::Tensor>> call(const at::Tensor& self,
                                                                int64_t dim, bool keepdim) {
    return native_max_dim(self, dim, keepdim, /*max=*/false);
  }
};
template <>
struct NativeKernel<at::_ops::argmax> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, std::optional<int64_t> dim,
                                        bool keepdim) {
    return native_argmax(self, dim, keepdim, /*max=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::argmin> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, std::optional<int64_t> dim,
                                        bool keepdim) {
    return native_argmax(self, dim, keepdim, /*max=*/false);
  }
};
template <>
struct NativeKernel<at::_ops::max> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) {
    return native_max_all(self, /*max=*/true);
  }
};
template <>
struct NativeKernel<at::_ops::min> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self) {
    return native_max_all(self, /*max=*/false);
  }
};
template <>
struct NativeKernel<at::_ops::var_correction> : NativeMoments<false> {};
template <>
struct NativeKernel<at::_ops::std_correction> : NativeMoments<true> {};
template <>
struct NativeKernel<at::_ops::var_mean_correction> : NativeMomentsWithMean<false> {};
template <>
struct NativeKernel<at::_ops::std_mean_correction> : NativeMomentsWithMean<true> {};
template <>
struct NativeKernel<at::_ops::linalg_vector_norm> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, const at::Scalar& ord,
                                        at::OptionalIntArrayRef dim, bool keepdim,
                                        std::optional<at::ScalarType> dtype) {
    return native_vector_norm(self, ord, dim, keepdim, dtype);
  }
};
template <>
struct NativeKernel<at::_ops::mean_dim> {
  static constexpr bool exists = true;
  static std::optional<at::Tensor> call(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                        bool keepdim, std::optional<at::ScalarType> dtype) {
    return native_mean(self, dim, keepdim, dtype);
  }
};

}  // namespace oclvm::torch_adapter
