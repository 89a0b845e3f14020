// adapters/torch/native_blas.cc — mm, mm.out, bmm and addmm on the native path: each one CLBlast
// product (storage/opencl/gemm.h) in a NativeCall instruction on the operands' stream
// (native_kernels.h).

#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/host_view.h"
#include "adapters/torch/native_kernel_table.h"
#include "adapters/torch/native_kernels.h"
#include "adapters/torch/native_gemm.h"
#include "adapters/torch/native_launches.h"
#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/storage/errors.h"
#if defined(OCLVM_WITH_CLBLAST)
#include "oclvm/storage/opencl/gemm.h"
#endif

namespace oclvm::torch_adapter {

// Note [Native matrix products]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// mm (and mm.out into an `out` of the product's shape), bmm and addmm of float32, float64, float16
// or bfloat16 device tensors of one native-path device are one CLBlast call each (Gemm, or
// GemmStridedBatched for bmm), enqueued by a NativeCall instruction on the current stream, which
// the VM orders by the operands' byte ranges like any launch. An operand goes in as it is stored
// when CLBlast can read its last two dimensions in place: rows or columns contiguous, with a
// leading dimension (a transposed view is read as the transpose of a row-major matrix, so
// autograd's mat.t() costs no copy); any other layout is made contiguous first by the native
// strided copy. The result is contiguous, as the CPU's; mm.out writes a contiguous `out` in place
// (a row slice of a larger matrix, as a grouped product's loop passes), and any other `out` through
// a copy. Sizes, strides and offsets past 2^31 elements are CLBlast's limit (it passes them to its
// kernels as int): such calls are not taken, and an operand that lies that far into its buffer
// fails with an error. addmm writes self, broadcast to the result's shape, into the result first
// and lets CLBlast add beta times it; with beta 0 it does not, and CLBlast does not read the result
// then, so NaN in self does not spread (the CPU ignores self then too).
//
// The values are not the CPU's to the bit: CLBlast sums the k products in its own order (tiles of
// the device's tuning), as torch's CPU BLAS does in its. The difference is the rounding of a
// k-term sum; the callers' tolerances for float32 products (OpInfo's, the model families')
// cover it.
//
// float16 and bfloat16 products are computed in float, as the CPU's BLAS computes them: each
// operand converted to a contiguous float32 copy on the device, the float32 product (bias and
// scales included), and the result rounded to the dtype once, by one conversion. CLBlast's
// half-precision Hgemm is not used: it needs cl_khr_fp16 and accumulates in half on the devices
// tuned for it, where torch's products accumulate in float. bfloat16 has no CLBlast routine.
//
// Not taken (the CPU kernel answers, with its values and errors): other dtypes, conjugate or
// negative bits, mixed dtypes or devices, wrong shapes, empty products (k, m or n of 0), float64
// on a device whose kernels cannot build it, and a module built without CLBlast.

#if defined(OCLVM_WITH_CLBLAST)
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

// Whether `t` may be an operand of a product on `device`, as a matrix (dim 2) or a batch (dim 3).
bool plain_matrix(const at::Tensor& t, c10::DeviceIndex device, int64_t dim) {
  return t.defined() && is_device(t) && t.device().index() == device &&
         t.layout() == at::kStrided && !t.is_conj() && !t.is_neg() && t.dim() == dim &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble ||
          reduced_float(t.scalar_type()));
}

// How CLBlast reads the last two dimensions of `t` (r x c) in place, its memory and offset left
// for the native call to fill; nullopt when it cannot (no dimension of stride 1 with a leading
// dimension past the other's extent).
std::optional<opencl::GemmMatrix> in_place(const at::Tensor& t) {
  const int64_t d = t.dim();
  const int64_t rows = t.size(d - 2), cols = t.size(d - 1);
  const int64_t row_stride = t.stride(d - 2), col_stride = t.stride(d - 1);
  opencl::GemmMatrix matrix;
  matrix.batch_stride = d == 3 ? static_cast<size_t>(t.stride(0)) : 0;
  if (cols == 1 || col_stride == 1) {  // row-major: element (i, j) at i * ld + j
    const int64_t ld = rows == 1 ? cols : row_stride;
    if (ld >= cols) {
      matrix.ld = static_cast<size_t>(ld);
      return matrix;
    }
  }
  if (rows == 1 || row_stride == 1) {  // column-major: the transpose of a row-major c x r matrix
    const int64_t ld = cols == 1 ? rows : col_stride;
    if (ld >= rows) {
      matrix.ld = static_cast<size_t>(ld);
      matrix.transposed = true;
      return matrix;
    }
  }
  return std::nullopt;
}

// Whether every size and stride of `t` is an int: CLBlast hands its kernels sizes, leading
// dimensions, offsets and batch strides as int.
bool fits_int(const at::Tensor& t) {
  if (!t.defined()) return true;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > kIntMax || t.stride(d) > kIntMax) return false;
  }
  return span_elements(t) <= kIntMax;
}

