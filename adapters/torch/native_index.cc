// adapters/torch/native_index.cc — index_select on the native path (embedding's forward is an
// index_select of the weight's rows): one generated OpenCL kernel per (element size, index dtype),
// which checks each index on the device; and embedding's backward, the rows of the gradient added
// up per index in the CPU's order (native_kernels.h).

#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <array>
#include <cstdint>
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

// Note [Native index_select]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// index_select(self, dim, index) of a device tensor of any dtype the kernels move (elements of 1,
// 2, 4 or 8 bytes, moved as bits) and a vector (or a single number) of int64 or int32 indices
// on the same device: the result is contiguous with self's sizes and index.numel() at `dim`, as
// the CPU's. Self is seen as [outer, size, inner]: the dimensions before `dim` must step as one
// (outer), and so must those after it (inner), which every contiguous tensor and most views do.
// Each work-item writes one element of the result: it reads its index, checks it against the
// size of `dim`, and copies self's element. An index out of range is an error found on the
// device (Note [Errors found on the device] in native_launches.cc): its element is zero, and the
// next sync point throws the CPU's error, naming the index and the size (an IndexError, "index
// out of range in self"; a RuntimeError, "INDICES element is out of DATA bounds", for dim 1 of
// two or more dimensions, as the CPU's kernel for that case words it).
//
// Not taken (the CPU kernel answers, with its values and errors): a zero-dimensional or empty self,
// a one-dimensional self of a dtype the CPU's kernel for it refuses (uint16 and wider unsigned
// types) or of a float8 type, an empty index, an index of another dtype, of more than one dimension
// or on another device, a dimension out of range, conjugate or negative bits, 16-byte elements
// (complex128), dimensions that do not step as one.

namespace {

// Whether the CPU's kernel for a one-dimensional self takes the dtype (its kernel for more
// dimensions moves bytes, and takes every dtype).
bool cpu_selects_vectors_of(at::ScalarType type) {
  switch (type) {
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong:
    case at::kHalf: case at::kFloat: case at::kDouble: case at::kComplexHalf:
    case at::kComplexFloat: case at::kBool: case at::kBFloat16:
      return true;
    default:
      return false;  // the CPU's error (uint16 and wider unsigned), or float8 types: its kernel
  }
}

// `wrap`: a negative index counts from the end of the dimension (advanced indexing's rule); the
// error reports the index as given.
KernelSource index_select_source(const std::string& t, const std::string& index_type, bool wrap) {
  const std::string name =
      "oclvm_index_select_" + t + "_" + index_type + (wrap ? "_wrapped" : "");
  std::string s = kDeviceErrorSource;
  s += "__kernel void " + name + "(OCLVM_BLOB(" + t + ", out), OCLVM_BLOB(" + t +
       ", a), OCLVM_BLOB(" + index_type +
       ", idx), OCLVM_BLOB(long, err), int code, ulong n, long count, long inner, long size, "
       "long outer_stride, long dim_stride, long inner_stride, long index_stride) {\n";
  s += "  const ulong i = get_global_id(0);\n  if (i >= n) return;\n";
  s += "  const long in = (long)(i % (ulong)inner);\n  const ulong rest = i / (ulong)inner;\n";
  s += "  const long j = (long)(rest % (ulong)count), o = (long)(rest / (ulong)count);\n";
  s += "  const long given = (long)OCLVM_PTR(" + index_type + ", idx)[j * index_stride];\n";
  s += wrap ? "  const long k = given < 0 ? given + size : given;\n" : "  const long k = given;\n";
  s += "  if (k < 0 || k >= size) {\n";
  s += "    oclvm_report(err_base, err_offset, code, given, size);\n";
  s += "    OCLVM_PTR(" + t + ", out)[i] = (" + t + ")0;\n    return;\n  }\n";
  s += "  OCLVM_PTR(" + t + ", out)[i] = OCLVM_PTR(" + t +
       ", a)[o * outer_stride + k * dim_stride + in * inner_stride];\n}\n";
  return KernelSource{std::move(s), name, ""};
}

}  // namespace

