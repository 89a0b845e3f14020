// adapters/torch/native_statistics.cc — the native path's statistics over any dimensions: the
// extremes (amax/amin, max/min with indices, argmax/argmin), the moments (var, std and their
// means) and vector norms; one generated OpenCL kernel per (statistic, dtype, ranks), one
// work-item per result element (native_kernels.h).
//
// Thread-safety: any thread, as the native kernel table.

#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>
#include <c10/util/accumulate.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/native_kernel_table.h"
#include "adapters/torch/native_kernels.h"
#include "adapters/torch/native_reduction_walks.h"

namespace oclvm::torch_adapter {

// Note [Native moments]
// ~~~~~~~~~~~~~~~~~~~~~
// var.correction and std.correction, and var_mean and std_mean, of float32, float64, float16 and
// bfloat16 tensors over any dimensions: one launch each, a work-item per result element (the walks
// of the sums) in two passes over its reduced elements, each a compensated (Kahan) sum in the
// computation's type: the mean, then the squared deviations from it, divided by max(0, n -
// correction) and, for std, its correctly rounded square root. The CPU accumulates float32 in
// float64 (Welford's updates); the compensated passes keep the device within a unit in the last
// place (float32 on 5 x 37 x 6 values near 100, variances near 9: 6.6e-7 from the float64 value
// against the CPU's 4.7e-7; float64: 3.6e-15 from NumPy's two passes against the CPU's Welford
// 3.9e-14). A sum past the largest finite value stays infinite: the compensation stops there rather
// than turn inf - inf into NaN. Not taken: integer and complex tensors, a correction that leaves no
// degree of freedom (the CPU's warning, and its NaN or infinity), dimensions out of range or
// repeated.
//
// Note [Native norms]
// ~~~~~~~~~~~~~~~~~~~
// linalg_vector_norm (torch.linalg.vector_norm, torch.norm's vector forms, F.normalize) of a
// float32, float64, float16 or bfloat16 tensor over any dimensions, any real order: one launch, a
// work-item per result element over the sums' walks, in the computation's type. Orders 2, 1 and
// 0 and any other p are compensated (Kahan) sums of x^2, |x|, x != 0 and |x|^p, then sqrt or the
// 1/p-th power (correctly rounded sqrt); the infinite orders the largest or smallest |x|, NaN
// winning, as in the CPU's kernels; a sum that overflows stays infinite, as the CPU's. Within a
// few units in the last place of the CPU's (the
// order's power amplifies pow's own error: p = 0.5 in float64, 2.2e-15 relative). Not taken: a
// dtype= other than self's, integer and complex tensors, an empty reduction (the CPU's zero or
// error).
//
// Note [Native extremes]
// ~~~~~~~~~~~~~~~~~~~~~~
// amax and amin over any dimensions, max.dim and min.dim (values and int64 indices), argmax and
// argmin (along a dimension, or into the flattened tensor), and max() and min() of every element,
// of any dtype the kernels read (floating, integer, bool), any layout: one launch each, one
// work-item per element of the result walking its reduced elements in row-major order (the kept
// and reduced dimensions merged as the sums' are), the result contiguous as the CPU's. The value
// is exact, so every result is the CPU's bits (but a bfloat16 NaN's sign and payload: it is
// written as 0x7FC0): the first occurrence wins a tie, and the first NaN wins over every number
// (its index too), as in the CPU's kernels; float16 and bfloat16 compare as float. Not taken: a
// reduction over no elements (the CPU's error), dimensions out of range or repeated, max.dim of a
// 0-dim tensor, argmax and argmin of bool (the CPU's errors), float64 on a device without it.

namespace {

// Launches a statistics kernel, one work-item per element of its results: `outputs` (undefined
// ones left out) written, `self` read, then the result's element count, `m`, `value` in the
// computation's type when there is one, and the walks.
void launch_statistic(const std::shared_ptr<const Kernel>& kernel,
                      std::initializer_list<const at::Tensor*> outputs, const at::Tensor& self,
                      int64_t m, std::optional<double> value, const Walk& kept,
                      const Walk& summed) {
  std::vector<LaunchArg> args;
  const at::Tensor* out = nullptr;
  for (const at::Tensor* t : outputs) {
    if (!t->defined()) continue;
    if (out == nullptr) out = t;
    args.push_back(blob_arg(*t, KernelAccess::kWrite));
  }
  args.push_back(blob_arg(self, KernelAccess::kRead));
  args.push_back(LaunchArg::of(static_cast<uint64_t>(out->numel())));
  args.push_back(LaunchArg::of(static_cast<uint64_t>(m)));
  if (value) {
    args.push_back(self.scalar_type() == at::kDouble ? LaunchArg::of(*value)
                                                     : LaunchArg::of(static_cast<float>(*value)));
  }
  push_kept(args, kept);
  push_reduced(args, summed);
  run_native_kernel(kernel, *out, args, static_cast<size_t>(out->numel()));
  count_native_launch();
}

// The orders of linalg_vector_norm the norm kernel has its own steps for; kPower is any other.
enum class NormKind : uint64_t { kTwo, kOne, kInf, kMinusInf, kZero, kPower };

// The source of the extreme kernel: the maximum (or minimum) of each result element's reduced
// elements, in the order of their row-major index j, written to `values` and (or) its j to
// `indices`. The first occurrence wins a tie; the first NaN wins over every number, as on the CPU.
KernelSource extreme_source(at::ScalarType in, size_t kept, size_t reduced, bool max,
                            bool values, bool indices) {
  const at::ScalarType compute = opmath_type(in);
  const std::string t = cl_type(compute), held = storage_type(in);
  const std::string name = std::string("oclvm_") + (max ? "max" : "min") +
                           (values ? "_values" : "") + (indices ? "_indices" : "") + "_" +
                           kernel_type_name(in) + "_k" + std::to_string(kept) + "_r" +
                           std::to_string(reduced);
  std::string s;
  if (in == at::kDouble) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  if (in == at::kBFloat16) s += kBFloat16Source;
  s += "__kernel void " + name + "(";
  if (values) s += "OCLVM_BLOB(" + held + ", vals), ";
  if (indices) s += "OCLVM_BLOB(long, idx), ";
  s += "OCLVM_BLOB(" + held + ", a), ulong n, ulong m" + kept_parameters(kept) +
       reduced_parameters(reduced) + ") {\n";
  s += "  const ulong i = get_global_id(0);\n  if (i >= n) return;\n" + kept_offsets(kept);
  s += "  " + t + " best = 0;\n  ulong at = 0;\n";
  s += "  for (ulong j = 0; j < m; ++j) {\n" + reduced_offset(reduced, "j");
  s += "    const " + t + " v = " + load_element(in, "a", "ia + ir") + ";\n";
  const std::string beats = max ? "v > best" : "v < best";
  if (at::isFloatingType(in)) {
    s += "    if (j == 0 || (!isnan(best) && (isnan(v) || " + beats + "))) { best = v; at = j; }\n";
  } else {
    s += "    if (j == 0 || " + beats + ") { best = v; at = j; }\n";
  }
  s += "  }\n";
  if (values) s += "  " + store_element(in, "vals", "io", "best", compute) + "\n";
  if (indices) s += "  OCLVM_PTR(long, idx)[io] = (long)at;\n";
  s += "}\n";
  return KernelSource{std::move(s), name, ""};
}

// The extreme kernel over `reduced` of `self` into `values` and (or) `indices` (either undefined),
// both contiguous and of the CPU's shape for `keepdim`; false, having launched nothing, when the
// layout or the device refuses it.
bool launch_extreme(const at::Tensor& self, const std::vector<bool>& reduced, bool keepdim,
                    bool max, const at::Tensor& values, const at::Tensor& indices) {
  const at::Tensor& out = values.defined() ? values : indices;
  Walk kept, summed;
  int64_t m = 1;
  if (!reduction_walks(self, reduced, keepdim, out, kept, summed, m)) return false;
  const at::ScalarType in = self.scalar_type();
  const bool want_values = values.defined(), want_indices = indices.defined();
  const uint64_t variant = (want_values ? 1 : 0) | (want_indices ? 2 : 0);
  const std::shared_ptr<const Kernel> kernel = native_kernel(
      self.device().index(), NativeKernelFamily::kReduction,
      kernel_id(max ? RowOp::kMax : RowOp::kMin, in, in, kept.rank, summed.rank) | (variant << 44),
      [&] { return extreme_source(in, kept.rank, summed.rank, max, want_values, want_indices); });
  if (kernel == nullptr) return false;
  launch_statistic(kernel, {&values, &indices}, self, m, std::nullopt, kept, summed);
  return true;
}

// The source of the moments kernel: each result element's variance (or, with `root`, standard
// deviation) of its reduced elements, divided by `divisor`, and with `with_mean` their mean, in
// the computation's type. Two passes, each a compensated (Kahan) sum: the mean, then the squared
// deviations from it, so neither the row's length nor its offset from 0 costs accuracy.
KernelSource moments_source(at::ScalarType in, size_t kept, size_t reduced, bool root,
                            bool with_mean) {
  const at::ScalarType compute = opmath_type(in);
  const std::string t = cl_type(compute), held = storage_type(in);
  const std::string name = std::string("oclvm_") + (root ? "std" : "var") +
                           (with_mean ? "_mean_" : "_") + kernel_type_name(in) + "_k" +
                           std::to_string(kept) + "_r" + std::to_string(reduced);
  std::string s;
  if (in == at::kDouble) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  if (in == at::kBFloat16) s += kBFloat16Source;
  s += "#pragma OPENCL FP_CONTRACT OFF\n";
  s += "__kernel void " + name + "(OCLVM_BLOB(" + held + ", out), ";
  if (with_mean) s += "OCLVM_BLOB(" + held + ", means), ";
  s += "OCLVM_BLOB(" + held + ", a), ulong n, ulong m, " + t + " divisor" +
       kept_parameters(kept) + reduced_parameters(reduced) + ") {\n";
  s += "  const ulong i = get_global_id(0);\n  if (i >= n) return;\n" + kept_offsets(kept);
  const auto compensated = [&](const std::string& sum, const std::string& term) {
    s += "  for (ulong j = 0; j < m; ++j) {\n" + reduced_offset(reduced, "j");
    s += "    const " + t + " y = " + term + " - " + sum + "_c;\n";
    s += "    const " + t + " next = " + sum + " + y;\n";
    // past the largest finite value the compensation would be inf - inf: the sum stays inf
    s += "    " + sum + "_c = isfinite(next) ? (next - " + sum + ") - y : 0;\n    " + sum +
         " = next;\n  }\n";
  };
  const std::string x = "(" + t + ")" + load_element(in, "a", "ia + ir");
  s += "  " + t + " total = 0, total_c = 0;\n";
  compensated("total", x);
  s += "  const " + t + " mean = total / (" + t + ")m;\n";
  s += "  " + t + " squares = 0, squares_c = 0;\n";
  compensated("squares", "(" + x + " - mean) * (" + x + " - mean)");
  s += "  const " + t + " var = squares / divisor;\n";
  s += "  " + store_element(in, "out", "io", root ? "sqrt(var)" : "var", compute) + "\n";
  if (with_mean) s += "  " + store_element(in, "means", "io", "mean", compute) + "\n";
  s += "}\n";
  return KernelSource{std::move(s), name,
                      compute == at::kFloat ? "-cl-fp32-correctly-rounded-divide-sqrt" : ""};
}

// The moments kernel over `reduced` of `self` into `out` and (unless undefined) `means`, both
// contiguous and of the CPU's shape for `keepdim`; false, having launched nothing, when the layout
// or the device refuses it.
bool launch_moments(const at::Tensor& self, const std::vector<bool>& reduced, bool keepdim,
                    double divisor, bool root, const at::Tensor& out, const at::Tensor& means) {
  Walk kept, summed;
  int64_t m = 1;
  if (!reduction_walks(self, reduced, keepdim, out, kept, summed, m)) return false;
  const at::ScalarType in = self.scalar_type();
  const bool with_mean = means.defined();
  const uint64_t variant = (root ? 1 : 0) | (with_mean ? 2 : 0);
  const std::shared_ptr<const Kernel> kernel = native_kernel(
      self.device().index(), NativeKernelFamily::kReduction,
      kernel_id(RowOp::kMoments, in, in, kept.rank, summed.rank) | (variant << 44),
      [&] { return moments_source(in, kept.rank, summed.rank, root, with_mean); });
  if (kernel == nullptr) return false;
  launch_statistic(kernel, {&out, &means}, self, m, divisor, kept, summed);
  return true;
}

// The source of the norm kernel: each result element's vector norm of `kind` (for kPower, of the
// order `p`, an argument) over its reduced elements, in the computation's type: the sums are
// compensated (Kahan), the extremes exact with NaN winning, as in the CPU's kernels.
KernelSource norm_source(at::ScalarType in, size_t kept, size_t reduced, NormKind kind) {
  const at::ScalarType compute = opmath_type(in);
  const std::string t = cl_type(compute), held = storage_type(in);
  const std::string name = "oclvm_norm" + std::to_string(static_cast<int>(kind)) + "_" +
                           kernel_type_name(in) + "_k" + std::to_string(kept) + "_r" +
                           std::to_string(reduced);
  std::string s;
  if (in == at::kDouble) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  if (in == at::kBFloat16) s += kBFloat16Source;
  s += "#pragma OPENCL FP_CONTRACT OFF\n";
  s += "__kernel void " + name + "(OCLVM_BLOB(" + held + ", out), OCLVM_BLOB(" + held +
       ", a), ulong n, ulong m, " + t + " p" + kept_parameters(kept) +
       reduced_parameters(reduced) + ") {\n";
  s += "  const ulong i = get_global_id(0);\n  if (i >= n) return;\n" + kept_offsets(kept);
  const bool extreme = kind == NormKind::kInf || kind == NormKind::kMinusInf;
  s += "  " + t + " acc = 0, acc_c = 0;\n";
  s += "  for (ulong j = 0; j < m; ++j) {\n" + reduced_offset(reduced, "j");
  s += "    const " + t + " v = fabs((" + t + ")" + load_element(in, "a", "ia + ir") + ");\n";
  if (extreme) {
    const std::string beats = kind == NormKind::kInf ? "v > acc" : "v < acc";
    s += "    if (j == 0 || (!isnan(acc) && (isnan(v) || " + beats + "))) acc = v;\n  }\n";
  } else {
    const std::string term = kind == NormKind::kTwo    ? "v * v"
                             : kind == NormKind::kOne  ? "v"
                             : kind == NormKind::kZero ? "(" + t + ")(v != 0)"
                                                       : "pow(v, p)";
    s += "    const " + t + " y = " + term + " - acc_c;\n";
    s += "    const " + t + " next = acc + y;\n";
    s += "    acc_c = isfinite(next) ? (next - acc) - y : 0;\n";  // inf stays inf
    s += "    acc = next;\n  }\n";
  }
  const std::string value = kind == NormKind::kTwo     ? "sqrt(acc)"
                            : kind == NormKind::kPower ? "pow(acc, (" + t + ")1 / p)"
                                                       : "acc";
  s += "  " + store_element(in, "out", "io", value, compute) + "\n}\n";
  return KernelSource{std::move(s), name,
                      compute == at::kFloat ? "-cl-fp32-correctly-rounded-divide-sqrt" : ""};
}

// The norm kernel over `reduced` of `self` into `out`, contiguous and of the CPU's shape for
// `keepdim`; false, having launched nothing, when the layout or the device refuses it.
bool launch_norm(const at::Tensor& self, const std::vector<bool>& reduced, bool keepdim,
                 NormKind kind, double p, const at::Tensor& out) {
  Walk kept, summed;
  int64_t m = 1;
  if (!reduction_walks(self, reduced, keepdim, out, kept, summed, m)) return false;
  const at::ScalarType in = self.scalar_type();
  const std::shared_ptr<const Kernel> kernel = native_kernel(
      self.device().index(), NativeKernelFamily::kReduction,
      kernel_id(RowOp::kNorm, in, in, kept.rank, summed.rank) |
          (static_cast<uint64_t>(kind) << 44),
      [&] { return norm_source(in, kept.rank, summed.rank, kind); });
  if (kernel == nullptr) return false;
  launch_statistic(kernel, {&out}, self, m, p, kept, summed);
  return true;
}

// Which dimensions of `self` a reduction over `dims` reduces (every one for an empty list);
// nullopt for a dimension out of range or repeated (the CPU's errors).
std::optional<std::vector<bool>> reduced_dimensions(const at::Tensor& self, at::IntArrayRef dims) {
  const int64_t rank = self.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), dims.empty());
  for (const int64_t d : dims) {
    if (d < -std::max<int64_t>(rank, 1) || d >= std::max<int64_t>(rank, 1)) return std::nullopt;
    if (rank == 0) {  // dimension 0 or -1 of a 0-dim tensor, the tensor itself, once
      if (dims.size() > 1) return std::nullopt;
      continue;
    }
    const size_t wrapped = static_cast<size_t>(d < 0 ? d + rank : d);
    if (reduced[wrapped]) return std::nullopt;
    reduced[wrapped] = true;
  }
  return reduced;
}

