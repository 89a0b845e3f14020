// adapters/torch/native_kernels.cc — elementwise arithmetic, comparisons, activations, where and
// isneginf as OpenCL kernels generated per (operator, dtypes, rank) and launched through the VM,
// the strided copy made of the same kernels, and cat and pow built from them (native_kernels.h).
// The kernels' OpenCL C is native_elementwise_source.cc's; the operators composed of these are
// native_composite.cc's; the table of compiled kernels is native_kernel_table.cc's.

#include "adapters/torch/native_kernels.h"

#include <ATen/ExpandUtils.h>
#include <ATen/Dispatch.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/native_kernel_table.h"
#include "adapters/torch/native_launches.h"
#include "oclvm/instructions/instructions.h"

namespace oclvm::torch_adapter {

// Note [Native elementwise kernels]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// add, sub, mul and div of two tensors (a Python number arrives as a 0-dim CPU tensor), functional
// and in place, on a device that takes the native path (and the operators built from their
// products below: native_dropout_grad, native_pow). The kernel's OpenCL C is generated for
// the operator, the dtypes of the result, of each operand and of the computation (torch's type
// promotion: at::result_type; true division of integers computes in the default float dtype),
// and the rank of the iteration space; it is compiled once per device and kept. The iteration
// space is the broadcast shape with every operand's strides in elements (0 where it broadcasts),
// its size-1 dimensions dropped and neighbours that every operand walks as one dimension merged,
// so a contiguous or a plainly broadcast call is rank 1 or 2. Each work-item finds its element's
// offset in each operand from its index, so any strides work, and the sizes and strides are
// kernel arguments: one kernel serves every shape of a rank. A CPU scalar is a kernel argument
// too, converted to the computation's type first, as the CPU converts a wrapped number.
//
// The arithmetic is the CPU kernel's: add and sub multiply `other` by alpha (sub's negated) and
// add in one fused multiply-add for floating types (fma is exact for alpha 1: a single rounding
// of a + b); alpha is converted with the CPU's overflow check; float division is correctly
// rounded (-cl-fp32-correctly-rounded-divide-sqrt, on a driver that honours it). Integer overflow
// wraps, as on the CPU.
//
// float16 and bfloat16 elements are read into float, computed in float and rounded to nearest even
// once, on the store, as the CPU's kernels compute them. A CPU scalar operand of mul and div
// arrives as a float of its own value, of the other operators rounded to the dtype first, and
// alpha rounded to the dtype: the CPU's choices. Where the CPU's kernels round an intermediate to
// the dtype as well (a broadcast add with alpha), a result may be one unit in the last place off.
//
// Not taken (the host kernel or the CPU fallback answers, with the CPU's values and errors): a
// float16 or bfloat16 computation with a tensor operand of another dtype (the CPU rounds it to
// the result's dtype first);
// dtypes other than float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8 (bool
// as an operand only),
// conjugate or negative bits, tensors on another device or of another layout, sub with a bool
// operand, an alpha the operator refuses for the dtype, an in-place call whose result does not
// fit self (shape or dtype) or whose self has elements that share memory, an operand that shares
// self's storage without being self, more than kMaxRank dimensions after merging, and a kernel
// the device cannot build (warned of once).
//
// The same generated kernels copy (BinaryOp::kCopy, native_copy: out = self, the scalar operand
// unused). Between tensors of one dtype the elements are read and written as the integer type of
// their size, so the bits move unchanged whatever the dtype; cat is one such copy per input, into
// its slice of the result. Between two dtypes (float16, bfloat16, float32, float64, the integer
// types and bool) each element is read in its dtype and converted as the CPU converts it
// (store_element): to bool as x != 0, to float16 and bfloat16 through float, a float to uint8
// through int64. A float that an integer type cannot hold (NaN, out of range) is undefined in
// C++ and in OpenCL C alike: x86 gives the integer's minimum, a device what its conversion gives.
// They also compute tanh of a floating tensor (kTanh, the scalar operand unused;
// OpenCL's tanh, within a few ulps of the CPU's, the result laid out as the unary operator's) and
// its backward, grad * (1 - output^2) as one fma and a product (kTanhBackward): the CPU's bits, as
// torch's compiled CPU kernel fuses 1 - b * b too. No kernel contracts a * b + c on its own
// (FP_CONTRACT OFF): each rounds where the CPU's does. isneginf is a unary kernel of the same
// kind with a bool result (kIsNegInf).
//
// The comparisons (kEq ... kGe) compute in the promoted dtype, bools as 0 and 1, and write a bool
// result laid out as the CPU's (its meta layout found with the operands converted to the promoted
// dtype, as the CPU's TensorIterator converts them); the bitwise operators take integers and
// bools, minimum and maximum any number type, NaN when either operand is NaN.
//
// where reads a third input, its bool condition (kWhere; kWhereNot when self is the number and
// the two values swap). Its result takes the layout the CPU's TensorIterator gives its three
// inputs, computed on meta tensors; its out= form (native_where_out) takes an out that is
// exactly one of its inputs, each element read before the same work-item writes it.

namespace {

constexpr size_t kOperands = 4;  // out, self, other, and a third input (third_input())

std::atomic<uint64_t> g_launches{0};  // of operators (native_kernel_calls)
std::atomic<uint64_t> g_copies{0};    // of native_copy (native_copy_calls)
std::atomic<uint64_t> g_calls{0};     // operator calls answered natively (native_operator_calls)

}  // namespace

namespace {

// The dtypes the kernels compute in and write.
bool computes_in(at::ScalarType type) {
  return type != at::kBool && storage_type(type) != nullptr;
}

// Whether `t` has a floating dtype the kernels compute in: float32, float64, float16, bfloat16.
bool floating_operand(const at::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) && computes_in(t.scalar_type());
}

// A value as a kernel argument of the computation's type. `checked`: converted as the CPU converts
// alpha (Scalar::to: c10::Error, the CPU's, when it does not fit); otherwise as it converts a
// CPU scalar operand (a plain cast, an integer straight to the float type). A float16 or bfloat16
// computation takes the value rounded to its dtype, as a float (the kernel's type).
LaunchArg scalar_arg(at::ScalarType compute, const at::Scalar& value, bool checked) {
  LaunchArg arg;
  if (reduced_float(compute)) {
    const auto plain = [&] {
      return value.isIntegral(/*includeBool=*/true) ? static_cast<float>(value.toLong())
                                                    : static_cast<float>(value.toDouble());
    };
    if (compute == at::kHalf) {
      return LaunchArg::of(
          static_cast<float>(checked ? value.to<c10::Half>() : c10::Half(plain())));
    }
    return LaunchArg::of(
        static_cast<float>(checked ? value.to<c10::BFloat16>() : c10::BFloat16(plain())));
  }
  AT_DISPATCH_SWITCH(compute, "oclvm native scalar",
      AT_DISPATCH_CASE_ALL_TYPES_AND(at::kBool, [&] {
        scalar_t v{};
        if (checked) {
          v = value.to<scalar_t>();
        } else if (value.isIntegral(/*includeBool=*/true)) {
          v = static_cast<scalar_t>(value.toLong());
        } else {
          v = static_cast<scalar_t>(value.toDouble());
        }
        if constexpr (std::is_same_v<scalar_t, bool>) {
          arg = LaunchArg::of(static_cast<uint8_t>(v));  // the kernels' uchar
        } else {
          arg = LaunchArg::of(v);
        }
      }));
  return arg;
}

// The iteration space of one call (Note [Native elementwise kernels]).
struct Layout {
  size_t rank = 0;
  std::array<int64_t, kMaxRank> sizes{};
  std::array<std::array<int64_t, kMaxRank>, kOperands> strides{};  // per operand, in elements
};

// The layout of `out_sizes` over the operands (nullptr: a scalar, no strides); false past
// kMaxRank dimensions.
bool make_layout(at::IntArrayRef out_sizes, const std::array<const at::Tensor*, kOperands>& ops,
                 Layout* layout) {
  const size_t dims = out_sizes.size();
  size_t rank = 0;
  for (size_t d = 0; d < dims; ++d) {
    const int64_t size = out_sizes[d];
    if (size == 1) continue;
    std::array<int64_t, kOperands> stride{};
    for (size_t k = 0; k < kOperands; ++k) {
      const at::Tensor* t = ops[k];
      if (t == nullptr) continue;
      const int64_t td = static_cast<int64_t>(d) - static_cast<int64_t>(dims - t->dim());
      stride[k] = td < 0 || t->size(td) == 1 ? 0 : t->stride(td);
    }
    bool merges = rank > 0;
    for (size_t k = 0; merges && k < kOperands; ++k) {
      merges = layout->strides[k][rank - 1] == stride[k] * size;
    }
    if (merges) {
      layout->sizes[rank - 1] *= size;
      for (size_t k = 0; k < kOperands; ++k) layout->strides[k][rank - 1] = stride[k];
      continue;
    }
    if (rank == kMaxRank) return false;
    layout->sizes[rank] = size;
    for (size_t k = 0; k < kOperands; ++k) layout->strides[k][rank] = stride[k];
    ++rank;
  }
  layout->rank = rank;
  return true;
}

// The generated kernel for `key` on `device` (nullptr when the device cannot build it): the packed
// 64-bit id of the key (device index, op, the four scalar types, each below 256, the scalar flag
// and the rank, below 128, one field each) finds it without building its source.
std::shared_ptr<const Kernel> binary_kernel(c10::DeviceIndex device, const BinaryKernelKey& key) {
  static_assert(kMaxRank < 0x80);
  const auto type = [](at::ScalarType t) { return static_cast<uint64_t>(t) & 0xff; };
  const uint64_t id = (static_cast<uint64_t>(key.op) << 40) | (type(key.out) << 32) |
                      (type(key.self) << 24) | (type(key.other) << 16) |
                      (type(key.compute) << 8) |
                      (static_cast<uint64_t>(key.other_is_scalar) << 7) | (key.rank & 0x7f);
  return native_kernel(device, NativeKernelFamily::kElementwise, id,
                       [&] { return binary_source(key); });
}

// Whether a tensor may be an operand of a native kernel on `device`.
bool plain_operand(const at::Tensor& t, c10::DeviceIndex device) {
  return t.defined() && t.layout() == at::kStrided && !t.is_conj() && !t.is_neg() &&
         storage_type(t.scalar_type()) != nullptr &&
         ((is_device(t) && t.device().index() == device) || (t.is_cpu() && t.dim() == 0));
}

// The checks every call shares; the computation's dtype, or nullopt when the call is not taken.
std::optional<at::ScalarType> compute_type(BinaryOp op, const at::Tensor& self,
                                           const at::Tensor& other, const at::Scalar& alpha) {
  if (!self.defined() || !is_device(self)) return std::nullopt;
  const c10::DeviceIndex device = self.device().index();
  if (!native_kernels(device) || !plain_operand(self, device) || !plain_operand(other, device)) {
    return std::nullopt;
  }
  at::ScalarType compute = at::result_type(self, other);
  if (op == BinaryOp::kDiv && at::isIntegralType(compute, /*includeBool=*/true)) {
    compute = c10::typeMetaToScalarType(c10::get_default_dtype());
  }
  const bool bitwise = op == BinaryOp::kBitwiseAnd || op == BinaryOp::kBitwiseOr ||
                       op == BinaryOp::kBitwiseXor;
  if (bitwise && !at::isIntegralType(compute, /*includeBool=*/true)) {
    return std::nullopt;  // the CPU's error for floats
  }
  // Comparisons and bitwise operators take bools as they are (0 and 1); the others compute in a
  // number type.
  const bool takes_bool = compares(op) || bitwise;
  if (!computes_in(compute) && !(takes_bool && compute == at::kBool)) return std::nullopt;
  // A float16 or bfloat16 computation converts each tensor operand to its dtype first (an int
  // 4097 is 4096 there); the kernels read an operand in its own dtype, so they take operands of
  // that dtype only (a CPU scalar arrives converted: scalar_arg).
  if (reduced_float(compute) && (self.scalar_type() != compute ||
                                 (is_device(other) && other.scalar_type() != compute))) {
    return std::nullopt;
  }
  if (op == BinaryOp::kSub &&
      (self.scalar_type() == at::kBool || other.scalar_type() == at::kBool)) {
    return std::nullopt;  // the CPU refuses subtraction with a bool tensor
  }
  if ((op == BinaryOp::kAdd || op == BinaryOp::kSub) &&
      (alpha.isComplex() || alpha.isBoolean() ||
       (alpha.isFloatingPoint() && at::isIntegralType(compute, /*includeBool=*/true)))) {
    return std::nullopt;  // the operator's own error, from the CPU
  }
  return compute;
}

// Launches out = self (op) other over `out`'s shape; `third` is the third input of an operator
// that has one (third_input), else nullptr.
void launch(BinaryOp op, at::ScalarType compute, const at::Tensor& out, const at::Tensor& self,
            const at::Tensor& other, const at::Tensor* third, const at::Scalar& alpha,
            const Layout& layout, const std::shared_ptr<const Kernel>& kernel,
            std::atomic<uint64_t>& launches = g_launches) {
  const bool scalar = !is_device(other);
  std::vector<LaunchArg> args;
  args.reserve(9 + 5 * layout.rank);
  args.push_back(blob_arg(out, KernelAccess::kWrite));
  args.push_back(blob_arg(self, KernelAccess::kRead));
  // The CPU's float16 and bfloat16 mul and div take a scalar operand's own value as a float;
  // its other kernels, the value converted to the dtype first.
  const bool original = reduced_float(compute) && (op == BinaryOp::kMul || op == BinaryOp::kDiv);
  args.push_back(scalar ? scalar_arg(original ? at::kFloat : compute, other.item(),
                                     /*checked=*/false)
                        : blob_arg(other, KernelAccess::kRead));
  if (third != nullptr) args.push_back(blob_arg(*third, KernelAccess::kRead));
  const bool scales = op == BinaryOp::kAdd || op == BinaryOp::kAddcmul ||
                      op == BinaryOp::kAddcdiv || op == BinaryOp::kLerp ||
                      op == BinaryOp::kThresholdBackward || op == BinaryOp::kClamp;
  const at::Scalar scale = op == BinaryOp::kSub ? -alpha : scales ? alpha : 1;
  // add's and sub's alpha, threshold_backward's threshold and clamp's upper bound are converted to
  // the dtype, as the CPU's float16 and bfloat16 kernels convert them; the other scales to float.
  const bool in_dtype = op == BinaryOp::kAdd || op == BinaryOp::kSub ||
                        op == BinaryOp::kThresholdBackward || op == BinaryOp::kClamp;
  args.push_back(scalar_arg(in_dtype ? compute : opmath_type(compute), scale, /*checked=*/true));
  const uint64_t n = static_cast<uint64_t>(out.numel());
  args.push_back(LaunchArg::of(n));
  for (size_t d = 0; d < layout.rank; ++d) {
    args.push_back(LaunchArg::of(static_cast<int64_t>(layout.sizes[d])));
    for (size_t k = 0; k < kOperands; ++k) {
      if ((k == 2 && scalar) || (k == 3 && third == nullptr)) continue;
      args.push_back(LaunchArg::of(static_cast<int64_t>(layout.strides[k][d])));
    }
  }
  run_native_kernel(kernel, out, args, static_cast<size_t>(n));
  launches.fetch_add(1, std::memory_order_relaxed);
}

// The kernel for the call on self's device, or nullptr when the layout or the device refuses it.
std::shared_ptr<const Kernel> kernel_for(BinaryOp op, at::ScalarType compute,
                                         const at::Tensor& out, const at::Tensor& self,
                                         const at::Tensor& other, Layout* layout,
                                         const at::Tensor* third = nullptr) {
  const bool scalar = !is_device(other);
  if (!make_layout(out.sizes(), {&out, &self, scalar ? nullptr : &other, third}, layout)) {
    return nullptr;
  }
  // A scalar arrives converted to `compute`: its own dtype (a Python float is a double) must not
  // make a float kernel ask for cl_khr_fp64, which a device without doubles cannot build.
  const BinaryKernelKey key{op,      out.scalar_type(), self.scalar_type(),
                            scalar ? compute : other.scalar_type(),
                            compute, scalar,            layout->rank};
  return binary_kernel(self.device().index(), key);  // `out` may be a meta stand-in
}

// A new result of `sizes` with the strides the CPU's TensorIterator gives it: its fast set-up's
// when both operands have the result's shape and one layout; self's when self has the result's
// shape and dense elements (a channels-last input keeps its layout); contiguous ones when every
// operand is contiguous; otherwise, or when a dimension has one element (where its choice depends
// on how it breaks ties), those the same operator computes on meta tensors of the operands' sizes
// and strides, without touching data.
at::Tensor new_result(at::IntArrayRef sizes, at::ScalarType dtype, const at::Tensor& self,
                      const at::Tensor& other, std::optional<at::ScalarType> inputs_as = {}) {
  const at::TensorOptions options = self.options().dtype(dtype);
  // TensorIterator's fast set-up: both operands of the result's shape, both contiguous, both
  // channels-last, or both dense with the same strides (an (N,C,1,1) tensor is both of the first
  // two: contiguous wins).
  if (is_device(other) && self.sizes().equals(sizes) && other.sizes().equals(sizes)) {
    if (self.is_contiguous() && other.is_contiguous()) return at::empty(sizes, options);
    if (self.is_contiguous(at::MemoryFormat::ChannelsLast) &&
        other.is_contiguous(at::MemoryFormat::ChannelsLast)) {
      return at::empty(sizes, options.memory_format(at::MemoryFormat::ChannelsLast));
    }
    if (self.is_non_overlapping_and_dense() && other.is_non_overlapping_and_dense() &&
        self.strides().equals(other.strides())) {
      return at::empty_strided(sizes, self.strides(), options);
    }
  }
  // Without dimensions of one element (or none), the orders below are TensorIterator's; with
  // them, its order depends on how it breaks ties, which the meta call settles.
  if (std::all_of(sizes.begin(), sizes.end(), [](int64_t size) { return size > 1; })) {
    if (self.sizes().equals(sizes) && self.is_non_overlapping_and_dense()) {
      return at::empty_strided(sizes, self.strides(), options);
    }
    if (self.is_contiguous() && (!is_device(other) || other.is_contiguous())) {
      return at::empty(sizes, options);
    }
  }
  // Each operand first converted to the computation's dtype (`inputs_as`; the result's unless
  // given), as the CPU's TensorIterator converts its inputs (.to(): a view with gaps becomes
  // contiguous).
  const at::ScalarType common = inputs_as.value_or(dtype);
  const auto meta = [&](const at::Tensor& t) {
    at::Tensor m = at::empty_strided(t.sizes(), t.strides(),
                                     at::dtype(t.scalar_type()).device(at::kMeta));
    return t.scalar_type() == common ? m : m.to(common);
  };
  const at::Tensor layout = at::add(meta(self), meta(other));
  return at::empty_strided(sizes, layout.strides(), options);
}

// dst := src as native_copy says, its launch counted in `launches`.
bool copy_on_device(const at::Tensor& src, const at::Tensor& dst,
                    std::atomic<uint64_t>& launches) {
  const bool converts = src.scalar_type() != dst.scalar_type();
  if (!is_device(src) || !is_device(dst) || src.device() != dst.device() ||
      !native_kernels(dst.device().index()) ||
      (converts && (storage_type(src.scalar_type()) == nullptr ||
                    storage_type(dst.scalar_type()) == nullptr)) ||
      src.layout() != at::kStrided || dst.layout() != at::kStrided ||
      src.is_conj() != dst.is_conj() || src.is_neg() != dst.is_neg() ||
      !elements_are_distinct(dst) || src.is_alias_of(dst)) {
    return false;  // sharing memory: the CPU's copy refuses an overlap (or orders its writes)
  }
  // src must broadcast to dst's shape (copy_from checks it first; checked again here, where the
  // layout would otherwise read past src's elements).
  if (!at::is_expandable_to(src.sizes(), dst.sizes())) return false;
  if (dst.numel() == 0) return true;
  Layout layout;
  if (!make_layout(dst.sizes(), {&dst, &src, nullptr}, &layout)) return false;
  // The kernel's scalar operand (a zero) and its alpha are in its signature, unused.
  const at::Tensor unused = at::native::wrapped_scalar_tensor(0);
  if (converts) {  // each element read as src's dtype, converted as the CPU converts (kCopy)
    const at::ScalarType from = src.scalar_type();
    const BinaryKernelKey key{BinaryOp::kCopy, dst.scalar_type(), from, from, from,
                              /*other_is_scalar=*/true, layout.rank};
    const std::shared_ptr<const Kernel> kernel = binary_kernel(dst.device().index(), key);
    if (kernel == nullptr) return false;
    launch(BinaryOp::kCopy, from, dst, src, unused, nullptr, 0, layout, kernel, launches);
    return true;
  }
  // The bits move as an integer type of the element's size: no conversion can touch them.
  at::ScalarType bits;
  switch (dst.itemsize()) {
    case 1: bits = at::kByte; break;
    case 2: bits = at::kShort; break;
    case 4: bits = at::kInt; break;
    case 8: bits = at::kLong; break;
    default: return false;  // complex128: the host copies it
  }
  const BinaryKernelKey key{BinaryOp::kCopy, bits, bits, bits, bits, /*other_is_scalar=*/true,
                            layout.rank};
  const std::shared_ptr<const Kernel> kernel = binary_kernel(dst.device().index(), key);
  if (kernel == nullptr) return false;
  launch(BinaryOp::kCopy, bits, dst, src, unused, nullptr, 0, layout, kernel, launches);
  return true;
}

}  // namespace