namespace {

// self's elements at `index` (a vector or a single number) along `dim`, as index_select lays them
// out, an index out of range reported with `code`; `wrap` as index_select_source's. nullopt when
// the native path does not take the call (Note [Native index_select]).
std::optional<at::Tensor> select_along(const at::Tensor& self, int64_t dim,
                                       const at::Tensor& index, bool wrap, int32_t code) {
  const std::optional<std::pair<int64_t, int64_t>> outer = dimensions_as_one(self, 0, dim);
  const std::optional<std::pair<int64_t, int64_t>> inner =
      dimensions_as_one(self, dim + 1, self.dim());
  if (!outer || !inner) return std::nullopt;
  const char* bits = cl_bits_type(self.itemsize());  // an integer type of the element's size
  if (bits == nullptr) return std::nullopt;               // complex128
  const bool long_index = index.scalar_type() == at::kLong;
  const uint64_t id = (static_cast<uint64_t>(self.itemsize()) << 8) | (wrap ? 2u : 0u) |
                      (long_index ? 1u : 0u);
  const std::shared_ptr<const Kernel> kernel =
      native_kernel(self.device().index(), NativeKernelFamily::kIndex, id,
                    [&] { return index_select_source(bits, long_index ? "long" : "int", wrap); });
  if (kernel == nullptr) return std::nullopt;
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[dim] = index.numel();
  at::Tensor out = at::empty(sizes, self.options());  // contiguous, as the CPU's
  const std::vector<LaunchArg> args{blob_arg(out, KernelAccess::kWrite),
                                    blob_arg(self, KernelAccess::kRead),
                                    blob_arg(index, KernelAccess::kRead),
                                    device_error_arg(self.device().index()),
                                    LaunchArg::of(code),
                                    LaunchArg::of(static_cast<uint64_t>(out.numel())),
                                    LaunchArg::of(index.numel()),
                                    LaunchArg::of(inner->first),
                                    LaunchArg::of(self.size(dim)),
                                    LaunchArg::of(outer->second),
                                    LaunchArg::of(self.stride(dim)),
                                    LaunchArg::of(inner->second),
                                    LaunchArg::of(index.dim() == 0 ? int64_t{0} : index.stride(0))};
  run_native_kernel(kernel, out, args, static_cast<size_t>(out.numel()));
  device_errors_submitted(self.device().index());
  count_native_launch();
  return out;
}

// Whether the native path takes self and index of an index_select or advanced index (checks both
// share: one native-path device, strided, no conjugate or negative bits, a non-empty self, a
// non-empty index of int64 or int32).
bool selectable(const at::Tensor& self, const at::Tensor& index) {
  return self.defined() && index.defined() && is_device(self) && is_device(index) &&
         index.device() == self.device() && native_kernels(self.device().index()) &&
         self.layout() == at::kStrided && index.layout() == at::kStrided && !self.is_conj() &&
         !self.is_neg() && !index.is_conj() && !index.is_neg() && self.dim() > 0 &&
         self.numel() > 0 && index.numel() > 0 &&
         (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt);
}

}  // namespace

std::optional<at::Tensor> native_index_select(const at::Tensor& self, int64_t dim,
                                              const at::Tensor& index) {
  if (!selectable(self, index) || index.dim() > 1 || dim < -self.dim() || dim >= self.dim()) {
    return std::nullopt;
  }
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (self.dim() == 1 && !cpu_selects_vectors_of(self.scalar_type())) return std::nullopt;
  // The CPU words an index out of range as its kernel for dim 1 of two or more dimensions does.
  const DeviceError code = self.dim() > 1 && dim == 1 ? DeviceError::kIndexOutOfDataBounds
                                                      : DeviceError::kIndexOutOfRange;
  return select_along(self, dim, index, /*wrap=*/false, static_cast<int32_t>(code));
}

