// adapters/torch/native_random.cc — random fills and dropout on the native path: each element
// computed on the device by a Philox kernel from the generator's seed and offset
// (native_kernels.h, generator.h).

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/generator.h"
#include "adapters/torch/native_kernel_table.h"
#include "adapters/torch/native_kernels.h"

namespace oclvm::torch_adapter {

// Note [Native random numbers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On the native path a random operator draws no numbers on the host: it takes its generator's
// seed and next offset (DeviceGenerator::philox_draw, which advances the offset by one) and
// launches one kernel in which element i, in the result's contiguous order, is a function of
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) of the
// 128-bit counter (i, offset) under the 64-bit key seed. No two elements of one call and no two
// calls share a counter, so the elements are independent; the same seed and offset give the same
// numbers on any device, and torch.opencl.get_rng_state / set_rng_state (which carry the offset)
// replay them: a checkpointed segment's recomputation sees its forward's dropout mask. The
// numbers are not the CPU's (its Mersenne Twister is sequential), as CUDA's are not; the host
// path keeps the CPU's stream.
//
// From the counter's four 32-bit words r0..r3:
//   - uniform_(from, to): u = (r0 >> 8) / 2^24 for float32, the top 53 bits of r0:r1 / 2^53 for
//     float64, in [0, 1); from + u * (to - from), and `from` where rounding reached `to`;
//   - normal_(mean, std): Box-Muller, mean + std * sqrt(-2 log u1) * cos(2 pi u2), u1 in (0, 1]
//     and u2 in [0, 1) from r0 and r1 (float32) or r0:r1 and r2:r3 (float64);
//   - bernoulli_(p): r0 < floor(p * 2^32), so p is honoured to 2^-32;
//   - random_: from + r % range, r0 for a range up to 2^32, r0:r1 beyond, range and from as
//     torch's random_, random_(to) and random_(from, to) give them for the dtype;
//   - native_dropout(p): keep = r0 < floor((1 - p) * 2^32), output x * (keep ? s : 0) and the
//     mask, s = 1 / (1 - p) rounded to the input's dtype (0 for p = 1), as the CPU's kernel
//     multiplies; float16 and bfloat16 multiply in float32 and round once, which is the CPU's
//     rounding of their product.
// A result that is not contiguous gets its numbers in a contiguous temporary, copied in by the
// native copy kernel.
//
// Taken: a device tensor of a native-path device, float32, float64 (where the device builds it),
// float16 and bfloat16 for uniform_, normal_ and bernoulli_(p), which takes every integer dtype
// and bool too; float32, float64, the integer dtypes and bool for random_; a contiguous input of
// the four floating dtypes for native_dropout in training. float16 and bfloat16 compute in
// float32 and are stored rounded to nearest even (a uniform_ value that rounds to `to` becomes
// `from`). Not taken (the host path answers, with the CPU generator behind the device's): other
// dtypes, a generator of another device type, arguments the CPU refuses (its errors), random_
// bounds torch would move to fit the dtype, empty tensors.