// The result shape of a reduction over `reduced`.
std::vector<int64_t> reduced_sizes(const at::Tensor& self, const std::vector<bool>& reduced,
                                   bool keepdim) {
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!reduced[d]) {
      sizes.push_back(self.size(d));
    } else if (keepdim) {
      sizes.push_back(1);
    }
  }
  return sizes;
}

// Whether the statistics take `self`: a strided device tensor of a native-path device, of a dtype
// the kernels read (a floating one with `floating`), float64 only where the device has it.
bool statistic_operand(const at::Tensor& self, bool floating) {
  return self.defined() && is_device(self) && self.layout() == at::kStrided && !self.is_conj() &&
         !self.is_neg() && storage_type(self.scalar_type()) != nullptr &&
         (!floating || at::isFloatingType(self.scalar_type())) &&
         native_kernels(self.device().index()) &&
         (self.scalar_type() != at::kDouble || native_float64(self.device().index()));
}

// How many elements of `self` each result element of a reduction over `reduced` takes.
int64_t reduced_count(const at::Tensor& self, const std::vector<bool>& reduced) {
  int64_t m = 1;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (reduced[d]) m *= self.size(d);
  }
  return m;
}

// The extreme reduction's checks and result; `values` and `indices` say which it makes.
std::optional<std::pair<at::Tensor, at::Tensor>> extreme(const at::Tensor& self,
                                                         at::IntArrayRef dims, bool keepdim,
                                                         bool max, bool values, bool indices) {
  if (!statistic_operand(self, /*floating=*/false)) return std::nullopt;
  const std::optional<std::vector<bool>> reduced = reduced_dimensions(self, dims);
  if (!reduced) return std::nullopt;
  // the CPU's error: no element to take
  if (reduced_count(self, *reduced) == 0) return std::nullopt;
  const std::vector<int64_t> sizes = reduced_sizes(self, *reduced, keepdim);
  at::Tensor out_values, out_indices;
  if (values) out_values = at::empty(sizes, self.options());
  if (indices) out_indices = at::empty(sizes, self.options().dtype(at::kLong));
  if (c10::multiply_integers(sizes) == 0) return std::make_pair(out_values, out_indices);
  if (!launch_extreme(self, *reduced, keepdim, max, out_values, out_indices)) return std::nullopt;
  return std::make_pair(std::move(out_values), std::move(out_indices));
}

}  // namespace

