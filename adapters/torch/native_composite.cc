// adapters/torch/native_composite.cc — native operators composed of the elementwise kernels of
// native_kernels.cc (the in-place _foreach_ loops, dropout's gradient, mean, tanh's gradient, cat
// as one strided copy per input) and
// two small generated kernels of their own: arange of integers, and tril and triu
// (native_kernels.h).
//
// The in-place _foreach_ arithmetic (native_foreach_, native_foreach_pointwise_) is the in-place
// kernel once per tensor, in list order as the CPU's per-tensor loop; a tensor it does not take
// goes to the device's kernel of its own in-place operator, so the list's values and errors stay
// the CPU's.
//
// Thread-safety: any thread, as every operator (native_kernels.h).

#include <ATen/ScalarOps.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mul.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/native_kernel_table.h"
#include "adapters/torch/native_kernels.h"

namespace oclvm::torch_adapter {

namespace {

// The device's own kernels of the per-tensor operators: below autograd and ADInplaceOrView, as a
// _foreach_ kernel is, so the list's versions go up once (Note [Versions of lists written in
// place] in host_kernels.cc), as on the CPU.
const c10::DispatchKeySet kDevice{c10::DispatchKey::PrivateUse1};

// The CPU's per-tensor loop of a _foreach_ operator over `self`, whose lists the caller has
// checked: native(i) runs tensor i's kernel (false when the native path does not take it), and
// own(i) then runs its own operator on the device. Counts the call as native when every tensor's
// was. False, having done nothing, for a list not all on one native-path device.
template <class Native, class Own>
bool foreach_tensor(at::TensorList self, const Native& native, const Own& own) {
  if (self.empty()) return false;
  for (const at::Tensor& t : self) {
    if (!t.defined() || !is_device(t) || t.device() != self[0].device()) return false;
  }
  if (!native_kernels(self[0].device().index())) return false;
  bool all_native = true;
  for (size_t i = 0; i < self.size(); ++i) {
    if (native(i)) continue;
    all_native = false;  // this tensor's own operator answers: its host kernel, or its error
    own(i);
  }
  if (all_native) count_native_call();
  return true;
}

// The number for tensor i: scalars[0] for every tensor (`one_scalar`), or scalars[i].
const at::Scalar& scalar_for(at::ArrayRef<at::Scalar> scalars, bool one_scalar, size_t i) {
  return one_scalar ? scalars[0] : scalars[i];
}

}  // namespace

bool native_foreach_(BinaryOp op, at::TensorList self, at::TensorList others,
                    at::ArrayRef<at::Scalar> scalars, bool one_scalar, const at::Scalar& alpha) {
  const size_t n = self.size();
  if (others.empty() ? scalars.size() != (one_scalar ? 1 : n)
                     : others.size() != n || !scalars.empty()) {
    return false;  // the CPU's error
  }
  // A number arrives as the in-place operator's wrapped tensor, as in the CPU's loop.
  const auto other = [&](size_t i) {
    return others.empty() ? at::native::wrapped_scalar_tensor(scalar_for(scalars, one_scalar, i))
                          : others[i];
  };
  return foreach_tensor(
      self, [&](size_t i) { return native_binary_(op, self[i], other(i), alpha); },
      [&](size_t i) {
        at::Tensor target = self[i];
        switch (op) {
          case BinaryOp::kAdd:
            at::_ops::add__Tensor::redispatch(kDevice, target, other(i), alpha);
            break;
          case BinaryOp::kMul:
            at::_ops::mul__Tensor::redispatch(kDevice, target, other(i));
            break;
          case BinaryOp::kDiv:
            at::_ops::div__Tensor::redispatch(kDevice, target, other(i));
            break;
          default: TORCH_INTERNAL_ASSERT(false, "no per-tensor operator for ", op_name(op));
        }
      });
}

std::optional<at::Tensor> native_dropout_grad(const at::Tensor& grad, const at::Tensor& mask,
                                              double scale) {
  // A CPU mask is the operator's device error (it checks every tensor: Note [Device checks as on
  // CUDA] in operator_facts.h), even a zero-dimensional one that mul would take as a scalar.
  if (!mask.defined() || !is_device(mask)) return std::nullopt;
  std::optional<at::Tensor> masked = native_binary(BinaryOp::kMul, grad, mask, 1);
  if (!masked) return std::nullopt;
  const at::Tensor factor = at::native::wrapped_scalar_tensor(scale);  // as `tensor * scale`
  if (std::optional<at::Tensor> out = native_binary(BinaryOp::kMul, *masked, factor, 1)) {
    return out;
  }
  return at::mul(*masked, factor);  // the dtype the native path lacks: mul's own kernel
}

std::optional<at::Tensor> native_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                      bool keepdim, std::optional<at::ScalarType> dtype) {
  // The CPU's mean of float32 and float64: the sum, then divided in place by the number of
  // elements summed (a wrapped integer, converted to the dtype). Of float16 and bfloat16, as the
  // CPU computes it for accuracy: the sum in float32, divided in float32, then converted.
  const at::ScalarType type = self.defined() ? self.scalar_type() : at::kFloat;
  if (!self.defined() ||
      (type != at::kFloat && type != at::kDouble && !reduced_float(type)) ||
      (dtype && *dtype != type)) {
    return std::nullopt;
  }
  std::optional<at::Tensor> out =
      native_sum(self, dim, keepdim,
                 reduced_float(type) ? std::optional<at::ScalarType>(at::kFloat) : std::nullopt);
  if (!out) return std::nullopt;
  int64_t count = 1;
  if (!dim || dim->empty()) {
    count = self.numel();
  } else {
    for (const int64_t d : *dim) count *= self.size(d);  // native_sum checked each dimension
  }
  const at::Tensor divisor = at::native::wrapped_scalar_tensor(count);
  if (!native_binary_(BinaryOp::kDiv, *out, divisor, 1)) out->div_(divisor);
  if (out->scalar_type() == type) return out;
  at::Tensor rounded = at::empty(out->sizes(), out->options().dtype(type));
  if (!copy_for_operator(*out, rounded)) rounded.copy_(*out);
  return rounded;
}

