// adapters/torch/native_scatter.cc — gather, scatter, scatter_add and index_add on the native
// path: generated OpenCL kernels that check each index on the device and, for the scatters, write
// each column of the result in the CPU's order (native_kernels.h).

#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/native_kernel_table.h"
#include "adapters/torch/native_kernels.h"
#include "adapters/torch/native_launches.h"

namespace oclvm::torch_adapter {

// Note [Native gather and scatter]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// gather(self, dim, index), scatter(self, dim, index, src), scatter(self, dim, index, value) and
// scatter_add(self, dim, index, src), with the in-place forms of the scatters, for device tensors
// of up to kMaxRank dimensions and int64 or int32 indices, every operand on one native-path
// device, any strides. Each operand is seen with kMaxRank dimensions (leading ones of size 1).
//   - gather: one work-item per element of the result (index's shape, contiguous as the CPU's)
//     reads its index k and copies self's element at k along `dim`.
//   - the scatters: one work-item per column, the index's elements that differ only along `dim`.
//     It walks the column in order and writes (scatter), or adds into (scatter_add), the result's
//     element at each index along `dim`. Two indices of a column may name one element; two columns
//     never do. So each element sees its writes in the CPU's order: a repeated index keeps the last
//     value, and scatter_add's sums are the CPU's bits. The out-of-place forms first copy self
//     into a new contiguous result, as the CPU's.
//   - index_add(self, dim, index, source) with alpha 1 (in place or not) is a scatter_add whose
//     index is the vector `index` seen with source's shape, stepping along `dim` only: the CPU
//     adds source's slice i into self's slice index[i] for each i in order, so each element sees
//     the same additions in the same order. An index out of range is the CPU's RuntimeError
//     naming the dimension where the CPU adds through scatter_add_ (an int64 index along the
//     first or last of two or more dimensions), else its IndexError ("index out of range in
//     self").
// gather and scatter move elements as bits, so they take every dtype of 1, 2, 4 or 8 bytes;
// scatter_add adds float32, float64 and the integer types (modulo 2^bits, as the CPU's wrap).
// An index outside [0, self.size(dim)) is an error found on the device (Note [Errors found on the
// device] in native_launches.cc): the next sync point throws the CPU's RuntimeError ("index 5 is
// out of bounds for dimension 1 with size 4"), and the result is not the CPU's: a gather writes
// zero for that element, a scatter's column stops there.
// The parallelism of a scatter is its number of columns: a one-dimensional scatter_add is one
// work-item, which keeps the CPU's order of additions at the cost of speed.
//
// Not taken (the CPU kernel answers, with its values and errors): indices of another dtype, other
// dimension counts than self's, sizes the CPU refuses, an empty self, src of another dtype,
// zero-dimensional operands, more than kMaxRank dimensions, conjugate or negative bits, 16-byte
// elements, scatter_add of bool, float16, bfloat16 or complex types, an in-place self whose
// elements share memory or that shares memory with index or src; index_add with another alpha
// (the CPU computes a + alpha * b, fused where it vectorises) or an index of two or more
// dimensions.

namespace {

// The code a kernel reports an index out of range with: the dimension in the bits above 8.
int32_t out_of_bounds_code(int64_t dim) {
  return static_cast<int32_t>(DeviceError::kIndexOutOfBoundsOfDim) |
         static_cast<int32_t>(dim << 8);
}

// A tensor's sizes and strides with kMaxRank dimensions, the leading ones of size 1.
struct Padded {
  std::array<int64_t, kMaxRank> sizes{}, strides{};
};

Padded padded(const at::Tensor& t) {
  Padded p;
  const size_t lead = kMaxRank - static_cast<size_t>(t.dim());
  for (size_t d = 0; d < kMaxRank; ++d) {
    p.sizes[d] = d < lead ? 1 : t.size(static_cast<int64_t>(d - lead));
    p.strides[d] = d < lead ? 0 : t.stride(static_cast<int64_t>(d - lead));
  }
  return p;
}

// ", long n0, ..., long n5" for the prefix "n".
std::string dims_params(const char* prefix) {
  std::string s;
  for (size_t d = 0; d < kMaxRank; ++d) s += std::string(", long ") + prefix + std::to_string(d);
  return s;
}

// OpenCL C that walks the kMaxRank-dimensional position `rest` (sizes n0..n5) innermost first,
// adding each coordinate times its stride to `<p>_at` for each prefix p, and keeping the
// coordinate along `dim` in `here`.
std::string walk(const std::vector<std::string>& prefixes) {
  std::string s = "  long c, here = 0";
  for (const std::string& p : prefixes) s += ", " + p + "_at = 0";
  s += ";\n";
  for (size_t d = kMaxRank; d-- > 0;) {
    const std::string n = "n" + std::to_string(d);
    s += "  c = (long)(rest % (ulong)" + n + "); rest /= (ulong)" + n + ";";
    for (const std::string& p : prefixes) {
      s += " " + p + "_at += c * " + p + std::to_string(d) + ";";
    }
    s += " if (dim == " + std::to_string(d) + ") here = c;\n";
  }
  return s;
}

KernelSource gather_source(const std::string& t, const std::string& it) {
  const std::string name = "oclvm_gather_" + t + "_" + it;
  std::string s = kDeviceErrorSource;
  s += "__kernel void " + name + "(OCLVM_BLOB(" + t + ", out), OCLVM_BLOB(" + t +
       ", a), OCLVM_BLOB(" + it + ", idx), OCLVM_BLOB(long, err), int code, ulong n, long dim, "
       "long bound, long step" +
       dims_params("n") + dims_params("a") + dims_params("i") + ") {\n";
  s += "  const ulong g = get_global_id(0);\n  if (g >= n) return;\n  ulong rest = g;\n";
  s += walk({"a", "i"});
  s += "  const long k = (long)OCLVM_PTR(" + it + ", idx)[i_at];\n";
  s += "  if (k < 0 || k >= bound) {\n";
  s += "    oclvm_report(err_base, err_offset, code, k, bound);\n";
  s += "    OCLVM_PTR(" + t + ", out)[g] = (" + t + ")0;\n    return;\n  }\n";
  s += "  OCLVM_PTR(" + t + ", out)[g] = OCLVM_PTR(" + t + ", a)[a_at + (k - here) * step];\n}\n";
  return KernelSource{std::move(s), name, ""};
}

enum class ScatterKind : uint8_t { kSrc, kValue, kAdd };

// The scatter of `kind` on elements of OpenCL C type `t` (bits for kSrc and kValue; for kAdd the
// arithmetic type, `bits` its unsigned type of the same size, which integer sums wrap in), with
// indices of type `it`.
KernelSource scatter_source(ScatterKind kind, const std::string& t, const std::string& bits,
                            const std::string& it) {
  const bool src = kind != ScatterKind::kValue;
  const std::string name = std::string("oclvm_scatter_") +
                           (kind == ScatterKind::kSrc ? "src_" : kind == ScatterKind::kValue
                                                                     ? "value_"
                                                                     : "add_") +
                           t + "_" + it;
  std::string s;
  if (t == "double") s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  s += "#pragma OPENCL FP_CONTRACT OFF\n";
  s += kDeviceErrorSource;
  s += "__kernel void " + name + "(OCLVM_BLOB(" + t + ", out), OCLVM_BLOB(" + it + ", idx), ";
  if (src) s += "OCLVM_BLOB(" + t + ", src), ";
  s += "OCLVM_BLOB(long, err), int code, ";
  if (!src) s += "ulong value, ";
  s += "ulong columns, long length, long dim, long bound, long o_step, long i_step, long s_step" +
       dims_params("n") + dims_params("o") + dims_params("i") + dims_params("s") + ") {\n";
  s += "  const ulong g = get_global_id(0);\n  if (g >= columns) return;\n  ulong rest = g;\n";
  s += walk({"o", "i", "s"});
  s += "  __global " + t + "* out = OCLVM_PTR(" + t + ", out) + o_at;\n";
  s += "  __global const " + it + "* idx = OCLVM_PTR(" + it + ", idx) + i_at;\n";
  if (src) s += "  __global const " + t + "* from = OCLVM_PTR(" + t + ", src) + s_at;\n";
  s += "  for (long j = 0; j < length; ++j) {\n";
  s += "    const long k = (long)idx[j * i_step];\n";
  s += "    if (k < 0 || k >= bound) {\n";
  s += "      oclvm_report(err_base, err_offset, code, k, bound);\n      return;\n    }\n";
  switch (kind) {
    case ScatterKind::kSrc:
      s += "    out[k * o_step] = from[j * s_step];\n";
      break;
    case ScatterKind::kValue:
      s += "    out[k * o_step] = (" + t + ")value;\n";
      break;
    case ScatterKind::kAdd:
      if (t == bits || t == "float" || t == "double") {
        s += "    out[k * o_step] = out[k * o_step] + from[j * s_step];\n";
      } else {  // signed: added in the unsigned type, which wraps as the CPU's sums do
        s += "    out[k * o_step] = (" + t + ")((" + bits + ")out[k * o_step] + (" + bits +
             ")from[j * s_step]);\n";
      }
      break;
  }
  s += "  }\n}\n";
  return KernelSource{std::move(s), name, ""};
}

// The id of a gather (kind 0) or scatter (1 + its ScatterKind) kernel: the kind in bits 16 and up,
// the index's dtype in bits 8 to 15, below them what the source depends on (scatter_add's dtype,
// the others' element size).
uint64_t kernel_id(uint64_t kind, const at::Tensor& t, const at::Tensor& index) {
  const bool adds = kind == 1 + static_cast<uint64_t>(ScatterKind::kAdd);
  return (kind << 16) | (static_cast<uint64_t>(index.scalar_type()) << 8) |
         (adds ? static_cast<uint64_t>(t.scalar_type()) : t.itemsize());
}

// Whether every tensor is a strided device tensor on `device` with plain bits, of one to kMaxRank
// dimensions (as many as the first), and the native path takes that device.
bool plain_operands(std::initializer_list<const at::Tensor*> tensors) {
  const at::Tensor& first = **tensors.begin();
  if (!first.defined() || !is_device(first) || !native_kernels(first.device().index()) ||
      first.dim() == 0 || first.dim() > static_cast<int64_t>(kMaxRank)) {
    return false;
  }
  for (const at::Tensor* t : tensors) {
    if (!t->defined() || t->device() != first.device() || t->layout() != at::kStrided ||
        t->is_conj() || t->is_neg() || t->dim() != first.dim()) {
      return false;
    }
  }
  return true;
}

// Whether index (int64 or int32) and src fit the CPU's size rules for a gather or scatter along
// `dim`: index no larger than self apart from `dim`, and no larger than src anywhere.
bool sizes_fit(const at::Tensor& self, int64_t dim, const at::Tensor& index,
               const at::Tensor* src) {
  if (index.scalar_type() != at::kLong && index.scalar_type() != at::kInt) return false;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d != dim && index.size(d) > self.size(d)) return false;
    if (src != nullptr && index.size(d) > src->size(d)) return false;
  }
  return true;
}

