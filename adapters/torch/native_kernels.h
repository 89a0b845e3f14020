// adapters/torch/native_kernels.h — operators computed by OpenCL kernels on the device (the
// native path), on devices that take it (native_kernels() in device.h).
//
// Each function here runs an operator as LaunchKernel instructions (native_kernels.cc: elementwise
// arithmetic, activations, where, copies and pow; native_composite.cc: cat, the _foreach_ loops,
// mean, arange, tril and triu; native_index.cc: index_select, advanced indexing by index tensors
// and embedding's backward; native_scatter.cc: gather, the scatters and index_add;
// native_loss.cc: nll_loss; native_reduce.cc: sums, all and softmax; native_statistics.cc:
// extremes, moments and vector norms; native_norm.cc: layer norm;
// native_channel_norm.cc: batch and group norm; native_pool.cc: pooling; native_random.cc:
// random fills and dropout) or NativeCalls of CLBlast's
// (native_blas.cc: the matrix products; native_conv.cc: convolutions, with im2col and col2im
// kernels), through the adapter's Runtime, on the current stream of the operands' device, or
// answers that it does not take the call (nullopt / false) having done nothing, and the caller
// goes on to the host kernel or the CPU fallback: the values and errors of those calls stay the
// CPU's. Each file's Note says which calls it takes. native_operators.h says which torch operator
// each function answers.
//
// Thread-safety: any thread, as every operator; the compiled kernels are shared under a mutex and
// the VM orders the device work.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

namespace oclvm::torch_adapter {

// kCopy: out = self, the element's bits moved unchanged (native_copy; `other` is unused).
// kTanh: out = tanh(self) (`other` is unused); kTanhBackward: out = self * (1 - other * other),
// the gradient through tanh from its output `other`. kWhere: out = condition ? self : other, and
// kWhereNot: out = condition ? other : self, of a third input, a bool condition (native_where).
// kIsNegInf: out = self == -inf, a bool (`other` is unused). kAddcmul: out = self + alpha * other *
// third, and kAddcdiv: out = self + alpha * other / third, of a third input; kLerp: out = self +
// alpha * (other - self), from the nearer end as the CPU's vectorised kernel; kSqrt: out =
// sqrt(self), kRsqrt: out = 1 / sqrt(self), kNeg: out = -self, and the activations kGelu (erf's),
// kGeluTanh (tanh's approximation) and kSilu (`other` is unused). Their backward ops take the
// output's gradient as self and the activation's input as other. kRelu: out = max(self, 0) (NaN
// and -0.0 kept); kThresholdBackward: out = self <= alpha ? 0 : other, self the forward's input
// and other the gradient. kEq, kNe, kLt, kLe, kGt and kGe compare in the promoted dtype and give
// a bool result; kBitwiseAnd, kBitwiseOr and kBitwiseXor take integers and bools; kMinimum and
// kMaximum propagate NaN, as torch.minimum and torch.maximum. kSin, kCos, kExp and kLog: OpenCL's
// functions of self (`other` is unused).
enum class BinaryOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kCopy,
  kTanh,
  kTanhBackward,
  kWhere,
  kWhereNot,
  kIsNegInf,
  kAddcmul,
  kAddcdiv,
  kLerp,
  kSqrt,
  kRsqrt,
  kNeg,
  kGelu,
  kGeluTanh,
  kSilu,
  kGeluBackward,
  kGeluTanhBackward,
  kSiluBackward,
  kRelu,
  kThresholdBackward,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kBitwiseAnd,
  kBitwiseOr,
  kBitwiseXor,
  kMinimum,
  kMaximum,
  kSin,
  kCos,
  kExp,
  kLog,
  kSigmoid,
  kSigmoidBackward,  // x the gradient, y the forward's output
  kAbs,
  kClamp,     // y the lower bound, alpha the upper
  kClampMin,  // y the bound
  kClampMax,
};

// Whether `op` compares (kEq ... kGe: a bool result).
inline bool compares(BinaryOp op) { return op >= BinaryOp::kEq && op <= BinaryOp::kGe; }