namespace {

KernelSource arange_source(const std::string& t) {
  const std::string name = "oclvm_arange_" + t;
  std::string s = "__kernel void " + name + "(OCLVM_BLOB(" + t +
                  ", out), long start, long step, ulong n) {\n";
  s += "  const ulong i = get_global_id(0);\n  if (i >= n) return;\n";
  s += "  OCLVM_PTR(" + t + ", out)[i] = (" + t + ")(start + step * (long)i);\n}\n";
  return KernelSource{std::move(s), name, ""};
}

}  // namespace

bool native_arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                       const at::Tensor& out) {
  if (!out.defined() || !is_device(out) || !native_kernels(out.device().index()) ||
      out.layout() != at::kStrided || (out.scalar_type() != at::kLong &&
                                       out.scalar_type() != at::kInt) ||
      !start.isIntegral(/*includeBool=*/false) || !end.isIntegral(/*includeBool=*/false) ||
      !step.isIntegral(/*includeBool=*/false)) {
    return false;  // floating ranges round as the CPU's vectorised loop does: its kernel answers
  }
  const int64_t a = start.toLong(), b = end.toLong(), s = step.toLong();
  constexpr int64_t kLimit = int64_t{1} << 40;  // no sum below overflows
  const auto within = [&](int64_t v) { return v >= -kLimit && v <= kLimit; };
  if (s == 0 || (s > 0 && b < a) || (s < 0 && b > a) || !within(a) || !within(b) ||
      !within(s)) {
    return false;  // the CPU's errors, and ranges near the limits of int64
  }
  const int64_t size = (b - a + s - (s > 0 ? 1 : -1)) / s;  // ceil((b - a) / s)
  if (out.numel() == size && !out.is_contiguous()) return false;  // the CPU copies into it
  if (out.numel() != 0 && out.numel() != size) return false;  // the CPU's resize warning
  if (out.scalar_type() == at::kInt &&
      (std::max(a, a + s * std::max<int64_t>(size - 1, 0)) > INT32_MAX ||
       std::min(a, a + s * std::max<int64_t>(size - 1, 0)) < INT32_MIN)) {
    return false;  // values past int32: the CPU's conversion
  }
  const char* type = cl_type(out.scalar_type());
  const std::shared_ptr<const Kernel> kernel =
      native_kernel(out.device().index(), NativeKernelFamily::kRange,
                    static_cast<uint64_t>(out.scalar_type()), [&] { return arange_source(type); });
  if (kernel == nullptr) return false;
  if (out.numel() != size) out.resize_({size});  // an empty out, as the CPU's arange_out
  if (size == 0) return true;
  run_native_kernel(kernel, out,
                    {blob_arg(out, KernelAccess::kWrite), LaunchArg::of(a), LaunchArg::of(s),
                     LaunchArg::of(static_cast<uint64_t>(size))},
                    static_cast<size_t>(size));
  count_native_launch();
  return true;
}