namespace {

enum class RandomKernel : uint8_t { kUniform, kNormal, kBernoulli, kRandom, kDropout };

// Philox4x32-10: the counter (index, offset) under the key seed.
constexpr const char* kPhiloxSource = R"(
uint4 oclvm_philox(ulong index, ulong offset, ulong seed) {
  uint4 c = (uint4)((uint)index, (uint)(index >> 32), (uint)offset, (uint)(offset >> 32));
  uint2 k = (uint2)((uint)seed, (uint)(seed >> 32));
  for (int round = 0; round < 10; ++round) {
    if (round > 0) { k.x += 0x9E3779B9u; k.y += 0xBB67AE85u; }
    const uint lo0 = 0xD2511F53u * c.x, hi0 = mul_hi(0xD2511F53u, c.x);
    const uint lo1 = 0xCD9E8D57u * c.z, hi1 = mul_hi(0xCD9E8D57u, c.z);
    c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}
)";

// How a kernel stores element i of `out` of `type` computed as `value`, of the type it computes in.
std::string store(at::ScalarType type, const std::string& value) {
  return store_element(type, "out", "i", value, opmath_type(type));
}

KernelSource random_source(RandomKernel kind, at::ScalarType type) {
  const bool as_bits = reduced_float(type);
  const std::string t = cl_type(opmath_type(type));  // the type computed in
  const bool wide = type == at::kDouble;
  const std::string name = "oclvm_random_" + std::to_string(static_cast<int>(kind)) + "_" +
                           c10::toString(type);
  std::string s;
  if (wide) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  s += kPhiloxSource;
  if (type == at::kBFloat16) s += kBFloat16Source;
  const std::string stored_type = storage_type(type);
  s += "__kernel void " + name + "(OCLVM_BLOB(" + stored_type + ", out), ";
  if (kind == RandomKernel::kDropout) {
    s += "OCLVM_BLOB(uchar, mask), OCLVM_BLOB(" + stored_type + ", x), ";
  }
  s += "long n, ulong seed, ulong offset";
  switch (kind) {
    case RandomKernel::kUniform: s += ", " + t + " from, " + t + " to"; break;
    case RandomKernel::kNormal: s += ", " + t + " mean, " + t + " stdev"; break;
    case RandomKernel::kBernoulli: s += ", ulong threshold"; break;
    case RandomKernel::kRandom: s += ", long from, ulong range"; break;
    case RandomKernel::kDropout: s += ", ulong threshold, " + t + " scale"; break;
  }
  s += ") {\n  const ulong i = get_global_id(0);\n  if (i >= (ulong)n) return;\n";
  s += "  const uint4 r = oclvm_philox(i, offset, seed);\n";
  // u (in [0, 1)) and, for normal_, v (in (0, 1]).
  const std::string unit_float = "(" + t + ")(r.x >> 8) * 0x1p-24f";
  const std::string unit_double = "(double)((((ulong)r.x << 32) | r.y) >> 11) * 0x1p-53";
  switch (kind) {
    case RandomKernel::kUniform:
      s += "  const " + t + " u = " + (wide ? unit_double : unit_float) + ";\n";
      s += "  const " + t + " value = u * (to - from) + from;\n";
      s += "  " + store(type, "value >= to ? from : value") + "\n";
      // A float16 or bfloat16 value is compared again as rounded: rounding may reach `to`.
      if (as_bits) {
        s += "  if (" + load_element(type, "out", "i") + " >= to) " + store(type, "from") + "\n";
      }
      break;
    case RandomKernel::kNormal:
      if (wide) {
        s += "  const double v = (double)(((((ulong)r.x << 32) | r.y) >> 11) + 1) * 0x1p-53;\n";
        s += "  const double u = (double)((((ulong)r.z << 32) | r.w) >> 11) * 0x1p-53;\n";
      } else {
        s += "  const float v = (float)((r.x >> 8) + 1) * 0x1p-24f;\n";
        s += "  const float u = (float)(r.y >> 8) * 0x1p-24f;\n";
      }
      s += "  const " + t + " z = sqrt(-2 * log(v)) * cospi(2 * u);\n";
      s += "  " + store(type, "z * stdev + mean") + "\n";
      break;
    case RandomKernel::kBernoulli: {
      const std::string one = type == at::kHalf       ? "(ushort)0x3C00"
                              : type == at::kBFloat16 ? "(ushort)0x3F80"
                                                      : "1";
      s += "  OCLVM_PTR(" + stored_type + ", out)[i] = (ulong)r.x < threshold ? " + one +
           " : 0;\n";
      break;
    }
    case RandomKernel::kRandom:
      s += "  const ulong bits = range > 0x100000000ul ? (((ulong)r.x << 32) | r.y) : r.x;\n";
      s += "  const long value = (long)((ulong)from + bits % range);\n";
      s += "  " + store(type, "value") + "\n";
      break;
    case RandomKernel::kDropout: {
      const std::string x = load_element(type, "x", "i");
      s += "  const int keep = (ulong)r.x < threshold;\n";
      s += "  OCLVM_PTR(uchar, mask)[i] = keep;\n";
      s += "  " + store(type, x + " * (keep ? scale : 0)") + "\n";
      break;
    }
  }
  s += "}\n";
  // Correctly rounded sqrt, as everywhere on the native path; no contraction of u * range + from.
  return KernelSource{"#pragma OPENCL FP_CONTRACT OFF\n" + s, name,
                      wide ? "" : "-cl-fp32-correctly-rounded-divide-sqrt"};
}

// A float64 computation on a device without it: not taken.
bool computable(c10::DeviceIndex device, at::ScalarType type) {
  return type != at::kDouble || native_float64(device);
}

// The generator and the device a call runs on, or nullopt when the native path does not take it:
// `self` a non-empty strided device tensor of a native-path device, without the conjugate or
// negative bit, no two elements sharing memory, and an opencl generator (or none).
std::optional<DeviceGenerator*> random_target(const at::Tensor& self,
                                              const std::optional<at::Generator>& generator) {
  if (!self.defined() || !is_device(self) || self.layout() != at::kStrided || self.is_conj() ||
      self.is_neg() || self.numel() == 0 || !native_kernels(self.device().index()) ||
      at::has_internal_overlap(self) == at::MemOverlap::Yes) {  // the CPU's error, nothing drawn
    return std::nullopt;
  }
  DeviceGenerator* chosen = device_generator(generator, self.device().index());
  if (chosen == nullptr) return std::nullopt;
  return chosen;
}

// floor(p * 2^32) for p in [0, 1]: the threshold below which r0 is a hit.
uint64_t threshold_of(double p) {
  return static_cast<uint64_t>(std::ldexp(p, 32));
}

// Launches `kind` for `type` writing `out` (contiguous, of the call's device), with the
// distribution's arguments after the common ones; false when the device cannot build it.
bool launch_random(RandomKernel kind, at::ScalarType type, const at::Tensor& out,
                   DeviceGenerator* generator, std::vector<LaunchArg> distribution,
                   std::vector<LaunchArg> leading = {}) {
  const c10::DeviceIndex device = out.device().index();
  if (!computable(device, type)) return false;
  const uint64_t id = (static_cast<uint64_t>(kind) << 8) | static_cast<uint64_t>(type);
  const std::shared_ptr<const Kernel> kernel =
      native_kernel(device, NativeKernelFamily::kRandom, id,
                    [&] { return random_source(kind, type); });
  if (kernel == nullptr) return false;
  const DeviceGenerator::PhiloxDraw draw = generator->philox_draw();
  std::vector<LaunchArg> args{blob_arg(out, KernelAccess::kWrite)};
  for (LaunchArg& arg : leading) args.push_back(std::move(arg));
  args.push_back(LaunchArg::of(static_cast<int64_t>(out.numel())));
  args.push_back(LaunchArg::of(draw.seed));
  args.push_back(LaunchArg::of(draw.offset));
  for (LaunchArg& arg : distribution) args.push_back(std::move(arg));
  launch_counted(kernel, out, args, launch_range(out.numel()));
  return true;
}

// Fills `self` as `kind` with `distribution`'s arguments: directly when it is contiguous, else
// through a contiguous temporary and the native copy.
bool fill(RandomKernel kind, const at::Tensor& self, DeviceGenerator* generator,
          std::vector<LaunchArg> distribution) {
  const at::ScalarType type = self.scalar_type();
  if (self.is_contiguous()) {
    return launch_random(kind, type, self, generator, std::move(distribution));
  }
  if (!computable(self.device().index(), type)) return false;
  const at::Tensor numbers = at::empty(self.sizes(), self.options());
  if (!launch_random(kind, type, numbers, generator, std::move(distribution))) return false;
  if (!copy_for_operator(numbers, self)) self.copy_(numbers);
  return true;
}

// A value of the computation's type for `type` (float for float16 and bfloat16).
LaunchArg real_arg(at::ScalarType type, double value) {
  if (type == at::kDouble) return LaunchArg::of(value);
  return LaunchArg::of(static_cast<float>(value));
}

bool floating(at::ScalarType type) { return type == at::kFloat || type == at::kDouble; }


// The largest finite value of a floating dtype the kernels store.
double largest(at::ScalarType type) {
  switch (type) {
    case at::kDouble: return std::numeric_limits<double>::max();
    case at::kHalf: return static_cast<double>(std::numeric_limits<c10::Half>::max());
    case at::kBFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::max());
    default: return static_cast<double>(std::numeric_limits<float>::max());
  }
}

