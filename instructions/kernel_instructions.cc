// instructions/kernel_instructions.cc — execute() and describe() of the instructions that run
// device code: LaunchKernel (an OpenCL C kernel of the device's kernel cache) and NativeCall (a
// caller's body handed the stream's queue and its buffers), and the LaunchArg constructors.
#include <boost/container/small_vector.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "oclvm/instructions/blob_ranges.h"
#include "oclvm/instructions/instructions.h"

namespace oclvm {
namespace {

// A scalar argument's value in OpenCL C notation.
std::string scalar_text(ScalarType type, const std::array<uint8_t, 8>& bytes) {
  auto as = [&](auto value) {
    std::memcpy(&value, bytes.data(), sizeof value);
    return value;
  };
  switch (type) {
    case ScalarType::kChar: return std::to_string(as(int8_t{}));
    case ScalarType::kUChar: return std::to_string(as(uint8_t{}));
    case ScalarType::kShort: return std::to_string(as(int16_t{}));
    case ScalarType::kUShort: return std::to_string(as(uint16_t{}));
    case ScalarType::kInt: return std::to_string(as(int32_t{}));
    case ScalarType::kUInt: return std::to_string(as(uint32_t{}));
    case ScalarType::kLong: return std::to_string(as(int64_t{}));
    case ScalarType::kULong: return std::to_string(as(uint64_t{}));
    case ScalarType::kFloat: {
      char text[32];
      std::snprintf(text, sizeof text, "%.9g", static_cast<double>(as(float{})));
      return text;
    }
    case ScalarType::kDouble: {
      char text[32];
      std::snprintf(text, sizeof text, "%.17g", as(double{}));
      return text;
    }
  }
  return "?";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// LaunchKernel

const char* kernel_access_name(KernelAccess access) {
  switch (access) {
    case KernelAccess::kRead: return "read";
    case KernelAccess::kWrite: return "write";
    case KernelAccess::kReadWrite: return "read-write";
  }
  return "?";
}

LaunchArg LaunchArg::of_blob(std::shared_ptr<BlobObject> blob, size_t offset, KernelAccess access) {
  LaunchArg arg;
  arg.kind = Kind::kBlob;
  arg.blob = std::move(blob);
  arg.offset = offset;
  arg.access = access;
  return arg;
}

LaunchArg LaunchArg::of_scalar(ScalarType type, const void* bytes) {
  LaunchArg arg;
  arg.kind = Kind::kScalar;
  arg.scalar = type;
  std::memcpy(arg.bytes.data(), bytes, scalar_type_size(type));
  return arg;
}

LaunchArg LaunchArg::local(size_t bytes) {
  LaunchArg arg;
  arg.kind = Kind::kLocal;
  arg.local_bytes = bytes;
  return arg;
}

LaunchKernel::LaunchKernel(vm::Stream& stream, std::shared_ptr<const Kernel> kernel,
                           const LaunchRange& range, const LaunchArg* args, size_t count)
    : vm::Instruction(stream), kernel_(std::move(kernel)), range_(range) {
  slots_.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const LaunchArg& arg = args[i];
    // Filled in place: a Slot assembled on the stack and copied in stalls on its partial stores.
    Slot& slot = slots_.emplace_back();
    slot.kind = arg.kind;
    switch (arg.kind) {
      case LaunchArg::Kind::kBlob:
        slot.access = arg.access;
        slot.operand = static_cast<uint8_t>(operand_for(arg.blob, vm_access(arg.access)));
        slot.value = arg.offset;
        break;
      case LaunchArg::Kind::kScalar:
        slot.scalar = arg.scalar;
        slot.bytes = arg.bytes;
        break;
      case LaunchArg::Kind::kLocal: slot.value = arg.local_bytes; break;
    }
  }
}

void LaunchKernel::execute(vm::ExecutionContext& context) {
  boost::container::small_vector<KernelArg, 8> resolved(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    KernelArg& out = resolved[i];
    switch (slot.kind) {
      case LaunchArg::Kind::kBlob: {
        const DeviceRange start = resolve_start(*operands()[slot.operand].blob, slot.value);
        out.kind = KernelArg::Kind::kBuffer;
        out.native = start.segment != nullptr ? start.segment->native : nullptr;
        out.offset = start.offset;
        break;
      }
      case LaunchArg::Kind::kScalar:
        out.kind = KernelArg::Kind::kScalar;
        out.bytes = slot.bytes;
        out.size = scalar_type_size(slot.scalar);
        break;
      case LaunchArg::Kind::kLocal:
        out.kind = KernelArg::Kind::kLocal;
        out.size = slot.value;
        break;
    }
  }
  context.stream.queue().enqueue_kernel(*kernel_, resolved.data(), resolved.size(),
                                        range_.global.data(), range_.local.data(), range_.dims);
}

std::string LaunchKernel::describe() const {
  std::string text = "'" + kernel_->source().name + "' global [";
  for (uint32_t d = 0; d < range_.dims; ++d) {
    text += (d == 0 ? "" : ", ") + std::to_string(range_.global[d]);
  }
  text += "] local [";
  bool driver_chooses = true;
  for (uint32_t d = 0; d < range_.dims; ++d) driver_chooses = driver_chooses && range_.local[d] == 0;
  for (uint32_t d = 0; d < range_.dims && !driver_chooses; ++d) {
    text += (d == 0 ? "" : ", ") + std::to_string(range_.local[d]);
  }
  text += driver_chooses ? "driver's]" : "]";
  for (const Slot& slot : slots_) {
    text += ", ";
    switch (slot.kind) {
      case LaunchArg::Kind::kBlob:
        text += blob_text(*operands()[slot.operand].blob) + " +" + std::to_string(slot.value) +
                " " + kernel_access_name(slot.access);
        break;
      case LaunchArg::Kind::kScalar:
        text += std::string(scalar_type_name(slot.scalar)) + " " + scalar_text(slot.scalar, slot.bytes);
        break;
      case LaunchArg::Kind::kLocal:
        text += "local " + std::to_string(slot.value) + " B";
        break;
    }
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// NativeCall

NativeCall::NativeCall(vm::Stream& stream, std::string label, const std::vector<NativeArg>& args,
                       NativeBody body)
    : vm::Instruction(stream), label_(std::move(label)), body_(std::move(body)) {
  slots_.reserve(args.size());
  for (const NativeArg& arg : args) {
    const size_t operand = operand_for(arg.blob, vm_access(arg.access));
    slots_.push_back(Slot{static_cast<uint8_t>(operand), arg.access, arg.offset, arg.bytes});
  }
}

void NativeCall::execute(vm::ExecutionContext& context) {
  const MemoryBackend& backend = context.allocator.backend();
  boost::container::small_vector<NativeBuffer, 4> buffers(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    const BlobObject& blob = *operands()[slot.operand].blob;
    const DeviceRange start = resolve_range(blob, slot.offset, slot.bytes, "native call argument");
    buffers[i] = NativeBuffer{start.segment != nullptr ? backend.native_memory(*start.segment)
                                                       : nullptr,
                              start.offset, slot.bytes};
  }
  const Device device = context.stream.device();
  context.stream.queue().enqueue_native([&](void* queue) {
    body_(NativeCallContext{queue, std::span<const NativeBuffer>(buffers.data(), buffers.size()),
                            device});
  });
}

std::string NativeCall::describe() const {
  std::string text = "'" + label_ + "'";
  for (const Slot& slot : slots_) {
    text += ", " + blob_text(*operands()[slot.operand].blob) + " +" + std::to_string(slot.offset) +
            " " + std::to_string(slot.bytes) + " B " + kernel_access_name(slot.access);
  }
  return text;
}

}  // namespace oclvm
