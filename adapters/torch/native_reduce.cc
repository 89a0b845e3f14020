// adapters/torch/native_reduce.cc — sum over dimensions on the native path: one generated OpenCL
// kernel per (dtypes, kept rank, reduced rank), one work-item per element of the result
// (native_kernels.h).

#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
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
// sum.dim_IntList (x.sum(dims), x.sum(), a bias's gradient) of a float32, float64, integer or
// bool device tensor on a native-path device: the result has the CPU's dtype (int64 for integers
// and bool) and shape, contiguous as the CPU's. Each work-item computes one element of the result
// from its index: the kept dimensions give its offset in self and in the result, and it walks
// every element of the reduced dimensions. Both sets of dimensions drop their size-1 members and
// merge neighbours that step as one, so a reduction over a contiguous tail is one loop with one
// stride; the sizes and strides are kernel arguments.
//
// Floating sums add in the input's type in the order of the CPU's scalar cascade (aten's
// multi-level row sum over the reduced elements in order: runs of 2^p elements into a first level,
// whole runs up three more levels). The CPU walks other orders where it vectorises or interleaves
// (a contiguous reduction's lanes, four interleaved chains for a few trailing columns), so the
// values agree with its to its rounding, not always to the bit, with the cascade's O(log n) error
// bound either way; infinities and NaN come out as on the CPU. Integer sums accumulate in int64
// and wrap as the CPU's do: equal to the bit.
//
// Not taken (the CPU kernel answers): a `dtype=` other than the result's own, float16 and
// bfloat16, zero-dimensional self, dimensions out of range or repeated (the CPU's errors), more
// than kMaxRank kept or reduced dimensions after merging, float64 on a device without it.
// A reduction to few elements from many runs on few work-items: a whole-tensor sum is one
// work-item's loop, slow on a GPU for a large tensor.

namespace {

struct Walk {  // dimensions of one kind, merged: sizes, self's strides, the result's strides
  size_t rank = 0;
  std::array<int64_t, kMaxRank> sizes{}, self{}, out{};
};

// Adds a dimension to `walk`, merged into the last one when both step as one; false past
// kMaxRank dimensions.
bool add_dimension(Walk& walk, int64_t size, int64_t self_stride, int64_t out_stride) {
  if (size == 1) return true;
  if (walk.rank > 0) {
    const size_t last = walk.rank - 1;
    if (walk.self[last] == self_stride * size && walk.out[last] == out_stride * size) {
      walk.sizes[last] *= size;
      walk.self[last] = self_stride;
      walk.out[last] = out_stride;
      return true;
    }
  }
  if (walk.rank == kMaxRank) return false;
  walk.sizes[walk.rank] = size;
  walk.self[walk.rank] = self_stride;
  walk.out[walk.rank] = out_stride;
  ++walk.rank;
  return true;
}

// The source of the sum kernel from `in` to `out` over `kept` and `reduced` dimensions.
KernelSource sum_source(at::ScalarType in, at::ScalarType out, size_t kept, size_t reduced) {
  const std::string ti = cl_type(in), to = cl_type(out);
  const bool floating = at::isFloatingType(in);
  const std::string acc = floating ? ti : "ulong";
  const std::string name = "oclvm_sum_" + ti + "_" + to + "_k" + std::to_string(kept) + "_r" +
                           std::to_string(reduced);
  std::string s;
  if (in == at::kDouble) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  s += "__kernel void " + name + "(OCLVM_BLOB(" + to + ", out), OCLVM_BLOB(" + ti +
       ", a), ulong n, ulong m, ulong power";
  for (size_t d = 0; d < kept; ++d) {
    const std::string i = std::to_string(d);
    s += ", long ks" + i + ", long ka" + i + ", long ko" + i;
  }
  for (size_t d = 0; d < reduced; ++d) {
    const std::string i = std::to_string(d);
    s += ", long rs" + i + ", long ra" + i;
  }
  s += ") {\n  const ulong i = get_global_id(0);\n  if (i >= n) return;\n";
  s += "  long io = 0, ia = 0;\n  ulong rest = i;\n";
  // An index into its coordinates, the innermost dimension first, each coordinate k added to the
  // offsets as `body(d)` says; the outermost dimension takes what is left, with no division.
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
  walk("rest", "ks", kept, "  ",
       [](const std::string& i) { return " io += k * ko" + i + "; ia += k * ka" + i + ";"; });
  // `target` += element j of the reduction, as a statement block at `indent`.
  const auto add_element = [&](const std::string& target, const std::string& indent) {
    s += indent + "{\n" + indent + "  long ir = 0;\n" + indent + "  ulong r = j;\n";
    walk("r", "rs", reduced, indent + "  ",
         [](const std::string& i) { return " ir += k * ra" + i + ";"; });
    s += indent + "  " + target + " += (" + acc + ")OCLVM_PTR(" + ti + ", a)[ia + ir];\n" +
         indent + "}\n";
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
    s += "  OCLVM_PTR(" + to + ", out)[io] = (" + to + ")s0;\n}\n";
  } else {  // integers: int64 sums, wrapping as unsigned
    s += "  " + acc + " sum = 0;\n  for (; j < m; ++j)\n";
    add_element("sum", "  ");
    s += "  OCLVM_PTR(" + to + ", out)[io] = (" + to + ")sum;\n}\n";
  }
  return KernelSource{std::move(s), name, ""};
}

}  // namespace