std::optional<at::Tensor> native_binary(BinaryOp op, const at::Tensor& self,
                                        const at::Tensor& other, const at::Scalar& alpha) {
  const std::optional<at::ScalarType> compute = compute_type(op, self, other, alpha);
  if (!compute) return std::nullopt;
  const std::vector<int64_t> sizes = at::infer_size(self.sizes(), other.sizes());
  at::Tensor out = new_result(sizes, compares(op) ? at::kBool : *compute, self, other, *compute);
  if (out.numel() == 0) return out;
  Layout layout;
  const std::shared_ptr<const Kernel> kernel = kernel_for(op, *compute, out, self, other, &layout);
  if (kernel == nullptr) return std::nullopt;
  launch(op, *compute, out, self, other, nullptr, alpha, layout, kernel);
  return out;
}

bool native_binary_(BinaryOp op, const at::Tensor& self, const at::Tensor& other,
                    const at::Scalar& alpha) {
  const std::optional<at::ScalarType> compute = compute_type(op, self, other, alpha);
  if (!compute || compares(op) || !computes_in(self.scalar_type()) ||
      !c10::canCast(*compute, self.scalar_type()) || !elements_are_distinct(self)) {
    return false;  // the CPU's error, or a layout it proves distinct where this does not
  }
  if (!other.is_cpu() && other.is_alias_of(self) &&
      !(other.storage_offset() == self.storage_offset() && other.sizes().equals(self.sizes()) &&
        other.strides().equals(self.strides()) && other.itemsize() == self.itemsize())) {
    return false;  // any other overlap: the CPU's error, or its order of reads and writes
  }
  const std::vector<int64_t> sizes = at::infer_size(self.sizes(), other.sizes());
  if (!self.sizes().equals(sizes)) return false;  // the CPU's error: self cannot broadcast
  if (self.numel() == 0) return true;
  Layout layout;
  const std::shared_ptr<const Kernel> kernel = kernel_for(op, *compute, self, self, other, &layout);
  if (kernel == nullptr) return false;
  launch(op, *compute, self, self, other, nullptr, alpha, layout, kernel);
  return true;
}