bool native_foreach_pointwise_(BinaryOp op, at::TensorList self, at::TensorList first,
                               at::TensorList second, at::ArrayRef<at::Scalar> scalars,
                               bool one_scalar) {
  const size_t n = self.size();
  if (first.size() != n || (op != BinaryOp::kLerp && second.size() != n) ||
      scalars.size() != (one_scalar ? 1 : n)) {
    return false;  // the CPU's error
  }
  return foreach_tensor(
      self,
      [&](size_t i) {
        return native_pointwise_(op, self[i], first[i],
                                 op == BinaryOp::kLerp ? nullptr : &second[i],
                                 scalar_for(scalars, one_scalar, i));
      },
      [&](size_t i) {
        at::Tensor target = self[i];
        const at::Scalar& value = scalar_for(scalars, one_scalar, i);
        switch (op) {
          case BinaryOp::kAddcmul:
            at::_ops::addcmul_::redispatch(kDevice, target, first[i], second[i], value);
            break;
          case BinaryOp::kAddcdiv:
            at::_ops::addcdiv_::redispatch(kDevice, target, first[i], second[i], value);
            break;
          case BinaryOp::kLerp:
            at::_ops::lerp__Scalar::redispatch(kDevice, target, first[i], value);
            break;
          default: TORCH_INTERNAL_ASSERT(false, "no per-tensor operator for ", op_name(op));
        }
      });
}

std::optional<std::vector<at::Tensor>> native_foreach_sqrt(at::TensorList self) {
  std::vector<at::Tensor> results(self.size());
  const bool ran = foreach_tensor(
      self,
      [&](size_t i) {
        std::optional<at::Tensor> result = native_sqrt(self[i]);
        if (result) results[i] = std::move(*result);
        return result.has_value();
      },
      [&](size_t i) { results[i] = at::_ops::sqrt::redispatch(kDevice, self[i]); });
  if (!ran) return std::nullopt;
  return results;
}

std::optional<at::Tensor> native_tanh_backward(const at::Tensor& grad, const at::Tensor& output) {
  // Two device tensors of one floating dtype (tanh_backward checks every tensor's device).
  if (!grad.defined() || !output.defined() || !is_device(grad) || !is_device(output) ||
      grad.scalar_type() != output.scalar_type() || !at::isFloatingType(grad.scalar_type())) {
    return std::nullopt;  // compute_type refuses the float8 types
  }
  return native_binary(BinaryOp::kTanhBackward, grad, output, 1);
}

namespace {

// The source of tril (`lower`) or triu over `batch` merged leading dimensions: the elements move
// as the integer type `t` of their size, and zero bits are every dtype's zero.
KernelSource triangle_source(const std::string& t, size_t batch, bool lower) {
  const std::string name = std::string(lower ? "oclvm_tril_" : "oclvm_triu_") + t + "_b" +
                           std::to_string(batch);
  std::string s = "__kernel void " + name + "(OCLVM_BLOB(" + t + ", out), OCLVM_BLOB(" + t +
                  ", a), ulong n, long rows, long cols, long sr, long sc, long diagonal";
  for (size_t d = 0; d < batch; ++d) {
    s += ", long bs" + std::to_string(d) + ", long ba" + std::to_string(d);
  }
  s += ") {\n  const ulong i = get_global_id(0);\n  if (i >= n) return;\n";
  s += "  const long col = (long)(i % (ulong)cols);\n  ulong rest = i / (ulong)cols;\n";
  s += "  const long row = (long)(rest % (ulong)rows);\n  rest /= (ulong)rows;\n";
  s += "  long ia = row * sr + col * sc;\n";
  for (size_t d = batch; d-- > 0;) {
    const std::string i = std::to_string(d);
    s += d == 0 ? "  ia += (long)rest * ba0;\n"
                : "  ia += (long)(rest % (ulong)bs" + i + ") * ba" + i + "; rest /= (ulong)bs" +
                      i + ";\n";
  }
  s += std::string("  OCLVM_PTR(") + t + ", out)[i] = col - row " + (lower ? "<=" : ">=") +
       " diagonal ? OCLVM_PTR(" + t + ", a)[ia] : (" + t + ")0;\n}\n";
  return KernelSource{std::move(s), name, ""};
}

}  // namespace