// The value `value` converted to self's dtype as the CPU's scatter converts it, as the low bits
// of a uint64 (in the device's byte order, which is the host's here: both little-endian).
uint64_t value_bits(const at::Scalar& value, const at::Tensor& self) {
  const at::Tensor converted = at::scalar_tensor(value, self.options().device(at::kCPU));
  uint64_t bits = 0;
  std::memcpy(&bits, converted.const_data_ptr(), converted.itemsize());
  return bits;
}

// The compiled scatter of `kind` for self's dtype and index's dtype on self's device; nullptr
// when there is none (a dtype the kernels do not take, a device that cannot build it).
std::shared_ptr<const Kernel> scatter_kernel(ScatterKind kind, const at::Tensor& self,
                                             const at::Tensor& index) {
  const char* bits = cl_bits_type(self.itemsize());
  const char* type = kind == ScatterKind::kAdd ? cl_type(self.scalar_type()) : bits;
  if (bits == nullptr || type == nullptr) return nullptr;
  const uint64_t id = kernel_id(1 + static_cast<uint64_t>(kind), self, index);
  const char* index_type = cl_type(index.scalar_type());
  return native_kernel(self.device().index(), NativeKernelFamily::kScatter, id,
                       [&] { return scatter_source(kind, type, bits, index_type); });
}

