// examples/eager_tensor/ops.cc — the kernels of ops.h and how they are launched, and the call
// that hands CLBlast the VM's queue and buffers for matmul.
#include "ops.h"

#include <clblast.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace eager {
namespace {

using oclvm::InvalidArgument;
using oclvm::KernelAccess;
using oclvm::LaunchArg;

constexpr size_t kMaxDims = 4;
constexpr size_t kGroup = 128;        // work-items per group of the reductions
constexpr size_t kMaxGroups = 64;     // partial sums of the first reduction stage

// Tickets of submitted lists, per Runtime, until synchronize() waits for them.
struct Pending {
  std::mutex mutex;
  std::map<oclvm::Runtime*, std::vector<oclvm::vm::Ticket>> tickets;
};
Pending& pending() {
  static Pending* const instance = new Pending;  // never destroyed: tensors may die at exit
  return *instance;
}

void submit(oclvm::Runtime& runtime, oclvm::InstructionsBuilder& builder) {
  oclvm::vm::Ticket ticket = runtime.submit(builder.take());
  std::lock_guard<std::mutex> lock(pending().mutex);
  pending().tickets[&runtime].push_back(std::move(ticket));
}

// The OpenCL C name of a dtype that has kernels here.
const char* c_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float";
    case DType::kF64: return "double";
    case DType::kI32: return "int";
    case DType::kI64: return "long";
    default:
      throw InvalidArgument(std::string("Expected a tensor of f32, f64, i32 or i64 to compute "
                                        "on, but got ") + oclvm::dtype_name(dtype));
  }
}

bool is_floating(DType dtype) { return dtype == DType::kF32 || dtype == DType::kF64; }

// The value OP stands for in the kernel, on operands x and y of type T.
std::string op_expression(BinaryOp op, DType dtype) {
  switch (op) {
    case BinaryOp::kAdd: return "((x) + (y))";
    case BinaryOp::kSub: return "((x) - (y))";
    case BinaryOp::kMul: return "((x) * (y))";
    case BinaryOp::kDiv:
      if (!is_floating(dtype)) {
        throw InvalidArgument(std::string("Expected f32 or f64 operands to divide, but got ") +
                              oclvm::dtype_name(dtype));
      }
      return "((x) / (y))";
    case BinaryOp::kMaximum: return is_floating(dtype) ? "fmax((x), (y))" : "max((x), (y))";
  }
  return "";
}

const char* const kBinaryBody = R"(
#ifdef NEEDS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
// out[i] = OP(a[...], b[...]) for i < n; the index is split over four dimensions of sizes
// (s0), s1, s2, s3 and each operand walks them with its own strides (0 where it broadcasts).
__kernel void binary(OCLVM_BLOB(T, out), OCLVM_BLOB(const T, a), OCLVM_BLOB(const T, b), ulong n,
                     ulong s1, ulong s2, ulong s3, long a0, long a1, long a2, long a3, long b0,
                     long b1, long b2, long b3) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  ulong r = i;
  const ulong i3 = r % s3; r /= s3;
  const ulong i2 = r % s2; r /= s2;
  const ulong i1 = r % s1;
  const ulong i0 = r / s1;
  const T x = OCLVM_PTR(const T, a)[i0 * a0 + i1 * a1 + i2 * a2 + i3 * a3];
  const T y = OCLVM_PTR(const T, b)[i0 * b0 + i1 * b1 + i2 * b2 + i3 * b3];
  OCLVM_PTR(T, out)[i] = OP(x, y);
}
)";

const char* const kSumBody = R"(
#ifdef NEEDS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
// Each group adds a strided slice of in[0, n) into out[group] (ACC), through local memory.
__kernel void sum_stage(OCLVM_BLOB(ACC, out), OCLVM_BLOB(const T, in), ulong n,
                        __local ACC* scratch) {
  const size_t l = get_local_id(0);
  ACC acc = 0;
  for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
    acc += (ACC)OCLVM_PTR(const T, in)[i];
  }
  scratch[l] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (size_t s = get_local_size(0) / 2; s > 0; s >>= 1) {
    if (l < s) scratch[l] += scratch[l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (l == 0) OCLVM_PTR(ACC, out)[get_group_id(0)] = scratch[0];
}
)";