// Note [Native advanced indexing]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// index.Tensor(self, indices) of a contiguous self with k int64 (or k int32) index tensors at
// consecutive positions p .. p + k - 1, every other entry absent (x[:, idx], x[idx],
// transformers' input_ids[:, [-1, 0]] and its mask functions' padding_mask[batch_idx, kv_idx]):
// the index tensors broadcast to one shape B, and the result is
// self[o, idx_0[b], ..., idx_(k-1)[b], i] at (o, b, i), shaped self.sizes[:p] + B +
// self.sizes[p+k:] and contiguous, as the CPU's. One index tensor is index_select's kernel over
// the flattened index; more are one kernel that reads each index tensor expanded to B and made
// contiguous (a native copy, where it is not already). A negative index counts from the end of
// its dimension; an index out of range is found on the device and the next sync point throws
// the CPU's IndexError, "index 7 is out of bounds for dimension 1 with size 5" (the CPU numbers
// the dimension among the index tensors). Not taken: index tensors that are not consecutive
// (the CPU then puts B first), of mixed or other dtypes (boolean or byte masks: their result's
// size needs a sync), more than four, shapes that do not broadcast (the CPU's error), an empty
// index or self, a non-contiguous self or index tensor (the CPU's result then follows their
// layout), and whatever index_select's kernel does not take.

namespace {

constexpr size_t kMaxIndexTensors = 4;

KernelSource multi_index_source(const std::string& t, const std::string& index_type, size_t k) {
  const std::string name = "oclvm_index_" + std::to_string(k) + "_" + t + "_" + index_type;
  std::string s = kDeviceErrorSource;
  s += "__kernel void " + name + "(OCLVM_BLOB(" + t + ", out), OCLVM_BLOB(" + t + ", a), ";
  for (size_t j = 0; j < k; ++j) {
    s += "OCLVM_BLOB(" + index_type + ", idx" + std::to_string(j) + "), ";
  }
  s += "OCLVM_BLOB(long, err), int code, ulong n, long count, long inner, long outer_stride";
  for (size_t j = 0; j < k; ++j) {
    s += ", long size" + std::to_string(j) + ", long stride" + std::to_string(j);
  }
  s += ") {\n  const ulong i = get_global_id(0);\n  if (i >= n) return;\n";
  s += "  const long in = (long)(i % (ulong)inner);\n  const ulong rest = i / (ulong)inner;\n";
  s += "  const long b = (long)(rest % (ulong)count), o = (long)(rest / (ulong)count);\n";
  s += "  long at = o * outer_stride + in;\n";
  for (size_t j = 0; j < k; ++j) {
    const std::string n = std::to_string(j);
    s += "  {\n    const long given = (long)OCLVM_PTR(" + index_type + ", idx" + n + ")[b];\n";
    s += "    const long k = given < 0 ? given + size" + n + " : given;\n";
    s += "    if (k < 0 || k >= size" + n + ") {\n";
    s += "      oclvm_report(err_base, err_offset, code + (" + n + " << 8), given, size" + n +
         ");\n";
    s += "      OCLVM_PTR(" + t + ", out)[i] = (" + t + ")0;\n      return;\n    }\n";
    s += "    at += k * stride" + n + ";\n  }\n";
  }
  s += "  OCLVM_PTR(" + t + ", out)[i] = OCLVM_PTR(" + t + ", a)[at];\n}\n";
  return KernelSource{std::move(s), name, ""};
}

// The shape `shapes` broadcast to; nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> broadcast_shape(const std::vector<at::Tensor>& tensors) {
  size_t rank = 0;
  for (const at::Tensor& t : tensors) rank = std::max(rank, static_cast<size_t>(t.dim()));
  std::vector<int64_t> shape(rank, 1);
  for (const at::Tensor& t : tensors) {
    const size_t offset = rank - static_cast<size_t>(t.dim());
    for (size_t d = 0; d < static_cast<size_t>(t.dim()); ++d) {
      const int64_t size = t.size(static_cast<int64_t>(d));
      int64_t& into = shape[offset + d];
      if (size == into || size == 1) continue;
      if (into != 1) return std::nullopt;
      into = size;
    }
  }
  return shape;
}

}  // namespace