std::optional<at::Tensor> native_triangle(const at::Tensor& self, int64_t diagonal, bool lower) {
  if (!self.defined() || !is_device(self) || !native_kernels(self.device().index()) ||
      self.layout() != at::kStrided || self.is_conj() || self.is_neg() || self.dim() < 2) {
    return std::nullopt;  // the CPU's error (fewer than two dimensions), or its kernel
  }
  switch (self.scalar_type()) {  // the CPU kernel's dtypes
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong:
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16: case at::kBool:
    case at::kComplexHalf: case at::kComplexFloat:
      break;
    default:
      return std::nullopt;  // its error, or complex128 (16 bytes)
  }
  const char* bits = cl_bits_type(self.itemsize());  // an integer type of the element's size
  if (bits == nullptr) return std::nullopt;               // complex128
  at::Tensor out = at::empty(self.sizes(), self.options());  // contiguous, as the CPU's
  if (out.numel() == 0) return out;
  // The leading dimensions, size-1 ones dropped and neighbours that step as one merged.
  const int64_t rank = self.dim();
  std::vector<std::pair<int64_t, int64_t>> batch;  // (size, stride)
  for (int64_t d = 0; d < rank - 2; ++d) {
    const int64_t size = self.size(d), stride = self.stride(d);
    if (size == 1) continue;
    if (!batch.empty() && batch.back().second == stride * size) {
      batch.back() = {batch.back().first * size, stride};
    } else {
      batch.emplace_back(size, stride);
    }
  }
  if (batch.size() > kMaxRank) return std::nullopt;
  const uint64_t id = (static_cast<uint64_t>(self.itemsize()) << 16) |
                      (static_cast<uint64_t>(batch.size()) << 8) | (lower ? 1u : 0u);
  const std::shared_ptr<const Kernel> kernel =
      native_kernel(self.device().index(), NativeKernelFamily::kTriangle, id,
                    [&] { return triangle_source(bits, batch.size(), lower); });
  if (kernel == nullptr) return std::nullopt;
  // A diagonal past every column keeps (tril) or clears (triu) the whole matrix: clamped so the
  // kernel's comparison cannot overflow.
  const int64_t rows = self.size(rank - 2), cols = self.size(rank - 1);
  const int64_t clamped = std::clamp<int64_t>(diagonal, -rows - 1, cols + 1);
  std::vector<LaunchArg> args{blob_arg(out, KernelAccess::kWrite),
                              blob_arg(self, KernelAccess::kRead),
                              LaunchArg::of(static_cast<uint64_t>(out.numel())),
                              LaunchArg::of(rows),
                              LaunchArg::of(cols),
                              LaunchArg::of(self.stride(rank - 2)),
                              LaunchArg::of(self.stride(rank - 1)),
                              LaunchArg::of(clamped)};
  for (const auto& [size, stride] : batch) {
    args.push_back(LaunchArg::of(size));
    args.push_back(LaunchArg::of(stride));
  }
  run_native_kernel(kernel, out, args, static_cast<size_t>(out.numel()));
  count_native_launch();
  return out;
}
std::optional<at::Tensor> native_cat(const at::ITensorListRef& tensors, int64_t dim) {
  const at::MaterializedITensorListRef inputs = tensors.materialize();
  // The inputs the CPU's cat checks its shapes against: all but legacy empty tensors (sizes [0]).
  std::vector<const at::Tensor*> taken;
  for (const at::Tensor& t : inputs) {
    // Every tensor on one native-path device (cat checks all their devices), of one dtype (no
    // promotion), without conjugate or negative bits, not zero-dimensional (the CPU's error).
    if (!is_device(t) || t.device() != inputs[0].get().device() || t.layout() != at::kStrided ||
        t.scalar_type() != inputs[0].get().scalar_type() || t.is_conj() || t.is_neg() ||
        t.dim() == 0) {
      return std::nullopt;
    }
    if (!(t.dim() == 1 && t.size(0) == 0)) taken.push_back(&t);
  }
  if (taken.empty() || !native_kernels(taken[0]->device().index())) return std::nullopt;
  const at::Tensor& first = *taken[0];
  const int64_t rank = first.dim();
  if (dim < -rank || dim >= rank) return std::nullopt;  // the CPU's error
  if (dim < 0) dim += rank;
  std::vector<int64_t> sizes = first.sizes().vec();
  sizes[dim] = 0;
  for (const at::Tensor* t : taken) {
    if (t->dim() != rank) return std::nullopt;
    for (int64_t d = 0; d < rank; ++d) {
      if (d != dim && t->size(d) != first.size(d)) return std::nullopt;  // the CPU's error
    }
    sizes[dim] += t->size(dim);
  }
  // The CPU's layout of the result: the inputs' suggested memory format when they all suggest one
  // that is not contiguous, else contiguous.
  std::optional<at::MemoryFormat> format;
  for (const at::Tensor& t : inputs) {
    const at::MemoryFormat suggested = t.suggest_memory_format();
    if (suggested == at::MemoryFormat::Contiguous || (format && *format != suggested)) {
      format = at::MemoryFormat::Contiguous;
      break;
    }
    format = suggested;
  }
  at::Tensor out = at::empty(sizes, first.options().memory_format(*format));
  int64_t offset = 0;
  for (const at::Tensor* t : taken) {
    const int64_t size = t->size(dim);
    if (t->numel() != 0) {
      at::Tensor slice = out.narrow(dim, offset, size);
      if (!copy_for_operator(*t, slice)) slice.copy_(*t);  // past the kernels' rank
    }
    offset += size;
  }
  return out;
}


}  // namespace oclvm::torch_adapter