std::optional<at::Tensor> native_amax(const at::Tensor& self, at::IntArrayRef dim, bool keepdim,
                                      bool max) {
  auto result = extreme(self, dim, keepdim, max, /*values=*/true, /*indices=*/false);
  if (!result) return std::nullopt;
  return std::move(result->first);
}

std::optional<std::tuple<at::Tensor, at::Tensor>> native_max_dim(const at::Tensor& self,
                                                                 int64_t dim, bool keepdim,
                                                                 bool max) {
  if (self.defined() && self.dim() == 0) return std::nullopt;  // the CPU's 0-dim rules
  auto result = extreme(self, {dim}, keepdim, max, /*values=*/true, /*indices=*/true);
  if (!result) return std::nullopt;
  return std::make_tuple(std::move(result->first), std::move(result->second));
}

std::optional<at::Tensor> native_argmax(const at::Tensor& self, std::optional<int64_t> dim,
                                        bool keepdim, bool max) {
  if (!self.defined() || (dim && self.dim() == 0) || self.scalar_type() == at::kBool) {
    return std::nullopt;  // the CPU's 0-dim rules, and its error for bool
  }
  // Without a dimension: the index into the flattened tensor; keepdim keeps every dimension as 1.
  auto result = dim ? extreme(self, {*dim}, keepdim, max, false, true)
                    : extreme(self, {}, keepdim, max, false, true);
  if (!result) return std::nullopt;
  return std::move(result->second);
}