// Launches `kernel`, the scatter of `kind`, into `out` (self, or self's copy), which the call has
// checked; an index out of range reports `code`.
void launch_scatter(const std::shared_ptr<const Kernel>& kernel, const at::Tensor& out,
                    int64_t dim, const at::Tensor& index, const at::Tensor* src, uint64_t value,
                    int32_t code) {
  const c10::DeviceIndex device = out.device().index();
  if (index.numel() == 0) return;
  const int64_t lead = static_cast<int64_t>(kMaxRank) - out.dim();
  Padded columns = padded(index);
  columns.sizes[static_cast<size_t>(lead + dim)] = 1;  // a column is the walk along dim
  const Padded o = padded(out), i = padded(index);
  const Padded s = src != nullptr ? padded(*src) : Padded{};
  std::vector<LaunchArg> args{blob_arg(out, KernelAccess::kReadWrite),
                              blob_arg(index, KernelAccess::kRead)};
  if (src != nullptr) args.push_back(blob_arg(*src, KernelAccess::kRead));
  args.push_back(device_error_arg(device));
  args.push_back(LaunchArg::of(code));
  if (src == nullptr) args.push_back(LaunchArg::of(value));
  const int64_t count = index.numel() / index.size(dim);
  args.push_back(LaunchArg::of(static_cast<uint64_t>(count)));
  args.push_back(LaunchArg::of(index.size(dim)));
  args.push_back(LaunchArg::of(lead + dim));
  args.push_back(LaunchArg::of(out.size(dim)));
  args.push_back(LaunchArg::of(out.stride(dim)));
  args.push_back(LaunchArg::of(index.stride(dim)));
  args.push_back(LaunchArg::of(src != nullptr ? src->stride(dim) : int64_t{0}));
  for (const Padded* p : {&columns}) for (int64_t v : p->sizes) args.push_back(LaunchArg::of(v));
  for (const Padded* p : {&o, &i, &s}) {
    for (int64_t v : p->strides) args.push_back(LaunchArg::of(v));
  }
  run_native_kernel(kernel, out, args, static_cast<size_t>(count));
  device_errors_submitted(device);
  count_native_launch();
}