// The largest integer every value up to which the floating dtype holds exactly (2^digits).
int64_t exact_integers(at::ScalarType type) {
  return type == at::kDouble ? int64_t{1} << std::numeric_limits<double>::digits
                             : int64_t{1} << std::numeric_limits<float>::digits;
}

// The inclusive bounds of an integer dtype the kernels store, or of bool.
std::optional<std::pair<int64_t, int64_t>> integer_bounds(at::ScalarType type) {
  switch (type) {
    case at::kLong: return std::make_pair(std::numeric_limits<int64_t>::min(),
                                          std::numeric_limits<int64_t>::max());
    case at::kInt: return std::make_pair<int64_t, int64_t>(std::numeric_limits<int32_t>::min(),
                                                           std::numeric_limits<int32_t>::max());
    case at::kShort: return std::make_pair<int64_t, int64_t>(std::numeric_limits<int16_t>::min(),
                                                             std::numeric_limits<int16_t>::max());
    case at::kChar: return std::make_pair<int64_t, int64_t>(-128, 127);
    case at::kByte: return std::make_pair<int64_t, int64_t>(0, 255);
    case at::kBool: return std::make_pair<int64_t, int64_t>(0, 1);
    default: return std::nullopt;
  }
}

}  // namespace

bool native_uniform_(const at::Tensor& self, double from, double to,
                     const std::optional<at::Generator>& generator) {
  const std::optional<DeviceGenerator*> chosen = random_target(self, generator);
  const at::ScalarType type = self.scalar_type();
  if (!chosen || !(floating(type) || reduced_float(type))) return false;
  // The CPU's checks refuse the rest: both bounds within the dtype's, from <= to, and a range
  // the dtype holds; and the range must stay finite in the type the kernel computes in.
  const double most = largest(type);
  const double range = type == at::kDouble ? to - from
                                            : static_cast<double>(static_cast<float>(to) -
                                                                  static_cast<float>(from));
  if (!(from >= -most && from <= most && to >= -most && to <= most && from <= to &&
        to - from <= most) ||
      !std::isfinite(range)) {
    return false;
  }
  return fill(RandomKernel::kUniform, self, *chosen, {real_arg(type, from), real_arg(type, to)});
}