// An operand and how CLBlast reads it: `t` itself, or a contiguous copy of it.
struct Operand {
  at::Tensor tensor;
  opencl::GemmMatrix matrix;
};

// A float16 or bfloat16 operand is converted to a contiguous float32 copy (the product is
// computed in float: Note [Native matrix products]).
Operand operand(const at::Tensor& t) {
  const bool widen = reduced_float(t.scalar_type());
  if (!widen) {
    if (std::optional<opencl::GemmMatrix> matrix = in_place(t)) return Operand{t, *matrix};
  }
  at::Tensor copy = at::empty(t.sizes(), t.options().dtype(opmath_type(t.scalar_type())));
  if (!native_copy(t, copy)) copy.copy_(t);
  return Operand{copy, *in_place(copy)};
}

// A new tensor for a product of `sizes` whose operands have dtype `type`: of the dtype the
// product is computed in (opmath_type).
at::Tensor new_product(at::IntArrayRef sizes, const at::Tensor& like) {
  return at::empty(sizes, like.options().dtype(opmath_type(like.scalar_type())));
}

// `product` as a result of dtype `type`: itself, or rounded to `type` by one conversion on the
// device.
at::Tensor rounded(const at::Tensor& product, at::ScalarType type) {
  if (product.scalar_type() == type) return product;
  at::Tensor out = at::empty(product.sizes(), product.options().dtype(type));
  if (!native_copy(product, out)) out.copy_(product);
  return out;
}

// The bytes of `t`'s blob its elements span, from its element 0.
NativeArg native_arg(const at::Tensor& t, KernelAccess access) {
  const BlobRef first = element0(t);
  return NativeArg{first.blob, first.offset,
                   static_cast<size_t>(span_elements(t)) * item_bytes(t), access};
}

// Enqueues out := alpha * a @ b + beta * out (batched when out has three dimensions) as one
// NativeCall on out's current stream; out is contiguous and read only when beta is not 0.
void enqueue_product(const at::Tensor& out, const Operand& a, const Operand& b, double alpha,
                     double beta) {
  const int64_t d = out.dim();
  opencl::GemmCall call;
  call.dtype = out.scalar_type() == at::kFloat ? DType::kF32 : DType::kF64;
  call.batch = d == 3 ? static_cast<size_t>(out.size(0)) : 1;
  call.m = static_cast<size_t>(out.size(d - 2));
  call.n = static_cast<size_t>(out.size(d - 1));
  call.k = static_cast<size_t>(a.tensor.size(d - 1));
  call.alpha = alpha;
  call.beta = beta;
  call.a = a.matrix;
  call.b = b.matrix;
  call.c.ld = call.n;
  call.c.batch_stride = call.m * call.n;
  enqueue_gemm(out, a.tensor, b.tensor, call);
}

// The device of a product of `a` and `b` when the native path takes it (checks shared by the
// three operators: one native-path device, one float dtype, `dim` dimensions each); nullopt
// otherwise.
std::optional<c10::DeviceIndex> product_device(const at::Tensor& a, const at::Tensor& b,
                                               int64_t dim) {
  if (!a.defined() || !is_device(a) || !fits_int(a) || !fits_int(b)) return std::nullopt;
  const c10::DeviceIndex device = a.device().index();
  if (!native_kernels(device) || !plain_matrix(a, device, dim) || !plain_matrix(b, device, dim) ||
      a.scalar_type() != b.scalar_type()) {
    return std::nullopt;
  }
  if (a.scalar_type() == at::kDouble && !native_float64(device)) return std::nullopt;
  return device;
}

}  // namespace

void enqueue_gemm(const at::Tensor& c, const at::Tensor& a, const at::Tensor& b,
                  const opencl::GemmCall& product) {
  const size_t element = item_bytes(c);
  const std::string label = product.batch == 1 ? "clblast::Gemm" : "clblast::GemmStridedBatched";
  InstructionsBuilder builder = runtime().builder();
  translate_errors([&] {
    builder.native(
        stream_of(c), label,
        {native_arg(c, product.beta == 0 ? KernelAccess::kWrite : KernelAccess::kReadWrite),
         native_arg(a, KernelAccess::kRead), native_arg(b, KernelAccess::kRead)},
        [product, element](const NativeCallContext& context) {
          opencl::GemmCall call = product;
          const std::array<opencl::GemmMatrix*, 3> matrices{&call.c, &call.a, &call.b};
          for (size_t i = 0; i < matrices.size(); ++i) {
            const NativeBuffer& buffer = context.buffers[i];
            if (buffer.offset % element != 0 ||
                (buffer.offset + buffer.bytes) / element > static_cast<size_t>(kIntMax)) {
              throw BackendError("Expected a GEMM operand to start at a whole element of its "
                                 "buffer and to end within 2^31 elements of its start, but it "
                                 "spans bytes " + std::to_string(buffer.offset) + " to " +
                                 std::to_string(buffer.offset + buffer.bytes), 0);
            }
            matrices[i]->memory = buffer.memory;
            matrices[i]->offset += buffer.offset / element;
          }
          opencl::enqueue_gemm(context.queue, call, context.device.str());
        });
  });
  submit_native(c.device().index(), builder.take());
}