// Whether the scatter of `kind` can run natively on these operands (its dtype and their sizes),
// `dim` already wrapped.
bool scatter_takes(ScatterKind kind, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                   const at::Tensor* src) {
  if (self.numel() == 0 || (src != nullptr && src->scalar_type() != self.scalar_type()) ||
      !sizes_fit(self, dim, index, src) || cl_bits_type(self.itemsize()) == nullptr) {
    return false;
  }
  if (kind == ScatterKind::kAdd && (cl_type(self.scalar_type()) == nullptr ||
                                    self.scalar_type() == at::kBool)) {
    return false;  // bool adds as or, float16 and bfloat16 through float: the CPU's kernel
  }
  return true;
}

// The scatter of `kind` into self (in place) or into a new contiguous copy of self (as the
// CPU's result); nullopt, having done nothing, when the native path does not take the call. An
// index out of range reports `code`, by default the one gather and scatter report.
std::optional<at::Tensor> scatter(ScatterKind kind, bool in_place, const at::Tensor& self,
                                  int64_t dim, const at::Tensor& index, const at::Tensor* src,
                                  const at::Scalar* value, std::optional<int32_t> code = {}) {
  if (src != nullptr ? !plain_operands({&self, &index, src}) : !plain_operands({&self, &index})) {
    return std::nullopt;
  }
  if (dim < -self.dim() || dim >= self.dim()) return std::nullopt;
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (!scatter_takes(kind, self, dim, index, src)) return std::nullopt;
  if (in_place && (!elements_are_distinct(self) || index.is_alias_of(self) ||
                   (src != nullptr && src->is_alias_of(self)))) {
    return std::nullopt;  // the CPU's overlap errors
  }
  // Everything that can refuse or throw comes before the first launch.
  const std::shared_ptr<const Kernel> kernel = scatter_kernel(kind, self, index);
  if (kernel == nullptr) return std::nullopt;
  const uint64_t bits = value != nullptr ? value_bits(*value, self) : 0;  // the CPU's error
  at::Tensor out = in_place ? self : at::empty(self.sizes(), self.options());
  if (!in_place && !copy_for_operator(self, out)) return std::nullopt;  // before any launch
  launch_scatter(kernel, out, dim, index, src, bits, code.value_or(out_of_bounds_code(dim)));
  return out;
}

// index_add(self, dim, index, source) with alpha 1 as a scatter_add whose index is `index` seen
// with source's shape, stepping along `dim` only: each column of source adds into self's column
// in the index's order, as the CPU's loop over the index adds whole slices.
std::optional<at::Tensor> index_add(bool in_place, const at::Tensor& self, int64_t dim,
                                    const at::Tensor& index, const at::Tensor& source,
                                    const at::Scalar& alpha) {
  if (!plain_operands({&self, &source}) || !index.defined() || index.dim() > 1 ||
      dim < -self.dim() || dim >= self.dim() || alpha.isSymbolic() || alpha.isComplex() ||
      !alpha.equal(1)) {
    return std::nullopt;  // alpha: the CPU's a + alpha * b, fused where it vectorises
  }
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (source.size(dim) != index.numel()) return std::nullopt;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d != dim && source.size(d) != self.size(d)) return std::nullopt;  // the CPU's error
  }
  std::vector<int64_t> strides(static_cast<size_t>(self.dim()), 0);
  strides[static_cast<size_t>(dim)] = index.dim() == 0 ? 0 : index.stride(0);
  const at::Tensor along = index.as_strided(source.sizes(), strides, index.storage_offset());
  // The CPU adds through scatter_add_ (its RuntimeError naming the dimension) for an int64 index
  // along the first or last of two or more dimensions; its own loop (an IndexError) otherwise.
  const bool as_scatter = self.dim() > 1 && index.scalar_type() == at::kLong &&
                          (dim == 0 || dim == self.dim() - 1);
  const int32_t code = as_scatter ? out_of_bounds_code(dim)
                                  : static_cast<int32_t>(DeviceError::kIndexOutOfRange);
  return scatter(ScatterKind::kAdd, in_place, self, dim, along, &source, nullptr, code);
}

}  // namespace