// self (op) other for an op other than kCopy, `alpha` scaling other for kAdd and kSub (1 for the
// others), as the functional operator (add.Tensor, eq.Tensor, ...; a number as `other` arrives as
// a wrapped 0-dim CPU tensor); nullopt when the native path does not take the call.
std::optional<at::Tensor> native_binary(BinaryOp op, const at::Tensor& self,
                                        const at::Tensor& other, const at::Scalar& alpha);
// The in-place form (add_.Tensor, ...): writes self; false when the native path does not take it.
bool native_binary_(BinaryOp op, const at::Tensor& self, const at::Tensor& other,
                    const at::Scalar& alpha);

// The in-place _foreach_ forms of kAdd, kMul and kDiv, as the CPU runs them: tensor by tensor in
// list order, self[i] (op)= others[i] (alpha scaling it, for kAdd), or a number: scalars[0] for
// every tensor (`one_scalar`) or scalars[i]; each tensor's call is one launch, or the device's
// kernel of its in-place operator where the native path does not take it. Counts the call as
// native when every tensor's was. False, having done nothing, for a list not all on one
// native-path device, or lists of different lengths (the CPU's error).
bool native_foreach_(BinaryOp op, at::TensorList self, at::TensorList others,
                     at::ArrayRef<at::Scalar> scalars, bool one_scalar,
                     const at::Scalar& alpha);

// self.addcmul_(first, *second, value), self.addcdiv_(first, *second, value) or
// self.lerp_(first, value) (second nullptr) for kAddcmul, kAddcdiv and kLerp: one launch, self a
// floating device tensor (float32, float64, float16, bfloat16), the inputs of its device and dtype
// broadcasting to it; false, having done nothing, when the native path does not take the call.
bool native_pointwise_(BinaryOp op, const at::Tensor& self, const at::Tensor& first,
                       const at::Tensor* second, const at::Scalar& value);
// Below, a floating tensor is one of float32, float64, float16 or bfloat16 (the last two computed
// in float and rounded once: Note [Native elementwise kernels]).
// sqrt of a floating tensor (correctly rounded, as the CPU's): one launch; nullopt
// for other calls.
std::optional<at::Tensor> native_sqrt(const at::Tensor& self);
// sin, cos, exp and log (kSin ... kLog) of a floating tensor: OpenCL's functions, within
// their few ulps of the CPU's; one launch; nullopt for other calls.
std::optional<at::Tensor> native_math(BinaryOp op, const at::Tensor& self);
// rsqrt of a floating tensor (1 / sqrt(x), each correctly rounded) and neg of any
// dtype the kernels compute in (integers wrap): one launch each; nullopt for other calls.
std::optional<at::Tensor> native_rsqrt(const at::Tensor& self);
std::optional<at::Tensor> native_neg(const at::Tensor& self);
// gelu (approximate "none" or "tanh") and silu of a floating tensor, and their backward
// (op kGeluBackward, kGeluTanhBackward or kSiluBackward) of two such device tensors, as the CPU's
// vectorised kernels compute them (OpenCL's erf, tanh and exp, within a few ulps of the CPU's):
// one launch each; nullopt when the native path does not take the call.
std::optional<at::Tensor> native_gelu(const at::Tensor& self, c10::string_view approximate);
std::optional<at::Tensor> native_silu(const at::Tensor& self);
std::optional<at::Tensor> native_activation_backward(BinaryOp op, const at::Tensor& grad,
                                                     const at::Tensor& self);
// relu of any dtype the kernels compute in, and threshold_backward(grad, self, threshold) of two
// device tensors of one such dtype: one launch each; nullopt for other calls.
std::optional<at::Tensor> native_relu(const at::Tensor& self);
std::optional<at::Tensor> native_threshold_backward(const at::Tensor& grad,
                                                    const at::Tensor& self,
                                                    const at::Scalar& threshold);
// mean.dim of a floating tensor as the CPU computes it: native_sum, then one division by the
// number of elements summed (for float16 and bfloat16 the sum and the division in float32, then
// one conversion); nullopt when the native path does not take the call.
std::optional<at::Tensor> native_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                      bool keepdim, std::optional<at::ScalarType> dtype);
// arange.start_out of integers into an int64 or int32 device tensor: resized as the CPU's
// (without a warning), then one launch; false, having done nothing, for floating ranges, the
// CPU's errors and ranges near int64's limits.
bool native_arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                       const at::Tensor& out);