std::string defines(const std::vector<std::pair<std::string, std::string>>& names, bool fp64) {
  std::string text = fp64 ? "#define NEEDS_FP64\n" : "";
  for (const auto& [name, value] : names) text += "#define " + name + " " + value + "\n";
  return text;
}

void check_same_place(const Tensor& a, const Tensor& b, const char* what) {
  if (a.dtype() != b.dtype() || a.device() != b.device()) {
    throw InvalidArgument(std::string("Expected operands of one dtype on one device to ") + what +
                          ", but got " + oclvm::dtype_name(a.dtype()) + " on " + a.device().str() +
                          " and " + oclvm::dtype_name(b.dtype()) + " on " + b.device().str());
  }
}

// The broadcast shape of a and b, and each operand's strides over it (0 where it stretches),
// padded in front to kMaxDims.
struct Broadcast {
  Shape shape;
  std::array<int64_t, kMaxDims> sizes{1, 1, 1, 1};
  std::array<int64_t, kMaxDims> a_strides{}, b_strides{};
};

Broadcast broadcast(const Tensor& a, const Tensor& b) {
  const size_t rank = std::max(a.shape().size(), b.shape().size());
  if (rank > kMaxDims) {
    throw InvalidArgument("Expected operands of at most 4 dimensions, but got " +
                          std::to_string(rank));
  }
  Broadcast result;
  result.shape.assign(rank, 1);
  for (size_t k = 0; k < rank; ++k) {  // k counts from the last dimension
    const size_t pad = kMaxDims - 1 - k;
    const bool in_a = k < a.shape().size();
    const bool in_b = k < b.shape().size();
    const int64_t size_a = in_a ? a.shape()[a.shape().size() - 1 - k] : 1;
    const int64_t size_b = in_b ? b.shape()[b.shape().size() - 1 - k] : 1;
    if (size_a != size_b && size_a != 1 && size_b != 1) {
      throw InvalidArgument("Expected shapes that broadcast (equal sizes or 1 in each dimension "
                            "from the last), but got sizes " + std::to_string(size_a) + " and " +
                            std::to_string(size_b) + " in dimension -" + std::to_string(k + 1));
    }
    const int64_t size = size_a == 1 ? size_b : size_a;
    result.shape[rank - 1 - k] = size;
    result.sizes[pad] = size;
    result.a_strides[pad] = in_a && size_a != 1 ? a.strides()[a.shape().size() - 1 - k] : 0;
    result.b_strides[pad] = in_b && size_b != 1 ? b.strides()[b.shape().size() - 1 - k] : 0;
  }
  return result;
}

LaunchArg blob_of(const Tensor& t, KernelAccess access) {
  return LaunchArg::of_blob(t.storage()->blob(),
                            static_cast<size_t>(t.storage_offset()) * oclvm::dtype_size(t.dtype()),
                            access);
}

oclvm::LaunchRange range_of(size_t global, size_t local = 0) {
  oclvm::LaunchRange range;
  range.global[0] = global;
  range.local[0] = local;
  return range;
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_same_place(a, b, "combine");
  const char* type = c_type(a.dtype());
  const Broadcast shape = broadcast(a, b);
  oclvm::Runtime& runtime = a.runtime();
  Tensor out = Tensor::empty(runtime, shape.shape, a.dtype(), a.device());
  const uint64_t n = static_cast<uint64_t>(out.numel());
  if (n == 0) return out;
  const oclvm::KernelSource source{
      defines({{"T", type}, {"OP(x, y)", op_expression(op, a.dtype())}},
              a.dtype() == DType::kF64) + kBinaryBody,
      "binary", ""};
  oclvm::InstructionsBuilder builder = runtime.builder();
  const auto size = [&](size_t d) { return static_cast<uint64_t>(shape.sizes[d]); };
  builder.launch(builder.stream(a.device()), source, range_of(n),
                 {blob_of(out, KernelAccess::kWrite), blob_of(a, KernelAccess::kRead),
                  blob_of(b, KernelAccess::kRead), LaunchArg::of(n), LaunchArg::of(size(1)),
                  LaunchArg::of(size(2)), LaunchArg::of(size(3)),
                  LaunchArg::of(shape.a_strides[0]), LaunchArg::of(shape.a_strides[1]),
                  LaunchArg::of(shape.a_strides[2]), LaunchArg::of(shape.a_strides[3]),
                  LaunchArg::of(shape.b_strides[0]), LaunchArg::of(shape.b_strides[1]),
                  LaunchArg::of(shape.b_strides[2]), LaunchArg::of(shape.b_strides[3])});
  submit(runtime, builder);
  return out;
}