namespace {

// `op` of a floating device tensor (float32, float64, float16, bfloat16; or, with `integers`, of
// any dtype the kernels compute in) into a new result of dtype `out_type`, laid out as the unary
// operator's; nullopt for other calls (integers promote to float on the CPU, or give constant
// answers: its kernel answers).
std::optional<at::Tensor> native_unary(BinaryOp op, const at::Tensor& self,
                                       at::ScalarType out_type, bool integers = false) {
  if (!self.defined() || !is_device(self) || !native_kernels(self.device().index()) ||
      self.layout() != at::kStrided || self.is_conj() || self.is_neg() ||
      !(floating_operand(self) || (integers && computes_in(self.scalar_type())))) {
    return std::nullopt;
  }
  // The unary operator's layout: TensorIterator's for self with itself.
  at::Tensor out = new_result(self.sizes(), out_type, self, self, self.scalar_type());
  if (out.numel() == 0) return out;
  const at::Tensor unused = at::native::wrapped_scalar_tensor(0.0);
  Layout layout;
  const std::shared_ptr<const Kernel> kernel =
      kernel_for(op, self.scalar_type(), out, self, unused, &layout);
  if (kernel == nullptr) return std::nullopt;
  launch(op, self.scalar_type(), out, self, unused, nullptr, 1, layout, kernel);
  return out;
}

}  // namespace

