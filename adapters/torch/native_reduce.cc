// adapters/torch/native_reduce.cc — reductions along rows on the native path: sum over
// dimensions, all and any (over one or every dimension), and softmax and its backward over one
// dimension; one generated OpenCL kernel per (operator, dtypes, ranks), one work-item per row
// (native_kernels.h). Also defines the walks the row-reduction kernels share
// (native_reduction_walks.h).

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
#include "adapters/torch/native_reduction_walks.h"
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

namespace {

// What the sum kernel adds up: numbers, or whether every (kAll) or any (kAny) element is nonzero.
enum class Fold : uint8_t { kSum, kAll, kAny };

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

}  // namespace oclvm::torch_adapter