std::optional<at::Tensor> native_index(const at::Tensor& self,
                                       const c10::List<std::optional<at::Tensor>>& indices) {
  std::vector<at::Tensor> given;
  int64_t first = -1;
  for (size_t i = 0; i < indices.size(); ++i) {
    const std::optional<at::Tensor> entry = indices.get(i);
    if (!entry.has_value() || !entry->defined()) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    if (static_cast<int64_t>(i) != first + static_cast<int64_t>(given.size())) {
      return std::nullopt;  // not consecutive
    }
    given.push_back(*entry);
  }
  if (given.empty() || given.size() > kMaxIndexTensors ||
      static_cast<int64_t>(indices.size()) > self.dim() || !self.is_contiguous()) {
    return std::nullopt;
  }
  for (const at::Tensor& index : given) {
    // A non-contiguous index orders the CPU's result by its strides (TensorIterator's rule).
    if (!selectable(self, index) || index.scalar_type() != given[0].scalar_type() ||
        !index.is_contiguous()) {
      return std::nullopt;
    }
  }
  const int32_t code = static_cast<int32_t>(DeviceError::kIndexOutOfBoundsForIndexing);
  const std::optional<std::vector<int64_t>> shape = broadcast_shape(given);
  if (!shape) return std::nullopt;
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().begin() + first);
  sizes.insert(sizes.end(), shape->begin(), shape->end());
  const int64_t after = first + static_cast<int64_t>(given.size());
  sizes.insert(sizes.end(), self.sizes().begin() + after, self.sizes().end());
  if (given.size() == 1) {
    std::optional<at::Tensor> flat =
        select_along(self, first, given[0].reshape({-1}), /*wrap=*/true, code);
    if (!flat) return std::nullopt;
    return flat->view(sizes);
  }
  const char* bits = cl_bits_type(self.itemsize());
  if (bits == nullptr) return std::nullopt;
  const bool long_index = given[0].scalar_type() == at::kLong;
  const uint64_t id = (uint64_t{2} << 16) | (static_cast<uint64_t>(given.size()) << 12) |
                      (static_cast<uint64_t>(self.itemsize()) << 4) | (long_index ? 1u : 0u);
  const std::shared_ptr<const Kernel> kernel =
      native_kernel(self.device().index(), NativeKernelFamily::kIndex, id, [&] {
        return multi_index_source(bits, long_index ? "long" : "int", given.size());
      });
  if (kernel == nullptr) return std::nullopt;
  int64_t count = 1, inner = 1;
  for (const int64_t size : *shape) count *= size;
  for (int64_t d = after; d < self.dim(); ++d) inner *= self.size(d);
  at::Tensor out = at::empty(sizes, self.options());  // contiguous, as the CPU's
  if (out.numel() == 0) return out;
  std::vector<at::Tensor> expanded;  // each index, count elements in B's row-major order
  for (const at::Tensor& index : given) expanded.push_back(index.expand(*shape).contiguous());
  std::vector<LaunchArg> args{blob_arg(out, KernelAccess::kWrite),
                              blob_arg(self, KernelAccess::kRead)};
  for (const at::Tensor& index : expanded) args.push_back(blob_arg(index, KernelAccess::kRead));
  args.push_back(device_error_arg(self.device().index()));
  args.push_back(LaunchArg::of(code));
  args.push_back(LaunchArg::of(static_cast<uint64_t>(out.numel())));
  args.push_back(LaunchArg::of(count));
  args.push_back(LaunchArg::of(inner));
  // A contiguous self's elements lie in row-major order: the stride of the dimensions before the
  // index tensors is the product of the sizes from `first` on (a size-1 dimension's own stride
  // may be anything).
  int64_t outer_stride = 1;
  for (int64_t d = first; d < self.dim(); ++d) outer_stride *= self.size(d);
  args.push_back(LaunchArg::of(outer_stride));
  for (size_t j = 0; j < given.size(); ++j) {
    const int64_t d = first + static_cast<int64_t>(j);
    args.push_back(LaunchArg::of(self.size(d)));
    args.push_back(LaunchArg::of(self.stride(d)));
  }
  run_native_kernel(kernel, out, args, static_cast<size_t>(out.numel()));
  device_errors_submitted(self.device().index());
  count_native_launch();
  return out;
}