std::optional<at::Tensor> native_tanh(const at::Tensor& self) {
  return native_unary(BinaryOp::kTanh, self, self.scalar_type());
}

std::optional<at::Tensor> native_isneginf(const at::Tensor& self) {
  return native_unary(BinaryOp::kIsNegInf, self, at::kBool);
}

namespace {

// where(condition, self, other) into `out` (native_where_out), or into a new result when `out` is
// undefined; nullopt when the native path does not take the call, and then nothing has happened.
std::optional<at::Tensor> where_into(const at::Tensor& condition, const at::Tensor& self,
                                     const at::Tensor& other, const at::Tensor& out_arg) {
  // A bool condition on a native-path device (a uint8 one is the CPU's deprecation warning), and
  // values on its device or CPU scalars, not both scalars.
  if (!condition.defined() || !is_device(condition) || condition.scalar_type() != at::kBool ||
      condition.layout() != at::kStrided) {
    return std::nullopt;
  }
  const c10::DeviceIndex device = condition.device().index();
  if (!native_kernels(device) || !plain_operand(self, device) || !plain_operand(other, device) ||
      (!is_device(self) && !is_device(other))) {
    return std::nullopt;
  }
  const at::ScalarType type = at::result_type(self, other);
  if (storage_type(type) == nullptr) return std::nullopt;
  const std::vector<int64_t> sizes =
      at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes());
  // The CPU's layout: TensorIterator's over the three inputs, found on meta tensors, each value
  // first converted to the result's dtype as the CPU converts it (.to(): a view with gaps becomes
  // contiguous).
  const auto meta = [&](const at::Tensor& t) {
    at::Tensor m = at::empty_strided(t.sizes(), t.strides(),
                                     at::dtype(t.scalar_type()).device(at::kMeta));
    if (&t != &condition && t.scalar_type() != type) m = m.to(type);
    // One dtype for all three: the iterator then asks no promotion of its own.
    return at::empty_strided(m.sizes(), m.strides(), at::dtype(at::kFloat).device(at::kMeta));
  };
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .check_all_same_dtype(false)
                                .add_owned_output(at::Tensor())
                                .add_owned_const_input(meta(condition))
                                .add_owned_const_input(meta(self))
                                .add_owned_const_input(meta(other))
                                .build();
  const at::IntArrayRef strides = iter.output().strides();
  at::Tensor out = out_arg;
  bool resize = false;
  if (!out.defined()) {
    out = at::empty_strided(sizes, strides, condition.options().dtype(type));
  } else {
    // An out= tensor of the result's dtype on the condition's device, sharing no memory with the
    // inputs unless it is one of them (each element read before it is written, by the same
    // work-item), of the result's shape or empty (resized as the CPU's TensorIterator resizes it;
    // a resize of one with elements is the CPU's warning, and its call).
    const auto same_elements = [&](const at::Tensor& input) {
      return !input.is_alias_of(out) ||
             (out.numel() != 0 && input.storage_offset() == out.storage_offset() &&
              input.sizes().equals(sizes) && input.strides().equals(out.strides()) &&
              input.itemsize() == out.itemsize());
    };
    if (!is_device(out) || out.device() != condition.device() || out.scalar_type() != type ||
        out.layout() != at::kStrided || out.is_conj() || out.is_neg() ||
        !same_elements(condition) || !same_elements(self) || !same_elements(other)) {
      return std::nullopt;
    }
    resize = !out.sizes().equals(sizes);
    if (resize && out.numel() != 0) return std::nullopt;
    if (!resize && !elements_are_distinct(out)) return std::nullopt;
  }
  // Resized only once the call is sure to be taken: as the CPU's TensorIterator resizes it.
  const auto resize_out = [&] {
    if (!resize) return;
    out.resize_(sizes);
    out.as_strided_(sizes, strides);
  };
  if (c10::multiply_integers(sizes) == 0) {
    resize_out();
    return out;
  }
  // The kernel takes a scalar as its second value only: a scalar `self` swaps the two.
  const bool swap = !is_device(self);
  const BinaryOp op = swap ? BinaryOp::kWhereNot : BinaryOp::kWhere;
  const at::Tensor& first = swap ? other : self;
  const at::Tensor& second = swap ? self : other;
  // The layout of what `out` will be: a meta stand-in while it is not resized yet.
  const at::Tensor target =
      resize ? at::empty_strided(sizes, strides, at::dtype(type).device(at::kMeta)) : out;
  Layout layout;
  const std::shared_ptr<const Kernel> kernel =
      kernel_for(op, type, target, first, second, &layout, &condition);
  if (kernel == nullptr) return std::nullopt;
  resize_out();
  launch(op, type, out, first, second, &condition, 1, layout, kernel);
  return out;
}

}  // namespace