std::optional<at::Tensor> native_max_all(const at::Tensor& self, bool max) {
  auto result = extreme(self, {}, /*keepdim=*/false, max, /*values=*/true, /*indices=*/false);
  if (!result) return std::nullopt;
  return std::move(result->first);
}

std::optional<std::tuple<at::Tensor, at::Tensor>> native_moments(
    const at::Tensor& self, at::OptionalIntArrayRef dim,
    const std::optional<at::Scalar>& correction, bool keepdim, bool root, bool with_mean) {
  if (!statistic_operand(self, /*floating=*/true) ||
      (correction && (correction->isComplex() || correction->isBoolean()))) {
    return std::nullopt;  // integers and complex: the CPU's error or its kernel
  }
  const std::optional<std::vector<bool>> reduced =
      reduced_dimensions(self, dim ? *dim : at::IntArrayRef());
  if (!reduced) return std::nullopt;
  const int64_t m = reduced_count(self, *reduced);
  const double divisor = static_cast<double>(m) - (correction ? correction->toDouble() : 1.0);
  if (m == 0 || !(divisor > 0)) return std::nullopt;  // the CPU's warning and its NaN or inf
  const std::vector<int64_t> sizes = reduced_sizes(self, *reduced, keepdim);
  at::Tensor out = at::empty(sizes, self.options());
  at::Tensor means = with_mean ? at::empty(sizes, self.options()) : at::Tensor();
  if (out.numel() != 0 && !launch_moments(self, *reduced, keepdim, divisor, root, out, means)) {
    return std::nullopt;
  }
  return std::make_tuple(std::move(out), std::move(means));
}