// Note [Native embedding backward]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq=False) of
// a float32 or float64 gradient [..., D] and int64 or int32 indices on its device: row k of the
// result is the sum of the gradient's rows i with indices[i] == k (padding_idx's row stays zero),
// added in the order of i from zero, as the CPU's loop adds them: its values are the CPU's bits
// (a NaN's payload and sign aside, which a GPU may not keep).
// A GPU adds rows in parallel only per result element, so the rows of each index are listed
// first, in order, by four small kernels:
//   - count: one work-item per row k of the result counts the indices equal to k;
//   - starts: one work-item turns the counts into where each k's list starts (a prefix sum);
//   - list: one work-item per k writes its rows' numbers i, in order;
//   - sum: one work-item per element (k, c) of the result adds grad[i, c] over k's list.
// The count and list kernels read every index once per row of the result: O(num_weights x
// indices) reads, a few milliseconds on a GPU for GPT-2's 50,257 rows and 1,024 tokens, and the
// place to start (a sort of the indices) where it matters. An index outside [0, num_weights) adds
// nowhere, as on the CPU. Scratch memory: num_weights + 1 and indices.numel() int64s.
//
// Not taken (the CPU kernel answers): scale_grad_by_freq (the CPU scales each row's terms by
// 1 / count, rounding as its vectorised add does), other dtypes, a gradient whose elements are
// not indices.numel() rows of its last dimension (the CPU's error), tensors on another device.

namespace {

enum class EmbeddingKernel : uint8_t { kCount, kStarts, kList, kSum };

KernelSource embedding_source(EmbeddingKernel kind, const std::string& t,
                              const std::string& index_type) {
  const std::string idx = "OCLVM_PTR(" + index_type + ", idx)";
  const std::string starts = "OCLVM_PTR(long, starts)";
  std::string name, s;
  switch (kind) {
    case EmbeddingKernel::kCount:
      name = "oclvm_embedding_count_" + index_type;
      s = "__kernel void " + name + "(OCLVM_BLOB(" + index_type +
          ", idx), OCLVM_BLOB(long, starts), long n, long rows, long padding) {\n";
      s += "  const long k = (long)get_global_id(0);\n  if (k >= rows) return;\n";
      s += "  long count = 0;\n";
      s += "  if (k != padding) for (long i = 0; i < n; ++i) count += (long)" + idx +
           "[i] == k;\n";
      s += "  " + starts + "[k + 1] = count;\n  if (k == 0) " + starts + "[0] = 0;\n}\n";
      break;
    case EmbeddingKernel::kStarts:
      name = "oclvm_embedding_starts";
      s = "__kernel void " + name + "(OCLVM_BLOB(long, starts), long rows) {\n";
      s += "  if (get_global_id(0) != 0) return;\n";
      s += "  long sum = 0;\n";
      s += "  for (long k = 1; k <= rows; ++k) { sum += " + starts + "[k]; " + starts +
           "[k] = sum; }\n}\n";
      break;
    case EmbeddingKernel::kList:
      name = "oclvm_embedding_list_" + index_type;
      s = "__kernel void " + name + "(OCLVM_BLOB(" + index_type +
          ", idx), OCLVM_BLOB(long, starts), OCLVM_BLOB(long, list), long n, long rows, "
          "long padding) {\n";
      s += "  const long k = (long)get_global_id(0);\n  if (k >= rows || k == padding) return;\n";
      s += "  long p = " + starts + "[k];\n";
      s += "  for (long i = 0; i < n; ++i) if ((long)" + idx +
           "[i] == k) OCLVM_PTR(long, list)[p++] = i;\n}\n";
      break;
    case EmbeddingKernel::kSum:
      name = "oclvm_embedding_sum_" + t;
      if (t == "double") s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
      s += "#pragma OPENCL FP_CONTRACT OFF\n";
      s += "__kernel void " + name + "(OCLVM_BLOB(" + t + ", out), OCLVM_BLOB(" + t +
           ", grad), OCLVM_BLOB(long, starts), OCLVM_BLOB(long, list), long rows, long d) {\n";
      s += "  const ulong e = get_global_id(0);\n  if (e >= (ulong)(rows * d)) return;\n";
      s += "  const long k = (long)e / d, c = (long)e % d;\n";
      s += "  " + t + " sum = 0;\n";
      s += "  for (long j = " + starts + "[k]; j < " + starts + "[k + 1]; ++j) sum += OCLVM_PTR(" +
           t + ", grad)[OCLVM_PTR(long, list)[j] * d + c];\n";
      s += "  OCLVM_PTR(" + t + ", out)[e] = sum;\n}\n";
      break;
  }
  return KernelSource{std::move(s), name, ""};
}

std::shared_ptr<const Kernel> embedding_kernel(c10::DeviceIndex device, EmbeddingKernel kind,
                                               at::ScalarType type, at::ScalarType index_type) {
  // Ids above index_select's (below 2^16).
  const uint64_t id = (uint64_t{1} << 16) | (static_cast<uint64_t>(kind) << 8) |
                      (type == at::kDouble ? 2u : 0u) | (index_type == at::kLong ? 1u : 0u);
  return native_kernel(device, NativeKernelFamily::kIndex, id, [&] {
    return embedding_source(kind, cl_type(type), cl_type(index_type));
  });
}

}  // namespace