std::optional<at::Tensor> native_where(const at::Tensor& condition, const at::Tensor& self,
                                       const at::Tensor& other) {
  return where_into(condition, self, other, at::Tensor());
}

bool native_where_out(const at::Tensor& condition, const at::Tensor& self,
                      const at::Tensor& other, const at::Tensor& out) {
  return out.defined() && where_into(condition, self, other, out).has_value();
}

bool native_masked_fill_(const at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  if (!self.defined() || !is_device(self) || value.isComplex() ||
      storage_type(self.scalar_type()) == nullptr || !mask.defined() || !is_device(mask) ||
      mask.scalar_type() != at::kBool) {
    return false;  // the CPU's kernel, or its error (a uint8 mask's first)
  }
  // The value in self's dtype, converted as the CPU's kernel converts it (Scalar::to, with its
  // overflow error), as a CPU scalar of that dtype: where's promotion then keeps self's dtype.
  const at::Tensor fill = at::scalar_tensor(value, self.options().device(at::kCPU));
  return where_into(mask, fill, self, self).has_value();
}

bool native_pointwise_(BinaryOp op, const at::Tensor& self, const at::Tensor& first,
                       const at::Tensor* second, const at::Scalar& value) {
  if (!self.defined() || !is_device(self) || !native_kernels(self.device().index()) ||
      self.layout() != at::kStrided || self.is_conj() || self.is_neg() ||
      !floating_operand(self) || !elements_are_distinct(self) || value.isComplex() ||
      value.isBoolean()) {
    return false;
  }
  // Inputs of self's device and dtype (no promotion) that broadcast to self, sharing no memory
  // with it unless they are it.
  const auto takes = [&](const at::Tensor& t) {
    return t.defined() && is_device(t) && t.device() == self.device() &&
           t.scalar_type() == self.scalar_type() && t.layout() == at::kStrided && !t.is_conj() &&
           !t.is_neg() && at::is_expandable_to(t.sizes(), self.sizes()) &&
           (!t.is_alias_of(self) ||
            (t.storage_offset() == self.storage_offset() && t.sizes().equals(self.sizes()) &&
             t.strides().equals(self.strides())));
  };
  if (!takes(first) || (second != nullptr && !takes(*second))) return false;
  if (self.numel() == 0) return true;
  Layout layout;
  const at::ScalarType type = self.scalar_type();
  const std::shared_ptr<const Kernel> kernel =
      kernel_for(op, type, self, self, first, &layout, second);
  if (kernel == nullptr) return false;
  launch(op, type, self, self, first, second, value, layout, kernel);
  return true;
}

