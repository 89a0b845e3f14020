// adapters/torch/native_kernel_table.cc — the native path's shared parts (native_kernel_table.h):
// the OpenCL C type of a dtype and its reads and writes, the table of compiled kernels, a
// kernel's launch on the operands' stream, and the layout checks operators share.
//
// Thread-safety: any thread; the table is under a mutex.

#include "adapters/torch/native_kernel_table.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "adapters/torch/allocator.h"
#include "adapters/torch/device.h"
#include "adapters/torch/host_view.h"
#include "adapters/torch/native_launches.h"
#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"

namespace oclvm::torch_adapter {

namespace {

// The compiled kernels of every family (native_kernel_table.h), by (family, device, id).
class KernelTable {
 public:
  std::shared_ptr<const Kernel> get(c10::DeviceIndex device, NativeKernelFamily family,
                                    uint64_t id, const std::function<KernelSource()>& make) {
    const uint64_t key = (static_cast<uint64_t>(family) << 56) |
                         (static_cast<uint64_t>(static_cast<uint8_t>(device)) << 48) |
                         (id & ((uint64_t{1} << 48) - 1));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = kernels_.find(key);
      if (it != kernels_.end()) return it->second;
    }
    const KernelSource source = make();
    std::shared_ptr<const Kernel> kernel;
    try {
      kernel = translate_errors(
          [&] { return runtime().builder().kernel(to_oclvm(device), source); });
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      TORCH_WARN("oclvm: opencl:", static_cast<int>(device), " could not build the native kernel ",
                 source.name, "; its calls run a CPU kernel: ", what.substr(0, what.find('\n')));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    return kernels_.emplace(key, std::move(kernel)).first->second;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<uint64_t, std::shared_ptr<const Kernel>> kernels_;  // guarded by mutex_
};

}  // namespace

const char* cl_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float";
    case at::kDouble: return "double";
    case at::kLong: return "long";
    case at::kInt: return "int";
    case at::kShort: return "short";
    case at::kChar: return "char";
    case at::kByte: return "uchar";
    case at::kBool: return "uchar";  // one byte, 0 or 1
    default: return nullptr;
  }
}

const char* const kBFloat16Source = R"(
float oclvm_from_bf16(ushort bits) { return as_float((uint)bits << 16); }
ushort oclvm_to_bf16(float f) {
  uint u = as_uint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (ushort)0x7FC0;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}
)";

const char* storage_type(at::ScalarType type) {
  return reduced_float(type) ? "ushort" : cl_type(type);
}

const char* kernel_type_name(at::ScalarType type) {
  return type == at::kHalf ? "half" : type == at::kBFloat16 ? "bf16" : cl_type(type);
}

std::string load_element(at::ScalarType type, const std::string& blob, const std::string& index) {
  switch (type) {
    case at::kHalf: return "vload_half(" + index + ", OCLVM_PTR(half, " + blob + "))";
    case at::kBFloat16: return "oclvm_from_bf16(OCLVM_PTR(ushort, " + blob + ")[" + index + "])";
    default: return std::string("OCLVM_PTR(") + cl_type(type) + ", " + blob + ")[" + index + "]";
  }
}

std::string store_element(at::ScalarType type, const std::string& blob, const std::string& index,
                          const std::string& value, at::ScalarType from) {
  const bool floating = at::isFloatingType(from);
  std::string converted;
  switch (type) {
    case at::kHalf:
      return "vstore_half_rte((float)(" + value + "), " + index + ", OCLVM_PTR(half, " + blob +
             "));";
    case at::kBFloat16:
      return "OCLVM_PTR(ushort, " + blob + ")[" + index + "] = oclvm_to_bf16((float)(" + value +
             "));";
    case at::kBool:
      converted = from == at::kBool ? value : "(" + value + ") != 0";
      break;
    case at::kByte:
      converted = floating ? "(long)(" + value + ")" : value;
      break;
    case at::kChar:
    case at::kShort:
      converted = floating ? "(int)(" + value + ")" : value;
      break;
    default:
      converted = value;
  }
  const std::string t = cl_type(type);
  return "OCLVM_PTR(" + t + ", " + blob + ")[" + index + "] = (" + t + ")(" + converted + ");";
}

const char* cl_bits_type(size_t bytes) {
  switch (bytes) {
    case 1: return "uchar";
    case 2: return "ushort";
    case 4: return "uint";
    case 8: return "ulong";
    default: return nullptr;
  }
}

std::shared_ptr<const Kernel> native_kernel(c10::DeviceIndex device, NativeKernelFamily family,
                                            uint64_t id,
                                            const std::function<KernelSource()>& source) {
  static KernelTable* const table = new KernelTable();  // never destroyed: used until exit
  return table->get(device, family, id, source);
}

LaunchArg blob_arg(const at::Tensor& t, KernelAccess access) {
  const BlobRef ref = element0(t);
  return LaunchArg::of_blob(ref.blob, ref.offset, access);
}

void run_native_kernel(const std::shared_ptr<const Kernel>& kernel, const at::Tensor& out,
                       const std::vector<LaunchArg>& args, size_t work_items) {
  LaunchRange range;
  range.global[0] = work_items;
  run_native_kernel(kernel, out, args, range);
}

void run_native_kernel(const std::shared_ptr<const Kernel>& kernel, const at::Tensor& out,
                       const std::vector<LaunchArg>& args, const LaunchRange& range) {
  InstructionsBuilder builder = runtime().builder();
  translate_errors([&] { builder.launch(stream_of(out), kernel, range, args); });
  submit_native(out.device().index(), builder.take());
}

LaunchRange launch_range(int64_t x, int64_t y, int64_t z) {
  LaunchRange range;
  range.dims = z > 1 ? 3 : y > 1 ? 2 : 1;
  range.global = {static_cast<size_t>(x), static_cast<size_t>(y), static_cast<size_t>(z)};
  return range;
}

void launch_counted(const std::shared_ptr<const Kernel>& kernel, const at::Tensor& out,
                    const std::vector<LaunchArg>& args, const LaunchRange& range) {
  run_native_kernel(kernel, out, args, range);
  count_native_launch();
}

std::optional<std::pair<int64_t, int64_t>> dimensions_as_one(const at::Tensor& t, int64_t begin,
                                                             int64_t end) {
  int64_t size = 1, stride = 0;
  for (int64_t d = end; d-- > begin;) {  // innermost first
    if (t.size(d) == 1) continue;
    if (size == 1) {
      size = t.size(d);
      stride = t.stride(d);
    } else if (t.stride(d) == stride * size) {
      size *= t.size(d);
    } else {
      return std::nullopt;
    }
  }
  return std::make_pair(size, stride);
}

// Its dimensions of more than one element, in increasing stride, each step past every offset
// the smaller ones reach.
bool elements_are_distinct(const at::Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // the farthest offset the dimensions so far reach
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return false;
    reach += stride * (size - 1);
  }
  return true;
}

}  // namespace oclvm::torch_adapter