std::optional<at::Tensor> native_embedding_backward(const at::Tensor& grad,
                                                    const at::Tensor& indices, int64_t num_weights,
                                                    int64_t padding_idx, bool scale_grad_by_freq) {
  if (scale_grad_by_freq || !grad.defined() || !indices.defined() || !is_device(grad) ||
      indices.device() != grad.device() || !native_kernels(grad.device().index()) ||
      grad.layout() != at::kStrided || indices.layout() != at::kStrided || grad.is_conj() ||
      grad.is_neg() || indices.is_neg() || grad.dim() == 0 || num_weights < 0 ||
      (grad.scalar_type() != at::kFloat && grad.scalar_type() != at::kDouble) ||
      (indices.scalar_type() != at::kLong && indices.scalar_type() != at::kInt)) {
    return std::nullopt;
  }
  // The gradient must be indices.numel() rows of its last dimension (else the CPU's view error);
  // checked by division, which cannot overflow.
  const int64_t width = grad.size(-1);
  if (width == 0 ? grad.numel() != 0
                 : grad.numel() % width != 0 || grad.numel() / width != indices.numel()) {
    return std::nullopt;
  }
  const c10::DeviceIndex device = grad.device().index();
  std::array<std::shared_ptr<const Kernel>, 4> kernels;
  for (size_t i = 0; i < kernels.size(); ++i) {
    kernels[i] = embedding_kernel(device, static_cast<EmbeddingKernel>(i), grad.scalar_type(),
                                  indices.scalar_type());
    if (kernels[i] == nullptr) return std::nullopt;
  }
  const int64_t d = grad.size(-1);
  const int64_t n = indices.numel();
  at::Tensor out = at::empty({num_weights, d}, grad.options());  // contiguous, as the CPU's
  if (out.numel() == 0) return out;
  if (n == 0) return out.zero_();  // no rows to add: a fill
  const at::Tensor flat_indices = indices.contiguous();  // a native copy where it is not
  const at::Tensor rows = grad.contiguous();
  at::Tensor starts = at::empty({num_weights + 1}, grad.options().dtype(at::kLong));
  at::Tensor list = at::empty({n}, grad.options().dtype(at::kLong));
  const auto launch = [](const std::shared_ptr<const Kernel>& kernel, const at::Tensor& written,
                          const std::vector<LaunchArg>& args, int64_t work_items) {
    run_native_kernel(kernel, written, args, static_cast<size_t>(work_items));
    count_native_launch();
  };
  launch(kernels[0], starts,
         {blob_arg(flat_indices, KernelAccess::kRead), blob_arg(starts, KernelAccess::kWrite),
          LaunchArg::of(n), LaunchArg::of(num_weights), LaunchArg::of(padding_idx)},
         num_weights);
  launch(kernels[1], starts,
         {blob_arg(starts, KernelAccess::kReadWrite), LaunchArg::of(num_weights)}, 1);
  launch(kernels[2], list,
         {blob_arg(flat_indices, KernelAccess::kRead), blob_arg(starts, KernelAccess::kRead),
          blob_arg(list, KernelAccess::kWrite), LaunchArg::of(n), LaunchArg::of(num_weights),
          LaunchArg::of(padding_idx)},
         num_weights);
  launch(kernels[3], out,
         {blob_arg(out, KernelAccess::kWrite), blob_arg(rows, KernelAccess::kRead),
          blob_arg(starts, KernelAccess::kRead), blob_arg(list, KernelAccess::kRead),
          LaunchArg::of(num_weights), LaunchArg::of(d)},
         out.numel());
  return out;
}

}  // namespace oclvm::torch_adapter