// The _foreach_ forms of native_pointwise_ (second unused for kLerp) and of sqrt, as
// native_foreach_ runs its operators: tensor by tensor, each one launch or its own operator.
bool native_foreach_pointwise_(BinaryOp op, at::TensorList self, at::TensorList first,
                               at::TensorList second, at::ArrayRef<at::Scalar> scalars,
                               bool one_scalar);
std::optional<std::vector<at::Tensor>> native_foreach_sqrt(at::TensorList self);

// native_dropout_backward: grad * mask * scale, the CPU kernel's two products, each a launch;
// nullopt when the native path does not take the first.
std::optional<at::Tensor> native_dropout_grad(const at::Tensor& grad, const at::Tensor& mask,
                                              double scale);
// pow.Tensor_Scalar for a float32 or float64 self and an exponent of 2 or 3: the CPU kernel's
// products (self * self, then * self), each a launch; of 1: a copy of self, as the CPU's; nullopt
// for any other call.
std::optional<at::Tensor> native_pow(const at::Tensor& self, const at::Scalar& exponent);

// dst := src for device tensors of one native-path device with the same conjugate and negative
// bits, src broadcast to dst's shape, any strides: one launch, moving each element's bits for one
// dtype (of 1, 2, 4 or 8 bytes), converting as the CPU converts between two real dtypes. False,
// having done nothing, for any other copy (complex conversions), for a dst whose elements share
// memory, and for src and dst of one storage.
bool native_copy(const at::Tensor& src, const at::Tensor& dst);

// cat of device tensors of one native-path device and one dtype, without conjugate or negative
// bits: the CPU's result (its shape and layout), each input written by one strided copy; nullopt
// for any other call (promotion, mixed devices, the CPU's errors).
std::optional<at::Tensor> native_cat(const at::ITensorListRef& tensors, int64_t dim);

// mm, bmm and addmm as one CLBlast product each (Note [Native matrix products] in
// native_blas.cc); nullopt when the native path does not take the call.
std::optional<at::Tensor> native_mm(const at::Tensor& self, const at::Tensor& mat2);
std::optional<at::Tensor> native_bmm(const at::Tensor& self, const at::Tensor& mat2);
// mm.out into `out` of the product's shape, dtype and device, sharing no memory with the
// operands; false, having done nothing, otherwise (the CPU's resizing and errors).
bool native_mm_out(const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& out);
std::optional<at::Tensor> native_addmm(const at::Tensor& self, const at::Tensor& mat1,
                                       const at::Tensor& mat2, const at::Scalar& beta,
                                       const at::Scalar& alpha);

// native_batch_norm, native_group_norm and their backward (Note [Native batch and group norm] in
// native_channel_norm.cc); nullopt when the native path does not take the call. The batch norm
// writes the running statistics in training, as the CPU's kernel does.
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps);
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd,
    bool train, double eps, std::array<bool, 3> output_mask);
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_group_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, c10::SymInt n, c10::SymInt c, c10::SymInt hw,
    int64_t groups, double eps);
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, c10::SymInt n, c10::SymInt c,
    c10::SymInt hw, int64_t groups, std::array<bool, 3> output_mask);

// convolution and convolution_backward of one or two spatial dimensions as im2col / col2im
// kernels around CLBlast products (Note [Native convolutions] in native_conv.cc); the results are
// contiguous, and the caller lays them out. nullopt when the native path does not take the call.
std::optional<at::Tensor> native_convolution(const at::Tensor& input, const at::Tensor& weight,
                                             const std::optional<at::Tensor>& bias,
                                             at::IntArrayRef stride, at::IntArrayRef padding,
                                             at::IntArrayRef dilation, bool transposed,
                                             int64_t groups);
// (grad_input, grad_weight, grad_bias), each undefined where output_mask says it is not wanted.
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    int64_t groups, std::array<bool, 3> output_mask);

// tanh of a floating tensor, and tanh_backward(grad, output) of two such device
// tensors: one launch each; nullopt when the native path does not take the call.
std::optional<at::Tensor> native_tanh(const at::Tensor& self);
std::optional<at::Tensor> native_tanh_backward(const at::Tensor& grad, const at::Tensor& output);