std::optional<at::Tensor> native_vector_norm(const at::Tensor& self, const at::Scalar& ord,
                                             at::OptionalIntArrayRef dim, bool keepdim,
                                             std::optional<at::ScalarType> dtype) {
  if (!statistic_operand(self, /*floating=*/true) || (dtype && *dtype != self.scalar_type()) ||
      ord.isComplex() || ord.isBoolean()) {
    return std::nullopt;  // integers and complex: the CPU's error or its kernel
  }
  const double p = ord.toDouble();
  if (std::isnan(p)) return std::nullopt;
  const NormKind kind = p == 2                                              ? NormKind::kTwo
                        : p == 1                                            ? NormKind::kOne
                        : p == std::numeric_limits<double>::infinity()      ? NormKind::kInf
                        : p == -std::numeric_limits<double>::infinity()     ? NormKind::kMinusInf
                        : p == 0                                            ? NormKind::kZero
                                                                            : NormKind::kPower;
  const std::optional<std::vector<bool>> reduced =
      reduced_dimensions(self, dim ? *dim : at::IntArrayRef());
  if (!reduced) return std::nullopt;
  // the CPU's value or error for an empty reduction
  if (reduced_count(self, *reduced) == 0) return std::nullopt;
  at::Tensor out = at::empty(reduced_sizes(self, *reduced, keepdim), self.options());
  if (out.numel() != 0 && !launch_norm(self, *reduced, keepdim, kind, p, out)) {
    return std::nullopt;
  }
  return out;
}

}  // namespace oclvm::torch_adapter