std::optional<at::Tensor> native_sqrt(const at::Tensor& self) {
  return native_unary(BinaryOp::kSqrt, self, self.scalar_type());
}

std::optional<at::Tensor> native_math(BinaryOp op, const at::Tensor& self) {
  return native_unary(op, self, self.scalar_type());
}

std::optional<at::Tensor> native_gelu(const at::Tensor& self, c10::string_view approximate) {
  if (approximate != "none" && approximate != "tanh") return std::nullopt;  // the CPU's error
  return native_unary(approximate == "tanh" ? BinaryOp::kGeluTanh : BinaryOp::kGelu, self,
                      self.scalar_type());
}

std::optional<at::Tensor> native_silu(const at::Tensor& self) {
  return native_unary(BinaryOp::kSilu, self, self.scalar_type());
}

std::optional<at::Tensor> native_activation_backward(BinaryOp op, const at::Tensor& grad,
                                                     const at::Tensor& self) {
  // Two device tensors of one float dtype (the backward operators check every tensor's device).
  if (!grad.defined() || !self.defined() || !is_device(grad) || !is_device(self) ||
      grad.scalar_type() != self.scalar_type() || !floating_operand(grad)) {
    return std::nullopt;
  }
  return native_binary(op, grad, self, 1);
}

std::optional<at::Tensor> native_relu(const at::Tensor& self) {
  return native_unary(BinaryOp::kRelu, self, self.scalar_type(), /*integers=*/true);
}