bool native_normal_(const at::Tensor& self, double mean, double std,
                    const std::optional<at::Generator>& generator) {
  const std::optional<DeviceGenerator*> chosen = random_target(self, generator);
  const at::ScalarType type = self.scalar_type();
  // std < 0: the CPU's error.
  if (!chosen || !(floating(type) || reduced_float(type)) || !(std >= 0)) return false;
  return fill(RandomKernel::kNormal, self, *chosen, {real_arg(type, mean), real_arg(type, std)});
}

bool native_bernoulli_(const at::Tensor& self, double p,
                       const std::optional<at::Generator>& generator) {
  const std::optional<DeviceGenerator*> chosen = random_target(self, generator);
  const at::ScalarType type = self.scalar_type();
  if (!chosen || (cl_type(type) == nullptr && !reduced_float(type)) ||
      !(p >= 0 && p <= 1)) {
    return false;
  }
  return fill(RandomKernel::kBernoulli, self, *chosen, {LaunchArg::of(threshold_of(p))});
}

bool native_random_(const at::Tensor& self, std::optional<int64_t> from,
                    std::optional<int64_t> to, const std::optional<at::Generator>& generator) {
  const std::optional<DeviceGenerator*> chosen = random_target(self, generator);
  if (!chosen) return false;
  const at::ScalarType type = self.scalar_type();
  // The dtype's inclusive range of values random_ may give.
  int64_t low = 0, high = 0;
  if (floating(type)) {
    low = -exact_integers(type);
    high = exact_integers(type);
  } else if (const auto bounds = integer_bounds(type)) {
    std::tie(low, high) = *bounds;
  } else {
    return false;
  }
  // [first, last] as random_(), random_(to) and random_(from, to) give them; a bound outside
  // the dtype's is the CPU's to move or refuse.
  int64_t first = 0, last = 0;
  if (!from) {
    first = 0;
    last = high;
  } else if (to) {
    if (!(*from < *to)) return false;
    first = *from;
    last = *to - 1;
  } else {
    first = *from;
    last = high;
    if (floating(type) && first == high) return false;  // the CPU wants from < 2^digits
  }
  if (first < low || last > high || first > last) return false;
  const uint64_t range = static_cast<uint64_t>(last) - static_cast<uint64_t>(first) + 1;
  if (range == 0) return false;  // all 2^64 values of int64: not taken
  return fill(RandomKernel::kRandom, self, *chosen,
              {LaunchArg::of(first), LaunchArg::of(range)});
}

std::optional<std::tuple<at::Tensor, at::Tensor>> native_dropout_on_device(
    const at::Tensor& input, double p) {
  const std::optional<DeviceGenerator*> chosen = random_target(input, std::nullopt);
  const at::ScalarType type = input.scalar_type();
  if (!chosen || !input.is_contiguous() || !(p >= 0 && p <= 1) ||
      !(floating(type) || reduced_float(type))) {
    return std::nullopt;
  }
  const double keep = 1. - p;
  const double scale = keep == 0 ? 0. : 1. / keep;
  // The scale rounded to the input's dtype, as the CPU's mask * scale holds it.
  const double rounded = type == at::kHalf       ? static_cast<float>(c10::Half(scale))
                         : type == at::kBFloat16 ? static_cast<float>(c10::BFloat16(scale))
                                                 : scale;
  at::Tensor output = at::empty(input.sizes(), input.options());
  at::Tensor mask = at::empty(input.sizes(), input.options().dtype(at::kBool));
  std::vector<LaunchArg> leading{blob_arg(mask, KernelAccess::kWrite),
                                 blob_arg(input, KernelAccess::kRead)};
  if (!launch_random(RandomKernel::kDropout, type, output, *chosen,
                     {LaunchArg::of(threshold_of(keep)), real_arg(type, rounded)},
                     std::move(leading))) {
    return std::nullopt;
  }
  return std::make_tuple(std::move(output), std::move(mask));
}

}  // namespace oclvm::torch_adapter