std::optional<at::Tensor> native_sum(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                     bool keepdim, std::optional<at::ScalarType> dtype) {
  if (!self.defined() || !is_device(self) || self.layout() != at::kStrided || self.is_conj() ||
      self.is_neg() || self.dim() == 0 || cl_type(self.scalar_type()) == nullptr) {
    return std::nullopt;
  }
  const c10::DeviceIndex device = self.device().index();
  const at::ScalarType in = self.scalar_type();
  const at::ScalarType out_type = at::isFloatingType(in) ? in : at::kLong;
  if (!native_kernels(device) || (dtype && *dtype != out_type) ||
      (in == at::kDouble && !native_float64(device))) {
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
  Walk kept, summed;
  int64_t out_dim = 0, m = 1;
  for (int64_t d = 0; d < rank; ++d) {
    const bool in_out = !reduced[d] || keepdim;
    bool fits;
    if (reduced[d]) {
      fits = add_dimension(summed, self.size(d), self.stride(d), 0);
      m *= self.size(d);
    } else {
      fits = add_dimension(kept, self.size(d), self.stride(d), out.stride(out_dim));
    }
    if (!fits) return std::nullopt;
    if (in_out) ++out_dim;
  }
  const uint64_t id = (static_cast<uint64_t>(in) << 24) | (static_cast<uint64_t>(out_type) << 16) |
                      (kept.rank << 8) | summed.rank;
  const std::shared_ptr<const Kernel> kernel =
      native_kernel(device, NativeKernelFamily::kReduction, id,
                    [&] { return sum_source(in, out_type, kept.rank, summed.rank); });
  if (kernel == nullptr) return std::nullopt;
  const BlobRef o = element0(out), a = element0(self);
  std::vector<LaunchArg> args;
  args.reserve(4 + 3 * kept.rank + 2 * summed.rank);
  args.push_back(LaunchArg::of_blob(o.blob, o.offset, KernelAccess::kWrite));
  args.push_back(LaunchArg::of_blob(a.blob, a.offset, KernelAccess::kRead));
  args.push_back(LaunchArg::of(static_cast<uint64_t>(out.numel())));
  args.push_back(LaunchArg::of(static_cast<uint64_t>(m)));
  // The CPU's cascade step (2^power elements): ceil(log2(m)) / 4, and at least 4.
  uint64_t log2 = 0;
  while ((uint64_t{1} << log2) < static_cast<uint64_t>(m)) ++log2;
  args.push_back(LaunchArg::of(std::max<uint64_t>(4, log2 / 4)));
  for (size_t d = 0; d < kept.rank; ++d) {
    args.push_back(LaunchArg::of(kept.sizes[d]));
    args.push_back(LaunchArg::of(kept.self[d]));
    args.push_back(LaunchArg::of(kept.out[d]));
  }
  for (size_t d = 0; d < summed.rank; ++d) {
    args.push_back(LaunchArg::of(summed.sizes[d]));
    args.push_back(LaunchArg::of(summed.self[d]));
  }
  LaunchRange range;
  range.global[0] = static_cast<size_t>(out.numel());
  translate_errors([&] {
    InstructionsBuilder builder = runtime().builder();
    builder.launch(stream_of(out), kernel, range, args);
    runtime().run(builder.take());
  });
  count_native_launch();
  return out;
}

}  // namespace oclvm::torch_adapter