std::optional<at::Tensor> native_threshold_backward(const at::Tensor& grad,
                                                    const at::Tensor& self,
                                                    const at::Scalar& threshold) {
  // Two device tensors of one dtype, self first as the CPU's TensorIterator takes them.
  if (!grad.defined() || !self.defined() || !is_device(grad) || !is_device(self) ||
      grad.scalar_type() != self.scalar_type() || threshold.isComplex() ||
      threshold.isBoolean() ||
      (threshold.isFloatingPoint() && !at::isFloatingType(self.scalar_type()))) {
    return std::nullopt;
  }
  return native_binary(BinaryOp::kThresholdBackward, self, grad, threshold);
}

std::optional<at::Tensor> native_rsqrt(const at::Tensor& self) {
  return native_unary(BinaryOp::kRsqrt, self, self.scalar_type());
}

std::optional<at::Tensor> native_neg(const at::Tensor& self) {
  // A bool tensor is the CPU's error: computes_in leaves it out.
  return native_unary(BinaryOp::kNeg, self, self.scalar_type(), /*integers=*/true);
}



std::optional<at::Tensor> native_pow(const at::Tensor& self, const at::Scalar& exponent) {
  // The CPU kernel's products for float and double (self * self, then times self); every other
  // exponent or dtype is std::pow or another kernel, whose values a product would not match.
  if (!self.defined() || (self.scalar_type() != at::kFloat && self.scalar_type() != at::kDouble) ||
      exponent.isComplex() || exponent.isBoolean()) {
    return std::nullopt;
  }
  const double value = exponent.toDouble();
  if (value == 1.0) {  // the CPU copies self (a product rule's x^1 in autograd)
    if (!is_device(self) || !native_kernels(self.device().index()) ||
        self.layout() != at::kStrided || self.is_conj() || self.is_neg()) {
      return std::nullopt;
    }
    at::Tensor out = new_result(self.sizes(), self.scalar_type(), self, self);
    if (out.numel() != 0 && !copy_on_device(self, out, g_launches)) out.copy_(self);
    return out;
  }
  if (value != 2.0 && value != 3.0) return std::nullopt;
  std::optional<at::Tensor> out = native_binary(BinaryOp::kMul, self, self, 1);
  if (!out || value == 2.0) return out;
  // In place, so the result keeps the layout of self * self: the unary operator's.
  if (!native_binary_(BinaryOp::kMul, *out, self, 1)) out->mul_(self);
  return out;
}