Tensor sum(const Tensor& a) {
  const char* type = c_type(a.dtype());
  const DType out_dtype = is_floating(a.dtype()) ? a.dtype() : DType::kI64;
  const char* acc = c_type(out_dtype);
  oclvm::Runtime& runtime = a.runtime();
  Tensor out = Tensor::empty(runtime, {}, out_dtype, a.device());
  const uint64_t n = static_cast<uint64_t>(a.numel());
  if (n == 0) return out.fill(0);
  const Tensor in = a.contiguous();
  const size_t groups = std::min<size_t>(kMaxGroups, (n + kGroup - 1) / kGroup);
  Tensor partial = Tensor::empty(runtime, {static_cast<int64_t>(groups)}, out_dtype, a.device());
  const bool fp64 = out_dtype == DType::kF64;
  const oclvm::KernelSource first{defines({{"T", type}, {"ACC", acc}}, fp64) + kSumBody,
                                  "sum_stage", ""};
  const oclvm::KernelSource second{defines({{"T", acc}, {"ACC", acc}}, fp64) + kSumBody,
                                   "sum_stage", ""};
  const size_t scratch = kGroup * oclvm::dtype_size(out_dtype);
  oclvm::InstructionsBuilder builder = runtime.builder();
  oclvm::vm::Stream& stream = builder.stream(a.device());
  builder.launch(stream, first, range_of(groups * kGroup, kGroup),
                 {blob_of(partial, KernelAccess::kWrite), blob_of(in, KernelAccess::kRead),
                  LaunchArg::of(n), LaunchArg::local(scratch)});
  builder.launch(stream, second, range_of(kGroup, kGroup),
                 {blob_of(out, KernelAccess::kWrite), blob_of(partial, KernelAccess::kRead),
                  LaunchArg::of(static_cast<uint64_t>(groups)), LaunchArg::local(scratch)});
  submit(runtime, builder);
  return out;  // `partial` dies here: its release waits for the second launch, which reads it
}

