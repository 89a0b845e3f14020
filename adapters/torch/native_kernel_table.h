// adapters/torch/native_kernel_table.h — what the native path's generated kernels share
// (native_kernels.cc, native_elementwise_source.cc, native_composite.cc, native_index.cc,
// native_scatter.cc, native_loss.cc, native_reduce.cc, native_statistics.cc, native_norm.cc,
// native_conv.cc, native_channel_norm.cc, native_random.cc, native_pool.cc): the OpenCL C type of
// a dtype, the rank limit of an iteration space, the table of compiled kernels, the copy and
// overlap checks operators share, and the key and source of an elementwise kernel. The table, the
// launch and the overlap checks are defined in native_kernel_table.cc, the copy in
// native_kernels.cc.
//
// Thread-safety: any thread; the table is under a mutex.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "adapters/torch/native_kernels.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/storage/kernel.h"

namespace oclvm::torch_adapter {

// The most dimensions a generated kernel walks (after merging).
constexpr size_t kMaxRank = 6;

// The OpenCL C type holding a dtype's elements ("float", "uchar" for bool); nullptr for a dtype
// the kernels do not read.
const char* cl_type(at::ScalarType type);

// The OpenCL C unsigned integer type of `bytes` bytes ("uchar", "ushort", "uint", "ulong"), as
// which kernels that only move elements read and write them; nullptr for other sizes (16).
const char* cl_bits_type(size_t bytes);

// Whether `type` is stored in 16 bits and computed in float, as the CPU's kernels compute it
// (float16, bfloat16). Kernels hold such elements as ushort bits: float16 read with vload_half and
// written with vstore_half_rte (core OpenCL C, no cl_khr_fp16), bfloat16 with kBFloat16Source.
inline bool reduced_float(at::ScalarType type) {
  return type == at::kHalf || type == at::kBFloat16;
}

// The dtype a kernel computes `type` in: float for reduced_float types, else `type` itself.
inline at::ScalarType opmath_type(at::ScalarType type) {
  return reduced_float(type) ? at::kFloat : type;
}

// OpenCL C functions for bfloat16 bits: float oclvm_from_bf16(ushort), exact, and
// ushort oclvm_to_bf16(float), rounded to nearest even with every NaN as 0x7FC0 (c10::BFloat16's
// conversion).
extern const char* const kBFloat16Source;

// The OpenCL C type of a kernel parameter holding elements of `type`: cl_type, or "ushort" for
// the bits of a reduced_float type; nullptr for a dtype the kernels do not read.
const char* storage_type(at::ScalarType type);

// A dtype in kernel names: its OpenCL C type, or "half" and "bf16".
const char* kernel_type_name(at::ScalarType type);

// An OpenCL C expression reading element `index` of the blob parameter `blob` of dtype `type`:
// a value of opmath_type(type) (a bool as uchar 0 or 1).
std::string load_element(at::ScalarType type, const std::string& blob, const std::string& index);

// An OpenCL C statement storing `value`, of dtype `from`, as element `index` of the blob
// parameter `blob` of dtype `type`, converted as the CPU converts: to float16 and bfloat16
// through float, rounded to nearest even; to bool as value != 0; a floating value to uint8
// through int64 and to int8 and int16 through int32 (c10's conversions on x86).
std::string store_element(at::ScalarType type, const std::string& blob, const std::string& index,
                          const std::string& value, at::ScalarType from);

inline bool is_device(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

// Which generator a kernel comes from: its ids are its own.
enum class NativeKernelFamily : uint8_t { kElementwise, kReduction, kTriangle, kRange, kIndex,
                                          kLoss, kScatter, kConvolution,
                                          kChannelNorm, kRandom, kPool };

// The compiled kernel `id` (below 2^48) of `family` on `device`: built from `source()` on the
// first call and kept until exit; nullptr, warned of once, when the device cannot build it
// (float64 without cl_khr_fp64, a build option the driver refuses), and then its calls take the
// host kernel. A call that finds its kernel builds no source.
std::shared_ptr<const Kernel> native_kernel(c10::DeviceIndex device, NativeKernelFamily family,
                                            uint64_t id,
                                            const std::function<KernelSource()>& source);

// Counts one launch of a native operator (native_kernel_calls in native_kernels.h).
void count_native_launch();

// `value` as a kernel's int argument (the caller keeps it within int).
inline LaunchArg int_arg(int64_t value) { return LaunchArg::of(static_cast<int32_t>(value)); }

// A launch over x (by y, by z) work-items: one, two or three dimensions.
LaunchRange launch_range(int64_t x, int64_t y = 1, int64_t z = 1);

// run_native_kernel, its launch counted as one of an operator's (count_native_launch).
void launch_counted(const std::shared_ptr<const Kernel>& kernel, const at::Tensor& out,
                    const std::vector<LaunchArg>& args, const LaunchRange& range);

// Element 0 of the device tensor `t` as a kernel's blob argument.
LaunchArg blob_arg(const at::Tensor& t, KernelAccess access);

// Whether no two elements of `t` share memory. A sufficient test that any strided view without
// overlap passes (at::has_internal_overlap gives up on non-dense ones).
bool elements_are_distinct(const at::Tensor& t);

// The dimensions [begin, end) of `t` as one (size, stride), size-1 dimensions skipped; nullopt
// when they do not step as one; (1, 0) when there are none.
std::optional<std::pair<int64_t, int64_t>> dimensions_as_one(const at::Tensor& t, int64_t begin,
                                                             int64_t end);

// dst := src as native_copy does, its launch counted as one of an operator's
// (count_native_launch) rather than as a copy; false, having done nothing, where native_copy is.
bool copy_for_operator(const at::Tensor& src, const at::Tensor& dst);

// Enqueues `kernel` with `args` over `work_items` work-items on the current stream of `out`'s
// device, without waiting for it (submit_native); oclvm's errors become the matching c10
// errors. Counts nothing.
void run_native_kernel(const std::shared_ptr<const Kernel>& kernel, const at::Tensor& out,
                       const std::vector<LaunchArg>& args, size_t work_items);
// The same over `range` (two or three dimensions).
void run_native_kernel(const std::shared_ptr<const Kernel>& kernel, const at::Tensor& out,
                       const std::vector<LaunchArg>& args, const LaunchRange& range);

// What a generated elementwise kernel is made for (Note [Native elementwise kernels] in
// native_kernels.cc): the operator, the dtypes of the result, of each operand and of the
// computation, whether `other` is a scalar argument, and the rank of the iteration space.
struct BinaryKernelKey {
  BinaryOp op;
  at::ScalarType out, self, other, compute;
  bool other_is_scalar;
  size_t rank;
};

// Whether `op` reads a third input (a bool condition, for the two forms of where; the divisor or
// second factor of addcdiv and addcmul, of the computation's type).
bool third_input(BinaryOp op);

// The operator's name in kernel names and messages ("add", "gelu_tanh_backward").
const char* op_name(BinaryOp op);

// The OpenCL C of the kernel for `key` (native_elementwise_source.cc).
KernelSource binary_source(const BinaryKernelKey& key);

}  // namespace oclvm::torch_adapter
