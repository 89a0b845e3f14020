// storage/kernel.h — device kernels without a driver type: sources, parameters, arguments and the
// per-device kernel cache's interface.
//
//   KernelSource   an OpenCL C program, the kernel's name in it and the build options.
//   KernelParam    what the compiler says of one parameter: its address space and type name.
//   Kernel         one kernel compiled for one device (MemoryBackend::kernel makes and caches it).
//   KernelArg      one resolved argument, as the queue sets it (DeviceQueue::enqueue_kernel).
//   KernelCacheStats  what a device's kernel cache has done (tests and benchmarks read it).
//
// Note [Blob arguments]
// ~~~~~~~~~~~~~~~~~~~~~
// A blob reaches a kernel as two consecutive parameters: a `__global` (or `__constant`) pointer to
// the segment that holds it, and a `ulong` byte offset from that pointer to the argument's first
// byte. The offset cannot be folded into the pointer: a blob is a block at some offset of a
// driver allocation (allocators carve segments), and OpenCL only moves a buffer's start by a
// sub-buffer, whose origin must be aligned to CL_DEVICE_MEM_BASE_ADDR_ALIGN, which tensor views
// are not. CLBlast and pytorch_dlprim's kernels take (buffer, offset) pairs for the same reason.
// Every kernel source gets two macros for it (kKernelPrelude):
//
//   __kernel void scale(OCLVM_BLOB(float, x), float factor) {
//     __global float* p = OCLVM_PTR(float, x);
//     p[get_global_id(0)] *= factor;
//   }
//
// Thread-safety: KernelSource, KernelParam and KernelArg are values. A Kernel's description
// (source(), device(), params()) may be read from any thread; launching it — setting arguments on
// its native object — is confined to its device's execution right, like every queue call
// (storage/queue.h), so two threads never set one kernel's arguments at once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "oclvm/storage/device.h"
#include "oclvm/storage/errors.h"

namespace oclvm {

// Put before every kernel source (Note [Blob arguments]).
inline constexpr std::string_view kKernelPrelude =
    "#define OCLVM_BLOB(T, name) __global T* name##_base, ulong name##_offset\n"
    "#define OCLVM_PTR(T, name) ((__global T*)((__global char*)name##_base + name##_offset))\n"
    "#line 1\n";

struct KernelSource {
  std::string source;   // OpenCL C; kKernelPrelude is put before it
  std::string name;     // the __kernel function to launch
  std::string options;  // build options ("-cl-fast-relaxed-math"); oclvm adds -cl-kernel-arg-info
};

// The OpenCL C scalar types a kernel parameter may have.
enum class ScalarType : uint8_t {
  kChar, kUChar, kShort, kUShort, kInt, kUInt, kLong, kULong, kFloat, kDouble
};
// "char", "uchar", ..., "double": the OpenCL C spelling.
const char* scalar_type_name(ScalarType type);
size_t scalar_type_size(ScalarType type);
// The type an OpenCL C name spells ("uint", "unsigned int", ...). False for anything else, size_t
// too: its width is the device's.
bool scalar_type_from_name(std::string_view name, ScalarType* type);

struct KernelParam {
  enum class Space : uint8_t { kGlobal, kConstant, kLocal, kPrivate };
  Space space = Space::kPrivate;
  std::string type_name;  // as the compiler reports it: "float*", "int", "ulong"
  std::string name;       // the parameter's name, "" when the driver does not say
  // Set by Kernel from the two above: whether the parameter is a private scalar of an OpenCL C
  // type, and which (launch checks compare these, not the names).
  bool is_scalar = false;
  ScalarType scalar = ScalarType::kInt;
};

// One argument as the queue sets it. kBuffer fills two parameters (Note [Blob arguments]).
struct KernelArg {
  enum class Kind : uint8_t { kBuffer, kScalar, kLocal };
  Kind kind = Kind::kScalar;
  const void* native = nullptr;  // kBuffer: the segment's backend record (Segment::native)
  uint64_t offset = 0;           // kBuffer: byte offset in the segment
  std::array<uint8_t, 8> bytes{};  // kScalar: the value, in the device's (little-endian) layout
  size_t size = 0;                 // kScalar: bytes used; kLocal: bytes of local memory
};

class Kernel {
 public:
  Kernel(KernelSource source, Device device, std::vector<KernelParam> params, bool params_known)
      : source_(std::move(source)),
        device_(device),
        params_(with_scalars(std::move(params))),
        params_known_(params_known) {}
  virtual ~Kernel() = default;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  const KernelSource& source() const { return source_; }
  Device device() const { return device_; }
  // One entry per parameter. When the driver keeps no argument information (params_known()
  // false), only the count is known: every entry is kPrivate with an empty type name.
  const std::vector<KernelParam>& params() const { return params_; }
  bool params_known() const { return params_known_; }

 private:
  static std::vector<KernelParam> with_scalars(std::vector<KernelParam> params) {
    for (KernelParam& param : params) {
      param.is_scalar = param.space == KernelParam::Space::kPrivate &&
                        scalar_type_from_name(param.type_name, &param.scalar);
    }
    return params;
  }

  const KernelSource source_;
  const Device device_;
  const std::vector<KernelParam> params_;
  const bool params_known_;
};

// A program failed to compile. what() names the kernel and the device and ends with the
// compiler's log; log() is the log alone.
class KernelBuildError : public Error {
 public:
  KernelBuildError(const std::string& message, std::string log)
      : Error(message), log_(std::move(log)) {}
  const std::string& log() const noexcept { return log_; }

 private:
  std::string log_;
};

struct KernelCacheStats {
  uint64_t compiled = 0;         // programs built from source
  uint64_t loaded = 0;           // programs built from a binary kept on disk
  uint64_t stored = 0;           // binaries written to disk
  uint64_t hits = 0;             // kernel requests answered from memory
  uint64_t disk_errors = 0;      // cache files that could not be read or written (then compiled)
};

}  // namespace oclvm