std::optional<at::Tensor> native_gather(const at::Tensor& self, int64_t dim,
                                        const at::Tensor& index) {
  if (!plain_operands({&self, &index}) || self.numel() == 0 || dim < -self.dim() ||
      dim >= self.dim()) {
    return std::nullopt;
  }
  dim = at::maybe_wrap_dim(dim, self.dim());
  const char* bits = cl_bits_type(self.itemsize());
  if (bits == nullptr || !sizes_fit(self, dim, index, nullptr)) return std::nullopt;
  const c10::DeviceIndex device = self.device().index();
  const std::shared_ptr<const Kernel> kernel =
      native_kernel(device, NativeKernelFamily::kScatter,
                    kernel_id(0, self, index),
                    [&] { return gather_source(bits, cl_type(index.scalar_type())); });
  if (kernel == nullptr) return std::nullopt;
  at::Tensor out = at::empty(index.sizes(), self.options());  // contiguous, as the CPU's
  if (out.numel() == 0) return out;
  const int64_t lead = static_cast<int64_t>(kMaxRank) - self.dim();
  const Padded a = padded(self), i = padded(index);
  std::vector<LaunchArg> args{blob_arg(out, KernelAccess::kWrite),
                              blob_arg(self, KernelAccess::kRead),
                              blob_arg(index, KernelAccess::kRead),
                              device_error_arg(device),
                              LaunchArg::of(out_of_bounds_code(dim)),
                              LaunchArg::of(static_cast<uint64_t>(out.numel())),
                              LaunchArg::of(lead + dim),
                              LaunchArg::of(self.size(dim)),
                              LaunchArg::of(self.stride(dim))};
  for (int64_t v : i.sizes) args.push_back(LaunchArg::of(v));
  for (int64_t v : a.strides) args.push_back(LaunchArg::of(v));
  for (int64_t v : i.strides) args.push_back(LaunchArg::of(v));
  run_native_kernel(kernel, out, args, static_cast<size_t>(out.numel()));
  device_errors_submitted(device);
  count_native_launch();
  return out;
}

std::optional<at::Tensor> native_scatter(const at::Tensor& self, int64_t dim,
                                         const at::Tensor& index, const at::Tensor& src) {
  return scatter(ScatterKind::kSrc, /*in_place=*/false, self, dim, index, &src, nullptr);
}

std::optional<at::Tensor> native_scatter(const at::Tensor& self, int64_t dim,
                                         const at::Tensor& index, const at::Scalar& value) {
  return scatter(ScatterKind::kValue, /*in_place=*/false, self, dim, index, nullptr, &value);
}

std::optional<at::Tensor> native_scatter_add(const at::Tensor& self, int64_t dim,
                                             const at::Tensor& index, const at::Tensor& src) {
  return scatter(ScatterKind::kAdd, /*in_place=*/false, self, dim, index, &src, nullptr);
}

std::optional<at::Tensor> native_index_add(const at::Tensor& self, int64_t dim,
                                           const at::Tensor& index, const at::Tensor& source,
                                           const at::Scalar& alpha) {
  return index_add(/*in_place=*/false, self, dim, index, source, alpha);
}

bool native_scatter_(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                     const at::Tensor& src) {
  return scatter(ScatterKind::kSrc, /*in_place=*/true, self, dim, index, &src, nullptr)
      .has_value();
}

bool native_scatter_(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                     const at::Scalar& value) {
  return scatter(ScatterKind::kValue, /*in_place=*/true, self, dim, index, nullptr, &value)
      .has_value();
}

bool native_scatter_add_(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const at::Tensor& src) {
  return scatter(ScatterKind::kAdd, /*in_place=*/true, self, dim, index, &src, nullptr)
      .has_value();
}

bool native_index_add_(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       const at::Tensor& source, const at::Scalar& alpha) {
  return index_add(/*in_place=*/true, self, dim, index, source, alpha).has_value();
}

}  // namespace oclvm::torch_adapter