// isneginf of a floating tensor: one launch; nullopt for other calls.
std::optional<at::Tensor> native_isneginf(const at::Tensor& self);
// where.self of a bool condition on a native-path device, self and other on its device or CPU
// scalars (not both), with torch's type promotion and the CPU's layout: one launch; nullopt when
// the native path does not take the call.
std::optional<at::Tensor> native_where(const at::Tensor& condition, const at::Tensor& self,
                                       const at::Tensor& other);
// where.self_out into `out`: as native_where, `out` of the result's dtype, not sharing memory
// with the inputs, of the result's shape or empty (resized and laid out as the CPU's); false,
// having done nothing, when the native path does not take the call.
bool native_where_out(const at::Tensor& condition, const at::Tensor& self,
                      const at::Tensor& other, const at::Tensor& out);
// masked_fill_.Scalar of a device tensor by a bool mask on its device that broadcasts to self's
// shape: where(mask, value, self) into self, one launch; false, having done nothing, otherwise.
bool native_masked_fill_(const at::Tensor& self, const at::Tensor& mask, const at::Scalar& value);
// tril and triu of a device tensor of two or more dimensions, any dtype the kernels read: one
// launch each; nullopt when the native path does not take the call.
std::optional<at::Tensor> native_triangle(const at::Tensor& self, int64_t diagonal, bool lower);
// index_select of a device tensor by int64 or int32 indices on its device: one launch, each index
// checked on the device (an index out of range is thrown by the next sync point, Note [Native
// index_select] in native_index.cc); nullopt when the native path does not take the call.
std::optional<at::Tensor> native_index_select(const at::Tensor& self, int64_t dim,
                                              const at::Tensor& index);
// index.Tensor with one int64 or int32 index tensor and every other entry absent: index_select's
// kernel over the flattened index, negative indices counting from the end (Note [Native advanced
// indexing] in native_index.cc); nullopt when the native path does not take the call.
std::optional<at::Tensor> native_index(const at::Tensor& self,
                                       const c10::List<std::optional<at::Tensor>>& indices);
// embedding_dense_backward of a float32 or float64 gradient, without scale_grad_by_freq: four
// launches, the CPU's sums (Note [Native embedding backward] in native_index.cc); nullopt when the
// native path does not take the call.
std::optional<at::Tensor> native_embedding_backward(const at::Tensor& grad,
                                                    const at::Tensor& indices, int64_t num_weights,
                                                    int64_t padding_idx, bool scale_grad_by_freq);
// gather, scatter (of a tensor or a value) and scatter_add of device tensors with int64 or int32
// indices on their device, and the scatters in place: one launch each, after a copy of self for the
// out-of-place scatters; each index checked on the device, each result element written in the
// CPU's order (Note [Native gather and scatter] in native_scatter.cc). nullopt, or false having
// done nothing, when the native path does not take the call.
std::optional<at::Tensor> native_gather(const at::Tensor& self, int64_t dim,
                                        const at::Tensor& index);
std::optional<at::Tensor> native_scatter(const at::Tensor& self, int64_t dim,
                                         const at::Tensor& index, const at::Tensor& src);
std::optional<at::Tensor> native_scatter(const at::Tensor& self, int64_t dim,
                                         const at::Tensor& index, const at::Scalar& value);
std::optional<at::Tensor> native_scatter_add(const at::Tensor& self, int64_t dim,
                                             const at::Tensor& index, const at::Tensor& src);
bool native_scatter_(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                     const at::Tensor& src);
bool native_scatter_(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                     const at::Scalar& value);
bool native_scatter_add_(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const at::Tensor& src);
// index_add and index_add_ with alpha 1: a scatter_add of source's columns along `dim`.
std::optional<at::Tensor> native_index_add(const at::Tensor& self, int64_t dim,
                                           const at::Tensor& index, const at::Tensor& source,
                                           const at::Scalar& alpha);
