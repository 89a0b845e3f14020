// adapters/torch/native_reduce.cc — reductions along rows on the native path: sum over
// dimensions, all and any (over one or every dimension), and softmax and its backward over one
// dimension; one generated OpenCL kernel per (operator, dtypes, ranks), one work-item per row
// (native_kernels.h).

#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/host_view.h"
#include "adapters/torch/native_kernel_table.h"
#include "adapters/torch/native_kernels.h"
#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"

namespace oclvm::torch_adapter {

// Note [Native sums]
// ~~~~~~~~~~~~~~~~~~
// sum.dim_IntList (x.sum(dims), x.sum(), a bias's gradient) of a float32, float64, float16,
// bfloat16, integer or bool device tensor on a native-path device: the result has the CPU's dtype
// (int64 for integers and bool, or a wider floating `dtype=`: float16 and bfloat16 to float32, any
// floating dtype to float64) and shape, contiguous as the CPU's. Each work-item computes one
// element of the result from its index: the kept dimensions give its offset in self and in the
// result, and it walks every element of the reduced dimensions. Both sets of dimensions drop their
// size-1 members and merge neighbours that step as one, so a reduction over a contiguous tail is
// one loop with one stride; the sizes and strides are kernel arguments.
//
// Floating sums add in the result's computation type (float for float16 and bfloat16, as the CPU's
// accumulators; each element converted to it, the sum rounded once) in the order of the CPU's
// scalar cascade (aten's multi-level row sum, here over all the reduced elements in order: runs of
// 2^p elements into a first level, whole runs up three more levels). The CPU walks other orders
// where it vectorises or interleaves (a contiguous reduction's lanes, four interleaved chains for a
// few trailing columns) and cascades each inner row on its own when the reduced dimensions do not
// merge, adding the rows' sums one after another, so the values agree with its to its rounding, not
// always to the bit, with the cascade's O(log n) error bound either way; infinities and NaN come
// out as on the CPU. Integer sums accumulate in int64 and wrap as the CPU's do: equal to the bit.
// all and any (over a dimension or every element) are the integer kernel with a logical and or or
// (a bool result, uint8 for uint8 as on the CPU; a NaN is true, as C++'s conversion to bool).
//
// _softmax and _softmax_backward_data of float32, float64, float16 and bfloat16 tensors (the last
// two computed in float) over one dimension, any layout, the result contiguous as the CPU's, walk
// each row with the same offsets: softmax takes the row's maximum, writes exp(x - max) and adds it
// up, then scales the row by 1 / the sum (the CPU's last-dimension kernel's steps; OpenCL's exp and
// the order of the sum keep it within rounding of the CPU's); the backward computes (g - sum(g *
// y)) * y. _log_softmax writes x - max - log(sum), subtracted in the CPU kernel's order, and its
// backward g - exp(y) * sum(g). A NaN in a row gives a row of NaN, as on the CPU. For float16 and
// bfloat16, softmax over the last dimension rounds each element once and over another rounds exp(x
// - max) to the dtype before it scales it, as the CPU's two kernels do; log_softmax rounds once,
// where the CPU's last-dimension kernel loses values near 0 to cancellation (-0.0029 for -0.0025 in
// float16). Not taken: half_to_float, other dtypes, the CPU's errors.
//
// Not taken by sum (the CPU kernel answers): a `dtype=` other than the result's own or those
// widenings, zero-dimensional self, dimensions out of range or repeated (the CPU's errors), more
// than kMaxRank kept or reduced dimensions after merging, float64 on a device without it.
// A reduction to few elements from many runs on few work-items: a whole-tensor sum is one
// work-item's loop, slow on a GPU for a large tensor.

// Note [Native moments]
// ~~~~~~~~~~~~~~~~~~~~~
// var.correction and std.correction, and var_mean and std_mean, of float32, float64, float16 and
// bfloat16 tensors over any dimensions: one launch each, a work-item per result element (the
// walks of the sums) in two passes over its reduced elements, each a compensated (Kahan) sum in
// the computation's type: the mean, then the squared deviations from it, divided by
// max(0, n - correction) and, for std, its correctly rounded square root. The CPU accumulates
// float32 in float64 (Welford's updates); the compensated passes keep the device within a unit
// in the last place (float32 on 5 x 37 x 6 values near 100, variances near 9: 6.6e-7 from the
// float64 value against the CPU's 4.7e-7; float64: 3.6e-15 from NumPy's two passes against the
// CPU's Welford 3.9e-14). Not taken: integer and complex tensors, a correction
// that leaves no degree of freedom (the CPU's warning, and its NaN or infinity), dimensions out
// of range or repeated.
//
// Note [Native norms]
// ~~~~~~~~~~~~~~~~~~~
// linalg_vector_norm (torch.linalg.vector_norm, torch.norm's vector forms, F.normalize) of a
// float32, float64, float16 or bfloat16 tensor over any dimensions, any real order: one launch, a
// work-item per result element over the sums' walks, in the computation's type. Orders 2, 1 and
// 0 and any other p are compensated (Kahan) sums of x^2, |x|, x != 0 and |x|^p, then sqrt or the
// 1/p-th power (correctly rounded sqrt); the infinite orders the largest or smallest |x|, NaN
// winning, as in the CPU's kernels. Within a few units in the last place of the CPU's (the
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
// is exact, so every result is the CPU's bits: the first occurrence wins a tie, and the first NaN
// wins over every number (its index too), as in the CPU's kernels; float16 and bfloat16 compare
// as float. Not taken: a reduction over no elements (the CPU's error), dimensions out of range or
// repeated, max.dim of a 0-dim tensor, float64 on a device without it.

namespace {

// Dimensions of one kind, merged: their sizes, and each operand's strides in elements (the
// result's, self's, and a second input's; 0 where an operand does not walk them).
struct Walk {
  size_t rank = 0;
  std::array<int64_t, kMaxRank> sizes{};
  std::array<std::array<int64_t, kMaxRank>, 3> strides{};  // out, a, b
};

// Adds a dimension to `walk`, merged into the last one when every operand steps over both as one;
// false past kMaxRank dimensions.
bool add_dimension(Walk& walk, int64_t size, const std::array<int64_t, 3>& strides) {
  if (size == 1) return true;
  if (walk.rank > 0) {
    const size_t last = walk.rank - 1;
    bool merges = true;
    for (size_t k = 0; k < 3; ++k) merges = merges && walk.strides[k][last] == strides[k] * size;
    if (merges) {
      walk.sizes[last] *= size;
      for (size_t k = 0; k < 3; ++k) walk.strides[k][last] = strides[k];
      return true;
    }
  }
  if (walk.rank == kMaxRank) return false;
  walk.sizes[walk.rank] = size;
  for (size_t k = 0; k < 3; ++k) walk.strides[k][walk.rank] = strides[k];
  ++walk.rank;
  return true;
}

// The kernels of this file; their ids put it above the dtypes and ranks.
enum class RowOp : uint64_t {
  kSum,
  kSoftmax,
  kSoftmaxBackward,
  kAll,
  kLogSoftmax,
  kLogSoftmaxBackward,
  kAny,
  kMax,  // the extreme kernels: their ids add what they write
  kMin,
  kMoments,  // var, std and their means: the id adds what it writes
  kNorm,     // linalg_vector_norm: the id adds its order's kind
};

// The orders of linalg_vector_norm the norm kernel has its own steps for; kPower is any other.
enum class NormKind : uint64_t { kTwo, kOne, kInf, kMinusInf, kZero, kPower };

// What the sum kernel adds up: numbers, or whether every (kAll) or any (kAny) element is nonzero.
enum class Fold : uint8_t { kSum, kAll, kAny };

uint64_t kernel_id(RowOp op, at::ScalarType in, at::ScalarType out, size_t kept, size_t reduced) {
  return (static_cast<uint64_t>(op) << 32) | (static_cast<uint64_t>(in) << 24) |
         (static_cast<uint64_t>(out) << 16) | (kept << 8) | reduced;
}

// The OpenCL C that finds a work-item's offsets (io, ia, ib: of its result, self and the second
// input) from its index over the kept dimensions, whose sizes and strides are the kernel's
// arguments ks<d>, ko<d>, ka<d>, kb<d>; the outermost dimension takes what is left, with no
// division.
std::string kept_offsets(size_t kept) {
  std::string s = "  long io = 0, ia = 0, ib = 0;\n  ulong rest = i;\n";
  for (size_t d = kept; d-- > 0;) {
    const std::string i = std::to_string(d);
    s += d == 0 ? "  { const long k = (long)rest;"
                : "  { const long k = (long)(rest % (ulong)ks" + i + "); rest /= (ulong)ks" + i +
                      ";";
    s += " io += k * ko" + i + "; ia += k * ka" + i + "; ib += k * kb" + i + "; }\n";
  }
  return s;
}

std::string kept_parameters(size_t kept) {
  std::string s;
  for (size_t d = 0; d < kept; ++d) {
    const std::string i = std::to_string(d);
    s += ", long ks" + i + ", long ko" + i + ", long ka" + i + ", long kb" + i;
  }
  return s;
}

void push_kept(std::vector<LaunchArg>& args, const Walk& kept) {
  for (size_t d = 0; d < kept.rank; ++d) {
    args.push_back(LaunchArg::of(kept.sizes[d]));
    for (size_t k = 0; k < 3; ++k) args.push_back(LaunchArg::of(kept.strides[k][d]));
  }
}

// Launches `kernel` over `n` work-items on `out`'s stream: out written, the inputs read.
void launch_rows(const std::shared_ptr<const Kernel>& kernel, const at::Tensor& out,
                 std::initializer_list<const at::Tensor*> inputs, std::vector<LaunchArg> tail,
                 uint64_t n) {
  std::vector<LaunchArg> args;
  args.reserve(1 + inputs.size() + tail.size());
  args.push_back(blob_arg(out, KernelAccess::kWrite));
  for (const at::Tensor* input : inputs) args.push_back(blob_arg(*input, KernelAccess::kRead));
  args.insert(args.end(), tail.begin(), tail.end());
  run_native_kernel(kernel, out, args, static_cast<size_t>(n));
  count_native_launch();
}

// The source of the sum kernel (or, by `fold`, of all or any: whether every or some element is
// nonzero) from `in` to `out` over `kept` and `reduced` dimensions.
KernelSource sum_source(at::ScalarType in, at::ScalarType out, size_t kept, size_t reduced,
                        Fold fold) {
  const std::string ti = storage_type(in), to = storage_type(out);
  const bool logical = fold != Fold::kSum;
  const bool floating = at::isFloatingType(out) && !logical;
  // Floating sums accumulate in the result's computation type (float for float16 and bfloat16),
  // each element converted to it.
  const at::ScalarType acc_type = floating ? opmath_type(out) : logical ? at::kBool : at::kLong;
  const std::string acc = floating ? cl_type(acc_type) : logical ? "uchar" : "ulong";
  const char* prefix = fold == Fold::kAll ? "oclvm_all_" : logical ? "oclvm_any_" : "oclvm_sum_";
  const std::string name = std::string(prefix) + kernel_type_name(in) + "_" +
                           kernel_type_name(out) + "_k" + std::to_string(kept) + "_r" +
                           std::to_string(reduced);
  std::string s;
  if (in == at::kDouble || out == at::kDouble) {
    s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  }
  if (in == at::kBFloat16 || out == at::kBFloat16) s += kBFloat16Source;
  s += "__kernel void " + name + "(OCLVM_BLOB(" + to + ", out), OCLVM_BLOB(" + ti +
       ", a), ulong n, ulong m, ulong power";
  s += kept_parameters(kept);
  for (size_t d = 0; d < reduced; ++d) {
    const std::string i = std::to_string(d);
    s += ", long rs" + i + ", long ra" + i;
  }
  s += ") {\n  const ulong i = get_global_id(0);\n  if (i >= n) return;\n";
  s += kept_offsets(kept);
  // The reduced index j into its coordinates, as kept_offsets does for the kept ones.
  const auto walk = [&](const std::string& index, const std::string& size, size_t rank,
                        const std::string& indent, const auto& body) {
    for (size_t d = rank; d-- > 0;) {
      const std::string i = std::to_string(d);
      s += indent + (d == 0 ? "{ const long k = (long)" + index + ";"
                            : "{ const long k = (long)(" + index + " % (ulong)" + size + i +
                                  "); " + index + " /= (ulong)" + size + i + ";");
      s += body(i) + " }\n";
    }
  };
  // `target` += element j of the reduction, as a statement block at `indent`.
  const auto add_element = [&](const std::string& target, const std::string& indent) {
    s += indent + "{\n" + indent + "  long ir = 0;\n" + indent + "  ulong r = j;\n";
    walk("r", "rs", reduced, indent + "  ",
         [](const std::string& i) { return " ir += k * ra" + i + ";"; });
    const std::string element = load_element(in, "a", "ia + ir");
    s += indent + "  " + target +
         (fold == Fold::kAll   ? " &= " + element + " != 0"
          : fold == Fold::kAny ? " |= " + element + " != 0"
                               : " += (" + acc + ")" + element) +
         ";\n" + indent +
         "}\n";
  };
  s += "  ulong j = 0;\n";
  if (floating) {
    // The CPU's cascade: level 0 sums `step` elements at a time (step = 2^power), each full
    // step goes into level 1, level 1 into level 2 whenever the index is a multiple of step^2,
    // and level 2 into level 3 whenever it is a multiple of step^3; the tail goes into level 0,
    // and the levels are added up in order at the end.
    s += "  const ulong step = (ulong)1 << power, mask = step - 1;\n";
    s += "  " + acc + " s0 = 0, s1 = 0, s2 = 0, s3 = 0;\n";
    s += "  while (j + step <= m) {\n    for (ulong q = 0; q < step; ++q, ++j)\n";
    add_element("s0", "    ");
    s += "    s1 += s0; s0 = 0;\n";
    s += "    if ((j & (mask << power)) == 0) {\n      s2 += s1; s1 = 0;\n";
    s += "      if ((j & (mask << (2 * power))) == 0) { s3 += s2; s2 = 0; }\n    }\n  }\n";
    s += "  for (; j < m; ++j)\n";
    add_element("s0", "  ");
    s += "  s0 += s1; s0 += s2; s0 += s3;\n";
    s += "  " + store_element(out, "out", "io", "s0", acc_type) + "\n}\n";
  } else {  // integers: int64 sums, wrapping as unsigned; all: 1 until an element is zero
    s += "  " + acc + " sum = " + (fold == Fold::kAll ? "1" : "0") + ";\n  for (; j < m; ++j)\n";
    add_element("sum", "  ");
    s += "  OCLVM_PTR(" + to + ", out)[io] = (" + to + ")sum;\n}\n";
  }
  return KernelSource{std::move(s), name, ""};
}

// Launches the sum kernel (or its all or any form, by `fold`) of `self` over the dimensions
// `reduced` marks into `out`, the result of the CPU's shape (`keepdim`) and contiguous layout, one
// work-item per element of `out`; false, having launched nothing, when the layout or the device
// refuses it.
// The kept and the reduced dimensions of a reduction of `self` over those `reduced` marks into
// `out` (of the CPU's shape for `keepdim`), merged, and the number of elements each result
// element reduces (`m`); false past kMaxRank dimensions of either kind.
bool reduction_walks(const at::Tensor& self, const std::vector<bool>& reduced, bool keepdim,
                     const at::Tensor& out, Walk& kept, Walk& summed, int64_t& m) {
  int64_t out_dim = 0;
  m = 1;
  for (int64_t d = 0; d < self.dim(); ++d) {
    bool fits;
    if (reduced[d]) {
      fits = add_dimension(summed, self.size(d), {0, self.stride(d), 0});
      m *= self.size(d);
    } else {
      fits = add_dimension(kept, self.size(d), {out.stride(out_dim), self.stride(d), 0});
    }
    if (!fits) return false;
    if (!reduced[d] || keepdim) ++out_dim;
  }
  return true;
}

// The reduced dimensions' sizes and self's strides over them, as the kernels' rs<d>, ra<d>.
void push_reduced(std::vector<LaunchArg>& args, const Walk& summed) {
  for (size_t d = 0; d < summed.rank; ++d) {
    args.push_back(LaunchArg::of(summed.sizes[d]));
    args.push_back(LaunchArg::of(summed.strides[1][d]));
  }
}

bool launch_reduction(const at::Tensor& self, const std::vector<bool>& reduced, bool keepdim,
                      const at::Tensor& out, Fold fold) {
  Walk kept, summed;
  int64_t m = 1;
  if (!reduction_walks(self, reduced, keepdim, out, kept, summed, m)) return false;
  const at::ScalarType in = self.scalar_type(), out_type = out.scalar_type();
  const std::shared_ptr<const Kernel> kernel = native_kernel(
      self.device().index(), NativeKernelFamily::kReduction,
      kernel_id(fold == Fold::kAll   ? RowOp::kAll
                : fold == Fold::kAny ? RowOp::kAny
                                     : RowOp::kSum,
                in, out_type, kept.rank, summed.rank),
      [&] { return sum_source(in, out_type, kept.rank, summed.rank, fold); });
  if (kernel == nullptr) return false;
  // The CPU's cascade step (2^power elements) for floating sums: ceil(log2(m)) / 4, and at least
  // 4; the other kernels do not read it.
  uint64_t log2 = 0;
  while ((uint64_t{1} << log2) < static_cast<uint64_t>(m)) ++log2;
  std::vector<LaunchArg> tail{LaunchArg::of(static_cast<uint64_t>(out.numel())),
                              LaunchArg::of(static_cast<uint64_t>(m)),
                              LaunchArg::of(std::max<uint64_t>(4, log2 / 4))};
  push_kept(tail, kept);
  push_reduced(tail, summed);
  launch_rows(kernel, out, {&self}, std::move(tail), static_cast<uint64_t>(out.numel()));
  return true;
}

// The OpenCL C that finds element j's offset `ir` in self over the reduced dimensions (sizes
// rs<d>, strides ra<d>), j's coordinates taken innermost first.
std::string reduced_offset(size_t reduced, const std::string& j) {
  std::string s = "    long ir = 0;\n    ulong r = " + j + ";\n";
  for (size_t d = reduced; d-- > 0;) {
    const std::string i = std::to_string(d);
    s += d == 0 ? "    { const long k = (long)r;"
                : "    { const long k = (long)(r % (ulong)rs" + i + "); r /= (ulong)rs" + i + ";";
    s += " ir += k * ra" + i + "; }\n";
  }
  return s;
}

std::string reduced_parameters(size_t reduced) {
  std::string s;
  for (size_t d = 0; d < reduced; ++d) {
    const std::string i = std::to_string(d);
    s += ", long rs" + i + ", long ra" + i;
  }
  return s;
}

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
  std::vector<LaunchArg> args;
  if (want_values) args.push_back(blob_arg(values, KernelAccess::kWrite));
  if (want_indices) args.push_back(blob_arg(indices, KernelAccess::kWrite));
  args.push_back(blob_arg(self, KernelAccess::kRead));
  args.push_back(LaunchArg::of(static_cast<uint64_t>(out.numel())));
  args.push_back(LaunchArg::of(static_cast<uint64_t>(m)));
  push_kept(args, kept);
  push_reduced(args, summed);
  run_native_kernel(kernel, out, args, static_cast<size_t>(out.numel()));
  count_native_launch();
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
    s += "    " + sum + "_c = (next - " + sum + ") - y;\n    " + sum + " = next;\n  }\n";
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
  std::vector<LaunchArg> args;
  args.push_back(blob_arg(out, KernelAccess::kWrite));
  if (with_mean) args.push_back(blob_arg(means, KernelAccess::kWrite));
  args.push_back(blob_arg(self, KernelAccess::kRead));
  args.push_back(LaunchArg::of(static_cast<uint64_t>(out.numel())));
  args.push_back(LaunchArg::of(static_cast<uint64_t>(m)));
  if (in == at::kDouble) {
    args.push_back(LaunchArg::of(divisor));
  } else {
    args.push_back(LaunchArg::of(static_cast<float>(divisor)));
  }
  push_kept(args, kept);
  push_reduced(args, summed);
  run_native_kernel(kernel, out, args, static_cast<size_t>(out.numel()));
  count_native_launch();
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
    s += "    const " + t + " next = acc + y;\n    acc_c = (next - acc) - y;\n";
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
  std::vector<LaunchArg> args{blob_arg(out, KernelAccess::kWrite),
                              blob_arg(self, KernelAccess::kRead),
                              LaunchArg::of(static_cast<uint64_t>(out.numel())),
                              LaunchArg::of(static_cast<uint64_t>(m))};
  if (in == at::kDouble) {
    args.push_back(LaunchArg::of(p));
  } else {
    args.push_back(LaunchArg::of(static_cast<float>(p)));
  }
  push_kept(args, kept);
  push_reduced(args, summed);
  run_native_kernel(kernel, out, args, static_cast<size_t>(out.numel()));
  count_native_launch();
  return true;
}

// The source of softmax (`log`: log_softmax) over one dimension (`backward`: its gradient from the
// output and the output's gradient), one row of `m` elements per work-item: the row's elements
// lie `sa` (and `sb`) apart in the inputs and `so` apart in the result. `store_exp`: softmax keeps
// exp(x - max) in the result between its two passes (rounded to the result's dtype), else it
// computes it again in the second.
KernelSource softmax_source(at::ScalarType type, size_t kept, bool backward, bool log,
                            bool store_exp) {
  // Elements are read into `t`, the computation's type (float for float16 and bfloat16), through
  // X(j), G(j) and O(j) (self or the output, the gradient, the result) and written by STORE.
  const at::ScalarType compute = opmath_type(type);
  const std::string t = cl_type(compute), held = storage_type(type);
  const std::string name = std::string("oclvm_") + (log ? "log_softmax" : "softmax") +
                           (backward ? "_backward_" : "_") + kernel_type_name(type) +
                           (store_exp ? "" : "_once") + "_k" + std::to_string(kept);
  std::string s;
  if (type == at::kDouble) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  if (type == at::kBFloat16) s += kBFloat16Source;
  s += "#pragma OPENCL FP_CONTRACT OFF\n";
  s += "#define X(j) " + load_element(type, "a", "ia + (long)(j) * sa") + "\n";
  s += "#define G(j) " + load_element(type, "b", "ib + (long)(j) * sb") + "\n";
  s += "#define O(j) " + load_element(type, "out", "io + (long)(j) * so") + "\n";
  s += "#define STORE(j, v) " + store_element(type, "out", "io + (long)(j) * so", "v", compute) +
       "\n";
  s += "__kernel void " + name + "(OCLVM_BLOB(" + held + ", out), OCLVM_BLOB(" + held + ", a), ";
  if (backward) s += "OCLVM_BLOB(" + held + ", b), ";
  s += "ulong n, ulong m, long so, long sa, long sb" + kept_parameters(kept) + ") {\n";
  s += "  const ulong i = get_global_id(0);\n  if (i >= n) return;\n" + kept_offsets(kept);
  if (backward && log) {
    // a: log_softmax's output y; b: its gradient g. dx = g - exp(y) * sum(g).
    s += "  " + t + " sum = 0;\n";
    s += "  for (ulong j = 0; j < m; ++j) sum += G(j);\n";
    s += "  for (ulong j = 0; j < m; ++j) STORE(j, G(j) - exp(X(j)) * sum);\n}\n";
  } else if (log) {
    // x - max - log(sum(exp(x - max))), subtracted in that order as the CPU's kernel does.
    s += "  " + t + " top = -INFINITY;\n";
    s += "  for (ulong j = 0; j < m; ++j) top = fmax(top, X(j));\n";
    s += "  " + t + " sum = 0;\n";
    s += "  for (ulong j = 0; j < m; ++j) sum += exp(X(j) - top);\n";
    s += "  const " + t + " log_sum = log(sum);\n";
    s += "  for (ulong j = 0; j < m; ++j) STORE(j, X(j) - top - log_sum);\n}\n";
  } else if (backward) {
    // a: the softmax's output y; b: its gradient g. dx = (g - sum(g * y)) * y.
    s += "  " + t + " dot = 0;\n";
    s += "  for (ulong j = 0; j < m; ++j) dot += G(j) * X(j);\n";
    s += "  for (ulong j = 0; j < m; ++j) STORE(j, (G(j) - dot) * X(j));\n}\n";
  } else {
    // exp(x - max), then times 1 / their sum; a NaN anywhere in the row makes the row NaN, and a
    // row of -inf is NaN, as on the CPU.
    const bool narrow = !store_exp;
    s += "  " + t + " top = -INFINITY;\n";
    s += "  for (ulong j = 0; j < m; ++j) top = fmax(top, X(j));\n";
    s += "  " + t + " sum = 0;\n";
    s += "  for (ulong j = 0; j < m; ++j) {\n    const " + t + " e = exp(X(j) - top);\n";
    s += narrow ? "    sum += e;\n  }\n" : "    STORE(j, e);\n    sum += e;\n  }\n";
    s += "  const " + t + " scale = (" + t + ")1 / sum;\n";
    s += narrow ? "  for (ulong j = 0; j < m; ++j) STORE(j, exp(X(j) - top) * scale);\n}\n"
                : "  for (ulong j = 0; j < m; ++j) STORE(j, O(j) * scale);\n}\n";
  }
  return KernelSource{std::move(s), name, ""};
}

// Launches softmax or log_softmax (`log`), or its backward with `grad`, of `self` over `dim` into
// `out`, contiguous and of self's shape; false, having done nothing, when the kernel or the layout
// is refused.
bool launch_softmax(const at::Tensor& out, const at::Tensor& self, const at::Tensor* grad,
                    int64_t dim, bool log) {
  Walk kept;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d == dim) continue;
    const int64_t grad_stride = grad != nullptr ? grad->stride(d) : 0;
    if (!add_dimension(kept, self.size(d), {out.stride(d), self.stride(d), grad_stride})) {
      return false;
    }
  }
  const at::ScalarType type = self.scalar_type();
  const bool backward = grad != nullptr;
  const RowOp op = log ? (backward ? RowOp::kLogSoftmaxBackward : RowOp::kLogSoftmax)
                       : (backward ? RowOp::kSoftmaxBackward : RowOp::kSoftmax);
  // float16 and bfloat16: the CPU's kernel for the last dimension rounds each element once, its
  // kernel for the others rounds exp(x - max) to the dtype before it scales it.
  const bool store_exp = !reduced_float(type) || dim != self.dim() - 1;
  const std::shared_ptr<const Kernel> kernel =
      native_kernel(self.device().index(), NativeKernelFamily::kReduction,
                    kernel_id(op, type, type, kept.rank, store_exp ? 1 : 2),
                    [&] { return softmax_source(type, kept.rank, backward, log, store_exp); });
  if (kernel == nullptr) return false;
  const uint64_t rows = static_cast<uint64_t>(out.numel() / self.size(dim));
  std::vector<LaunchArg> tail{LaunchArg::of(rows), LaunchArg::of(static_cast<uint64_t>(
                                                       self.size(dim))),
                              LaunchArg::of(out.stride(dim)), LaunchArg::of(self.stride(dim)),
                              LaunchArg::of(backward ? grad->stride(dim) : int64_t{0})};
  push_kept(tail, kept);
  if (backward) {
    launch_rows(kernel, out, {&self, grad}, std::move(tail), rows);
  } else {
    launch_rows(kernel, out, {&self}, std::move(tail), rows);
  }
  return true;
}