bool native_copy(const at::Tensor& src, const at::Tensor& dst) {
  return copy_on_device(src, dst, g_copies);
}

bool copy_for_operator(const at::Tensor& src, const at::Tensor& dst) {
  return copy_on_device(src, dst, g_launches);
}

bool native_float64(c10::DeviceIndex index) {
  const BinaryKernelKey key{BinaryOp::kAdd, at::kDouble, at::kDouble, at::kDouble,
                            at::kDouble,    /*other_is_scalar=*/true, /*rank=*/1};
  return binary_kernel(index, key) != nullptr;
}

uint64_t native_kernel_calls() { return g_launches.load(std::memory_order_relaxed); }

void count_native_launch() { g_launches.fetch_add(1, std::memory_order_relaxed); }

uint64_t native_copy_calls() { return g_copies.load(std::memory_order_relaxed); }

void count_native_call() { g_calls.fetch_add(1, std::memory_order_relaxed); }

uint64_t native_operator_calls() { return g_calls.load(std::memory_order_relaxed); }

std::optional<at::Tensor> native_sigmoid(const at::Tensor& self) {
  return native_unary(BinaryOp::kSigmoid, self, self.defined() ? self.scalar_type() : at::kFloat);
}

std::optional<at::Tensor> native_sigmoid_backward(const at::Tensor& grad,
                                                  const at::Tensor& output) {
  return native_activation_backward(BinaryOp::kSigmoidBackward, grad, output);
}

bool native_abs_out(const at::Tensor& self, const at::Tensor& out) {
  if (!self.defined() || !out.defined() || !is_device(out) || out.device() != self.device() ||
      out.scalar_type() != self.scalar_type() || out.layout() != at::kStrided || out.is_conj() ||
      out.is_neg() || !plain_operand(self, self.device().index()) || !is_device(self) ||
      !computes_in(self.scalar_type()) || !native_kernels(self.device().index())) {
    return false;  // bool and complex: the CPU's kernel and errors
  }
  const bool resize = !out.sizes().equals(self.sizes());
  // the CPU's resize warning and its call; an empty out in self's storage, which a resize could
  // make overlap it
  if (resize && (out.numel() != 0 || out.is_alias_of(self))) return false;
  if (!resize && (!elements_are_distinct(out) ||
                  (out.is_alias_of(self) && !(out.storage_offset() == self.storage_offset() &&
                                              out.strides().equals(self.strides()))))) {
    return false;  // the CPU's order of reads and writes, or its error
  }
  if (resize) {  // as TensorIterator resizes an empty out: the unary operator's layout
    const at::Tensor layout = new_result(self.sizes(), self.scalar_type(), self, self);
    out.resize_(self.sizes());
    out.as_strided_(self.sizes(), layout.strides());
  }
  if (out.numel() == 0) return true;
  const at::Tensor unused = at::native::wrapped_scalar_tensor(0);
  Layout layout;
  const at::ScalarType type = self.scalar_type();
  const std::shared_ptr<const Kernel> kernel =
      kernel_for(BinaryOp::kAbs, type, out, self, unused, &layout);
  if (kernel == nullptr) return false;
  launch(BinaryOp::kAbs, type, out, self, unused, nullptr, 1, layout, kernel);
  return true;
}

std::optional<at::Tensor> native_clamp(const at::Tensor& self,
                                       const std::optional<at::Scalar>& min,
                                       const std::optional<at::Scalar>& max) {
  if (!self.defined() || !is_device(self) || !native_kernels(self.device().index()) ||
      !plain_operand(self, self.device().index()) || !computes_in(self.scalar_type()) ||
      (!min && !max)) {
    return std::nullopt;  // bool, complex, no bound: the CPU's kernel or error
  }
  const at::ScalarType type = self.scalar_type();
  for (const std::optional<at::Scalar>* bound : {&min, &max}) {
    if (!bound->has_value()) continue;
    const at::Scalar& value = **bound;
    if (value.isComplex() || value.isBoolean() ||
        (value.isFloatingPoint() && !at::isFloatingType(type)) ||
        (value.isFloatingPoint() && std::isnan(value.toDouble()))) {
      return std::nullopt;  // a bound that promotes the result, a NaN one (the CPU's NaN result)
    }
    try {  // the CPU converts each bound with Scalar::to and its overflow error
      scalar_arg(type, value, /*checked=*/true);
    } catch (const c10::Error&) {
      return std::nullopt;
    }
  }
  const BinaryOp op = min && max ? BinaryOp::kClamp : min ? BinaryOp::kClampMin
                                                          : BinaryOp::kClampMax;
  at::Tensor out = new_result(self.sizes(), type, self, self);
  if (out.numel() == 0) return out;
  const at::Tensor bound = at::native::wrapped_scalar_tensor(min ? *min : *max);
  Layout layout;
  const std::shared_ptr<const Kernel> kernel = kernel_for(op, type, out, self, bound, &layout);
  if (kernel == nullptr) return std::nullopt;
  launch(op, type, out, self, bound, nullptr, op == BinaryOp::kClamp ? *max : at::Scalar(1),
         layout, kernel);
  return out;
}

}  // namespace oclvm::torch_adapter