bool native_index_add_(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       const at::Tensor& source, const at::Scalar& alpha);
// nll_loss_forward and nll_loss_backward of float32 and float64 inputs with int64 targets: one
// launch each, each target checked on the device (Note [Native nll_loss] in native_loss.cc);
// nullopt when the native path does not take the call.
std::optional<std::tuple<at::Tensor, at::Tensor>> native_nll_loss(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, const c10::SymInt& ignore_index);
std::optional<at::Tensor> native_nll_loss_backward(const at::Tensor& grad_output,
                                                   const at::Tensor& self,
                                                   const at::Tensor& target,
                                                   const std::optional<at::Tensor>& weight,
                                                   int64_t reduction,
                                                   const c10::SymInt& ignore_index,
                                                   const at::Tensor& total_weight);
// all and any of a device tensor, over `dim` (all.dim, any.dim) or every element (all, any):
// the CPU's dtype (bool, uint8 for uint8) and shape, one launch (Note [Native sums] in
// native_reduce.cc); nullopt when the native path does not take the call.
std::optional<at::Tensor> native_all_or_any(const at::Tensor& self, std::optional<int64_t> dim,
                                             bool keepdim, bool any);

// _softmax (without half_to_float) and _softmax_backward_data of floating tensors over
// one dimension, or with `log` _log_softmax and _log_softmax_backward_data: one launch each, one
// row per work-item (Note [Native sums] in native_reduce.cc); nullopt when the native path does
// not take the call.
std::optional<at::Tensor> native_softmax(const at::Tensor& self, int64_t dim, bool half_to_float,
                                         bool log = false);
std::optional<at::Tensor> native_softmax_backward(const at::Tensor& grad,
                                                  const at::Tensor& output, int64_t dim,
                                                  at::ScalarType input_dtype, bool log = false);

// native_layer_norm and native_layer_norm_backward of float32 or float64 tensors (Note [Native
// layer norm] in native_norm.cc); nullopt when the native path does not take the call.
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_layer_norm(
    const at::Tensor& input, c10::SymIntArrayRef normalized,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps);
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask);

// max_pool2d_with_indices, avg_pool2d and _adaptive_avg_pool2d and their backward of float32 or
// float64 3-d and 4-d tensors: one launch each (Note [Native pooling] in native_pool.cc); nullopt
// when the native path does not take the call.
std::optional<std::tuple<at::Tensor, at::Tensor>> native_max_pool2d_with_indices(
    const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode);
std::optional<at::Tensor> native_max_pool2d_with_indices_backward(
    const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
    const at::Tensor& indices);
std::optional<at::Tensor> native_avg_pool2d(const at::Tensor& self, at::IntArrayRef kernel_size,
                                            at::IntArrayRef stride, at::IntArrayRef padding,
                                            bool ceil_mode, bool count_include_pad,
                                            std::optional<int64_t> divisor_override);
std::optional<at::Tensor> native_avg_pool2d_backward(
    const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
    at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
    std::optional<int64_t> divisor_override);
std::optional<at::Tensor> native_adaptive_avg_pool2d(const at::Tensor& self,
                                                     c10::SymIntArrayRef output_size);
std::optional<at::Tensor> native_adaptive_avg_pool2d_backward(const at::Tensor& grad_output,
                                                              const at::Tensor& self);

// Random fills on the device from the generator's Philox stream (Note [Native random numbers]
// in native_random.cc), one launch each (and a copy for a result that is not contiguous):
// uniform_, normal_, bernoulli_.float and random_ (random_() without `from`, random_.to without
// `from`, random_.from with both or `from` alone); false, having done nothing and drawn nothing,
// when the native path does not take the call.
bool native_uniform_(const at::Tensor& self, double from, double to,
                     const std::optional<at::Generator>& generator);
bool native_normal_(const at::Tensor& self, double mean, double std,
                    const std::optional<at::Generator>& generator);
bool native_bernoulli_(const at::Tensor& self, double p,
                       const std::optional<at::Generator>& generator);
bool native_random_(const at::Tensor& self, std::optional<int64_t> from,
                    std::optional<int64_t> to, const std::optional<at::Generator>& generator);
// native_dropout in training of a contiguous input, from the device's default generator: the
// output and the bool mask, one launch; nullopt when the native path does not take the call.
std::optional<std::tuple<at::Tensor, at::Tensor>> native_dropout_on_device(
    const at::Tensor& input, double p);