namespace {

// How CLBlast reads a 2-D operand in place: row-major with a leading dimension, or the
// transpose of such a matrix. Empty when the layout is neither (the caller copies).
struct GemmOperand {
  clblast::Transpose transpose = clblast::Transpose::kNo;
  size_t ld = 0;
};
std::optional<GemmOperand> gemm_layout(const Tensor& t) {
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  const int64_t row_stride = t.strides()[0], col_stride = t.strides()[1];
  if ((col_stride == 1 || cols == 1) && row_stride >= std::max<int64_t>(cols, 1)) {
    return GemmOperand{clblast::Transpose::kNo, static_cast<size_t>(row_stride)};
  }
  if ((row_stride == 1 || rows == 1) && col_stride >= std::max<int64_t>(rows, 1)) {
    return GemmOperand{clblast::Transpose::kYes, static_cast<size_t>(col_stride)};
  }
  return std::nullopt;
}

// The bytes of `t`'s storage its elements span, from its first element (none when it is empty).
oclvm::NativeArg native_arg(const Tensor& t, KernelAccess access) {
  if (t.numel() == 0) return oclvm::NativeArg{t.storage()->blob(), 0, 0, access};
  const size_t element = oclvm::dtype_size(t.dtype());
  const auto [first, last] = element_span(t.shape(), t.strides(), t.storage_offset());
  return oclvm::NativeArg{t.storage()->blob(), static_cast<size_t>(first) * element,
                          static_cast<size_t>(last - first + 1) * element, access};
}

template <typename T>
void gemm(const oclvm::NativeCallContext& call, size_t m, size_t n, size_t k, GemmOperand a,
          GemmOperand b) {
  cl_command_queue queue = static_cast<cl_command_queue>(call.queue);
  const auto buffer = [&](size_t i) { return static_cast<cl_mem>(call.buffers[i].memory); };
  const auto offset = [&](size_t i) { return call.buffers[i].offset / sizeof(T); };
  const clblast::StatusCode status = clblast::Gemm<T>(
      clblast::Layout::kRowMajor, a.transpose, b.transpose, m, n, k, T{1}, buffer(1), offset(1),
      a.ld, buffer(2), offset(2), b.ld, T{0}, buffer(0), offset(0), n, &queue, nullptr);
  if (status != clblast::StatusCode::kSuccess) {
    throw oclvm::BackendError("clblast::Gemm failed on " + call.device.str() + " with status " +
                                  std::to_string(static_cast<int>(status)),
                              static_cast<int>(status));
  }
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same_place(a, b, "multiply");
  if (a.dim() != 2 || b.dim() != 2 || a.shape()[1] != b.shape()[0]) {
    throw InvalidArgument("Expected a [m, k] and a [k, n] tensor to multiply, but got " +
                          shape_text(a.shape()) + " and " + shape_text(b.shape()));
  }
  if (a.dtype() != DType::kF32 && a.dtype() != DType::kF64) {
    throw InvalidArgument(std::string("Expected f32 or f64 tensors to multiply, but got ") +
                          oclvm::dtype_name(a.dtype()));
  }
  oclvm::Runtime& runtime = a.runtime();
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  Tensor out = Tensor::empty(runtime, {m, n}, a.dtype(), a.device());
  if (m == 0 || n == 0) return out;
  if (k == 0) return out.fill(0);
  std::optional<GemmOperand> a_layout = gemm_layout(a), b_layout = gemm_layout(b);
  const Tensor lhs = a_layout ? a : a.contiguous();
  const Tensor rhs = b_layout ? b : b.contiguous();
  if (!a_layout) a_layout = gemm_layout(lhs);
  if (!b_layout) b_layout = gemm_layout(rhs);
  const size_t um = static_cast<size_t>(m), un = static_cast<size_t>(n), uk = static_cast<size_t>(k);
  oclvm::NativeBody body;
  if (a.dtype() == DType::kF32) {
    body = [=, a = *a_layout, b = *b_layout](const oclvm::NativeCallContext& call) {
      gemm<float>(call, um, un, uk, a, b);
    };
  } else {
    body = [=, a = *a_layout, b = *b_layout](const oclvm::NativeCallContext& call) {
      gemm<double>(call, um, un, uk, a, b);
    };
  }
  oclvm::InstructionsBuilder builder = runtime.builder();
  builder.native(builder.stream(a.device()), "clblast::Gemm",
                 {native_arg(out, KernelAccess::kWrite), native_arg(lhs, KernelAccess::kRead),
                  native_arg(rhs, KernelAccess::kRead)},
                 std::move(body));
  submit(runtime, builder);
  return out;
}

void synchronize(oclvm::Runtime& runtime) {
  std::vector<oclvm::vm::Ticket> tickets;
  {
    std::lock_guard<std::mutex> lock(pending().mutex);
    auto found = pending().tickets.find(&runtime);
    if (found == pending().tickets.end()) return;
    tickets = std::move(found->second);
    pending().tickets.erase(found);
  }
  std::exception_ptr first;
  for (oclvm::vm::Ticket& ticket : tickets) {
    try {
      ticket.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace eager