// Whether `t` may be an operand of a native softmax: a float32 or float64 device tensor of the
// native path, with dimensions.
bool softmax_operand(const at::Tensor& t) {
  return t.defined() && is_device(t) && t.layout() == at::kStrided && !t.is_conj() &&
         !t.is_neg() && t.dim() > 0 &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble ||
          reduced_float(t.scalar_type())) &&
         native_kernels(t.device().index()) &&
         (t.scalar_type() != at::kDouble || native_float64(t.device().index()));
}

}  // namespace

std::optional<at::Tensor> native_sum(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                     bool keepdim, std::optional<at::ScalarType> dtype) {
  if (!self.defined() || !is_device(self) || self.layout() != at::kStrided || self.is_conj() ||
      self.is_neg() || self.dim() == 0 || storage_type(self.scalar_type()) == nullptr) {
    return std::nullopt;
  }
  const c10::DeviceIndex device = self.device().index();
  const at::ScalarType in = self.scalar_type();
  const at::ScalarType own = at::isFloatingType(in) ? in : at::kLong;
  // dtype= may widen a floating sum (float16 or bfloat16 to float32, any to float64): the CPU
  // converts each element to it, as the kernel does.
  const bool widens = dtype && at::isFloatingType(in) &&
                      ((*dtype == at::kFloat && reduced_float(in)) || *dtype == at::kDouble);
  const at::ScalarType out_type = widens ? *dtype : own;
  if (!native_kernels(device) || (dtype && *dtype != own && !widens) ||
      ((in == at::kDouble || out_type == at::kDouble) && !native_float64(device))) {
    return std::nullopt;
  }
  const int64_t rank = self.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), !dim || dim->empty());
  if (dim) {
    for (int64_t d : *dim) {
      if (d < -rank || d >= rank) return std::nullopt;  // the CPU's error
      const size_t wrapped = static_cast<size_t>(d < 0 ? d + rank : d);
      if (reduced[wrapped]) return std::nullopt;  // a repeated dimension: the CPU's error
      reduced[wrapped] = true;
    }
  }
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      sizes.push_back(self.size(d));
    } else if (keepdim) {
      sizes.push_back(1);
    }
  }
  at::Tensor out = at::empty(sizes, self.options().dtype(out_type));
  if (out.numel() == 0) return out;
  if (self.numel() == 0) return out.zero_();  // sums over no elements; self has no blob
  if (!launch_reduction(self, reduced, keepdim, out, Fold::kSum)) return std::nullopt;
  return out;
}