// Whether the module was built with CLBlast: without it the three above always decline.
bool native_matrix_products();

// sum.dim_IntList as one generated kernel (Note [Native sums] in native_reduce.cc); nullopt when
// the native path does not take the call.
std::optional<at::Tensor> native_sum(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                     bool keepdim, std::optional<at::ScalarType> dtype);

// The extreme reductions (Note [Native extremes] in native_statistics.cc), `max` choosing the
// maximum or the minimum, each one launch; nullopt when the native path does not take the call:
// amax or amin over `dim` (every dimension when empty);
std::optional<at::Tensor> native_amax(const at::Tensor& self, at::IntArrayRef dim, bool keepdim,
                                      bool max);
// max.dim or min.dim: the values and their int64 indices along `dim`;
std::optional<std::tuple<at::Tensor, at::Tensor>> native_max_dim(const at::Tensor& self,
                                                                 int64_t dim, bool keepdim,
                                                                 bool max);
// argmax or argmin along `dim`, or into the flattened tensor without one;
std::optional<at::Tensor> native_argmax(const at::Tensor& self, std::optional<int64_t> dim,
                                        bool keepdim, bool max);
// max() or min() of every element.
std::optional<at::Tensor> native_max_all(const at::Tensor& self, bool max);

// var.correction, std.correction (`root`), and with `with_mean` var_mean and std_mean, of a
// floating tensor over `dim` (every dimension when absent or empty), each one launch (Note [Native
// moments] in native_statistics.cc): the result and, with `with_mean`, the mean (else undefined);
// nullopt when the native path does not take the call.
std::optional<std::tuple<at::Tensor, at::Tensor>> native_moments(
    const at::Tensor& self, at::OptionalIntArrayRef dim,
    const std::optional<at::Scalar>& correction, bool keepdim, bool root, bool with_mean);

// linalg_vector_norm of a floating tensor over `dim` (every dimension when absent or empty), any
// real order, without a dtype= other than self's: one launch (Note [Native norms] in
// native_statistics.cc); nullopt when the native path does not take the call.
std::optional<at::Tensor> native_vector_norm(const at::Tensor& self, const at::Scalar& ord,
                                             at::OptionalIntArrayRef dim, bool keepdim,
                                             std::optional<at::ScalarType> dtype);

// sigmoid of a floating tensor (1 / (1 + exp(-x)), the CPU's steps) and sigmoid_backward
// (grad * (1 - y) * y); one launch each; nullopt for other calls.
std::optional<at::Tensor> native_sigmoid(const at::Tensor& self);
std::optional<at::Tensor> native_sigmoid_backward(const at::Tensor& grad,
                                                  const at::Tensor& output);
// abs.out of a floating or integer tensor (integers wrap: abs(-128) is -128 in int8) into an out
// of its dtype that has its shape or is empty (resized to the unary operator's layout); false,
// having done nothing, for other calls.
bool native_abs_out(const at::Tensor& self, const at::Tensor& out);
// clamp, clamp_min and clamp_max by numbers (either bound of clamp may be absent) of a floating
// or integer tensor whose dtype the bounds keep, as the CPU's kernel computes it (a NaN input
// stays NaN): one launch; nullopt for other calls (a NaN bound, a bound the dtype cannot hold:
// the CPU's NaN result and overflow error).
std::optional<at::Tensor> native_clamp(const at::Tensor& self,
                                       const std::optional<at::Scalar>& min,
                                       const std::optional<at::Scalar>& max);

// Whether device `index`'s native kernels compute in float64 (cl_khr_fp64): whether it builds
// one; asked of the device once.
bool native_float64(c10::DeviceIndex index);

// How many launches the native operators issued in this process, copies aside (tests and the
// bench read it: the share of operator calls computed on the device).
uint64_t native_kernel_calls();
// How many copies native_copy launched in this process (cat's count as its own launches).
uint64_t native_copy_calls();
// How many operator calls a native kernel answered in this process (the unboxed kernels' templates
// count each call once, however many launches it made), and the count itself.
uint64_t native_operator_calls();
void count_native_call();

}  // namespace oclvm::torch_adapter