std::optional<at::Tensor> native_mm(const at::Tensor& self, const at::Tensor& mat2) {
  if (!product_device(self, mat2, 2) || self.size(1) != mat2.size(0) || self.numel() == 0 ||
      mat2.numel() == 0 || self.size(0) * mat2.size(1) > kIntMax) {
    return std::nullopt;
  }
  at::Tensor out = new_product({self.size(0), mat2.size(1)}, self);
  enqueue_product(out, operand(self), operand(mat2), 1, 0);
  return rounded(out, self.scalar_type());
}

bool native_mm_out(const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& out) {
  const std::optional<c10::DeviceIndex> device = product_device(self, mat2, 2);
  if (!device || self.size(1) != mat2.size(0) || self.numel() == 0 || mat2.numel() == 0 ||
      !out.defined() || !is_device(out) || out.device().index() != *device ||
      out.layout() != at::kStrided || out.scalar_type() != self.scalar_type() || out.is_conj() ||
      out.is_neg() || out.dim() != 2 || out.size(0) != self.size(0) ||
      out.size(1) != mat2.size(1) || out.is_alias_of(self) || out.is_alias_of(mat2) ||
      !fits_int(out)) {
    return false;  // the CPU's resizing of `out`, its errors, or its order of reads and writes
  }
  if (out.is_contiguous() && !reduced_float(out.scalar_type())) {
    enqueue_product(out, operand(self), operand(mat2), 1, 0);
    return true;
  }
  if (!elements_are_distinct(out)) return false;  // the CPU's error
  const at::Tensor product = new_product(out.sizes(), out);
  enqueue_product(product, operand(self), operand(mat2), 1, 0);
  if (!copy_for_operator(product, out)) out.copy_(product);  // past the kernels' rank
  return true;
}

std::optional<at::Tensor> native_bmm(const at::Tensor& self, const at::Tensor& mat2) {
  if (!product_device(self, mat2, 3) || self.size(0) != mat2.size(0) ||
      self.size(2) != mat2.size(1) || self.numel() == 0 || mat2.numel() == 0 ||
      self.size(1) * mat2.size(2) > kIntMax / self.size(0)) {
    return std::nullopt;
  }
  at::Tensor out = new_product({self.size(0), self.size(1), mat2.size(2)}, self);
  enqueue_product(out, operand(self), operand(mat2), 1, 0);
  return rounded(out, self.scalar_type());
}

std::optional<at::Tensor> native_addmm(const at::Tensor& self, const at::Tensor& mat1,
                                       const at::Tensor& mat2, const at::Scalar& beta,
                                       const at::Scalar& alpha) {
  const std::optional<c10::DeviceIndex> device = product_device(mat1, mat2, 2);
  if (!device || mat1.size(1) != mat2.size(0) || mat1.numel() == 0 || mat2.numel() == 0 ||
      mat1.size(0) * mat2.size(1) > kIntMax ||
      !self.defined() || !is_device(self) || self.device().index() != *device ||
      self.layout() != at::kStrided || self.is_conj() || self.is_neg() ||
      self.scalar_type() != mat1.scalar_type() || beta.isComplex() || alpha.isComplex()) {
    return std::nullopt;
  }
  const std::array<int64_t, 2> sizes{mat1.size(0), mat2.size(1)};
  if (self.dim() > 2 || !at::is_expandable_to(self.sizes(), sizes)) return std::nullopt;
  const double scale = alpha.toDouble(), bias_scale = beta.toDouble();
  const auto overflows_float = [](double v) {
    return std::isfinite(v) && std::abs(v) > std::numeric_limits<float>::max();
  };
  if (opmath_type(mat1.scalar_type()) == at::kFloat &&
      (overflows_float(scale) || overflows_float(bias_scale))) {
    return std::nullopt;  // the CPU's error: the scalar does not fit a float
  }
  at::Tensor out = new_product(sizes, mat1);
  if (bias_scale != 0 && !native_copy(self, out)) out.copy_(self);
  enqueue_product(out, operand(mat1), operand(mat2), scale, bias_scale);
  return rounded(out, mat1.scalar_type());
}

bool native_matrix_products() { return true; }

#else  // a module built without CLBlast: the CPU kernels answer

bool native_matrix_products() { return false; }

std::optional<at::Tensor> native_mm(const at::Tensor&, const at::Tensor&) { return std::nullopt; }
std::optional<at::Tensor> native_bmm(const at::Tensor&, const at::Tensor&) { return std::nullopt; }
bool native_mm_out(const at::Tensor&, const at::Tensor&, const at::Tensor&) { return false; }
std::optional<at::Tensor> native_addmm(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                       const at::Scalar&, const at::Scalar&) {
  return std::nullopt;
}

#endif

}  // namespace oclvm::torch_adapter