std::optional<at::Tensor> native_all_or_any(const at::Tensor& self, std::optional<int64_t> dim,
                                             bool keepdim, bool any) {
  if (!self.defined() || !is_device(self) || self.layout() != at::kStrided || self.is_conj() ||
      self.is_neg() || storage_type(self.scalar_type()) == nullptr ||
      (dim && (self.dim() == 0 || *dim < -self.dim() || *dim >= self.dim()))) {
    return std::nullopt;  // the CPU's kernel, or its error
  }
  const c10::DeviceIndex device = self.device().index();
  const at::ScalarType in = self.scalar_type();
  if (!native_kernels(device) || (in == at::kDouble && !native_float64(device))) {
    return std::nullopt;
  }
  std::vector<bool> reduced(static_cast<size_t>(self.dim()), !dim.has_value());
  std::vector<int64_t> sizes;
  if (dim) {
    const int64_t d = *dim < 0 ? *dim + self.dim() : *dim;
    reduced[static_cast<size_t>(d)] = true;
    sizes = self.sizes().vec();
    if (keepdim) {
      sizes[static_cast<size_t>(d)] = 1;
    } else {
      sizes.erase(sizes.begin() + d);
    }
  }
  const at::ScalarType out_type = in == at::kByte ? at::kByte : at::kBool;
  at::Tensor out = at::empty(sizes, self.options().dtype(out_type));
  if (out.numel() == 0) return out;
  if (self.numel() == 0) return out.fill_(any ? 0 : 1);  // of no elements; self has no blob
  if (!launch_reduction(self, reduced, keepdim, out, any ? Fold::kAny : Fold::kAll)) {
    return std::nullopt;
  }
  return out;
}

std::optional<at::Tensor> native_softmax(const at::Tensor& self, int64_t dim, bool half_to_float,
                                         bool log) {
  if (half_to_float || !softmax_operand(self) || dim < -self.dim() || dim >= self.dim()) {
    return std::nullopt;  // the CPU's error, or its kernel
  }
  if (dim < 0) dim += self.dim();
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (out.numel() == 0) return out;
  if (!launch_softmax(out, self, nullptr, dim, log)) return std::nullopt;
  return out;
}

std::optional<at::Tensor> native_softmax_backward(const at::Tensor& grad,
                                                  const at::Tensor& output, int64_t dim,
                                                  at::ScalarType input_dtype, bool log) {
  if (!softmax_operand(output) || !softmax_operand(grad) ||
      grad.device() != output.device() || grad.scalar_type() != output.scalar_type() ||
      input_dtype != output.scalar_type() || !grad.sizes().equals(output.sizes()) ||
      dim < -output.dim() || dim >= output.dim()) {
    return std::nullopt;
  }
  if (dim < 0) dim += output.dim();
  at::Tensor out = at::empty(output.sizes(), output.options());
  if (out.numel() == 0) return out;
  if (!launch_softmax(out, output, &grad, dim, log)) return std::nullopt;
  return out;
}

namespace {

// Which dimensions of `self` a reduction over `dims` reduces (every one for an empty list);
// nullopt for a dimension out of range or repeated (the CPU's errors).
std::optional<std::vector<bool>> reduced_dimensions(const at::Tensor& self, at::IntArrayRef dims) {
  const int64_t rank = self.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), dims.empty());
  for (const int64_t d : dims) {
    if (d < -std::max<int64_t>(rank, 1) || d >= std::max<int64_t>(rank, 1)) return std::nullopt;
    if (rank == 0) continue;  // dimension 0 or -1 of a 0-dim tensor: the tensor itself
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

// The extreme reduction's checks and result; `values` and `indices` say which it makes.
std::optional<std::pair<at::Tensor, at::Tensor>> extreme(const at::Tensor& self,
                                                         at::IntArrayRef dims, bool keepdim,
                                                         bool max, bool values, bool indices) {
  if (!self.defined() || !is_device(self) || self.layout() != at::kStrided || self.is_conj() ||
      self.is_neg() || storage_type(self.scalar_type()) == nullptr ||
      !native_kernels(self.device().index()) ||
      (self.scalar_type() == at::kDouble && !native_float64(self.device().index()))) {
    return std::nullopt;
  }
  const std::optional<std::vector<bool>> reduced = reduced_dimensions(self, dims);
  if (!reduced) return std::nullopt;
  int64_t m = 1;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if ((*reduced)[d]) m *= self.size(d);
  }
  if (m == 0) return std::nullopt;  // the CPU's error: no element to take
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
  if (!self.defined() || (dim && self.dim() == 0)) return std::nullopt;
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
  if (!self.defined() || !is_device(self) || self.layout() != at::kStrided || self.is_conj() ||
      self.is_neg() || !at::isFloatingType(self.scalar_type()) ||
      storage_type(self.scalar_type()) == nullptr || !native_kernels(self.device().index()) ||
      (self.scalar_type() == at::kDouble && !native_float64(self.device().index())) ||
      (correction && (correction->isComplex() || correction->isBoolean()))) {
    return std::nullopt;  // integers and complex: the CPU's error or its kernel
  }
  const std::optional<std::vector<bool>> reduced =
      reduced_dimensions(self, dim ? *dim : at::IntArrayRef());
  if (!reduced) return std::nullopt;
  int64_t m = 1;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if ((*reduced)[d]) m *= self.size(d);
  }
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
  if (!self.defined() || !is_device(self) || self.layout() != at::kStrided || self.is_conj() ||
      self.is_neg() || !at::isFloatingType(self.scalar_type()) ||
      storage_type(self.scalar_type()) == nullptr || !native_kernels(self.device().index()) ||
      (self.scalar_type() == at::kDouble && !native_float64(self.device().index())) ||
      (dtype && *dtype != self.scalar_type()) || ord.isComplex() || ord.isBoolean()) {
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
  int64_t m = 1;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if ((*reduced)[d]) m *= self.size(d);
  }
  if (m == 0) return std::nullopt;  // the CPU's value or error for an empty reduction
  at::Tensor out = at::empty(reduced_sizes(self, *reduced, keepdim), self.options());
  if (out.numel() != 0 && !launch_norm(self, *reduced, keepdim, kind, p, out)) {
    return std::nullopt;
  }
  return out;
}

}  // namespace oclvm::torch_adapter
