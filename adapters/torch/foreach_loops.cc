// adapters/torch/foreach_loops.cc — the device's own loops for SGD's in-place _foreach_ operators
// (foreach_loops.h).
#include "adapters/torch/foreach_loops.h"

#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <ATen/Version.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "adapters/torch/device.h"
#include "adapters/torch/host_view.h"

namespace oclvm::torch_adapter {
namespace {

// Note [Fused foreach loops]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch counts PrivateUse1 among its foreach devices, so SGD, Adam and AdamW step with _foreach_
// operators here, where the CPU steps tensor by tensor. HostListKernel ran the CPU's _foreach_
// kernel on host aliases: a loop of whole CPU operators, each with its dispatch, its
// TensorIterator and, for a scalar, a wrapped-number tensor. On the demo's MLP (four parameters)
// _foreach_mul_ with a scalar took 6.7 us, the CPU's four mul_ calls 8.0 us. SGD's three
// operators are simple enough to be the device's own kernels, as CUDA's multi-tensor kernels
// are: each checks its lists, takes one host section and runs one loop per tensor over the
// device's bytes, with no alias, no dispatch and no allocation.
//
// The loops compute what the CPU's kernels compute, bit for bit: a product of two values of the
// tensor's type (the scalar converted first, as the CPU converts its wrapped number), a sum, and
// for add_ with alpha, self + alpha * other as the CPU's add kernel rounds it: once (a fused
// multiply-add) where ATen runs its AVX2 or AVX512 kernels, twice where it runs its DEFAULT ones
// (a machine without AVX2, or ATEN_CPU_CAPABILITY=default); on other architectures the loops
// leave add_ with alpha alone. They take float and double tensors, contiguous,
// all on one host-addressable device, pairs of equal sizes that are either one tensor (the same
// address and strides) or disjoint, and real scalars that fit the type; anything else (another
// dtype, a view with gaps, a pair that partly overlaps, which the CPU refuses) is left to
// HostListKernel, unchanged. Pairs run in list order, as the CPU's loop runs them, so a tensor
// named twice is updated twice. A tensor of at least at::internal::GRAIN_SIZE elements is split
// over the intra-op threads, as the CPU splits it. HostListKernel bumps the versions of the list
// written (Note [Versions of lists written in place] in host_kernels.cc).
//
// The loops are compiled twice (GCC's target_clones on x86-64): for x86-64-v3, where the fused
// multiply-add is an instruction and the loops are vectorised, and for any x86-64, where std::fma
// is a library call with the same result. The file is compiled with -ffp-contract=off, so that a
// multiply and an add the code keeps apart are never fused by the compiler.

std::atomic<uint64_t> g_calls{0};

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define OCLVM_LOOP_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define OCLVM_LOOP_CLONES
#endif

OCLVM_LOOP_CLONES void axpy(float* self, const float* other, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) self[i] = std::fma(other[i], alpha, self[i]);
}
OCLVM_LOOP_CLONES void axpy(double* self, const double* other, double alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) self[i] = std::fma(other[i], alpha, self[i]);
}
OCLVM_LOOP_CLONES void axpy_rounding_twice(float* self, const float* other, float alpha,
                                           int64_t n) {
  for (int64_t i = 0; i < n; ++i) self[i] = self[i] + alpha * other[i];
}
OCLVM_LOOP_CLONES void axpy_rounding_twice(double* self, const double* other, double alpha,
                                           int64_t n) {
  for (int64_t i = 0; i < n; ++i) self[i] = self[i] + alpha * other[i];
}
OCLVM_LOOP_CLONES void add(float* self, float value, int64_t n) {
  for (int64_t i = 0; i < n; ++i) self[i] += value;
}
OCLVM_LOOP_CLONES void add(double* self, double value, int64_t n) {
  for (int64_t i = 0; i < n; ++i) self[i] += value;
}
OCLVM_LOOP_CLONES void scale(float* self, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) self[i] *= factor;
}
OCLVM_LOOP_CLONES void scale(double* self, double factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) self[i] *= factor;
}

// Whether `tensor` is one the loops take: a contiguous float (when `floats`) or double tensor on
// `device`, without bits.
bool takes(const at::Tensor& tensor, const c10::Device& device, bool floats) {
  if (!tensor.defined() || tensor.device() != device || tensor.layout() != at::kStrided) {
    return false;
  }
  const at::ScalarType type = tensor.scalar_type();
  return ((floats && type == at::kFloat) || type == at::kDouble) && tensor.is_contiguous() &&
         !tensor.is_conj() && !tensor.is_neg();
}

// `scalar` as a T the way the CPU converts it; nullopt for what the loops leave alone (a
// complex, boolean or symbolic scalar, or a finite value beyond T's range).
template <class T>
std::optional<T> value_as(const at::Scalar& scalar) {
  if (scalar.isComplex() || scalar.isBoolean() || scalar.isSymbolic()) return std::nullopt;
  const double value = scalar.toDouble();
  if (std::isfinite(value) && std::abs(value) > std::numeric_limits<T>::max()) {
    return std::nullopt;
  }
  return scalar.to<T>();
}

// A scalar operand as each loop type takes it; `as_float` is empty when the value does not fit a
// float, and then float lists are left alone.
struct Operand {
  explicit Operand(const at::Scalar& scalar)
      : as_double(value_as<double>(scalar)), as_float(value_as<float>(scalar)) {}
  std::optional<double> as_double;
  std::optional<float> as_float;
};

// One tensor of the lists as the loops see it: element 0 of it (and of its pair) on the host.
struct Span {
  void* self;
  const void* other;  // nullptr for the scalar operators
  int64_t numel;
  bool is_float;  // else double
};

// `run(span, begin, end)` over the elements of each of `self` (paired with the same position of
// `other`, when given), in one host section, once every tensor is one the loops take with
// `operand`; false, with nothing run, otherwise.
template <class Run>
bool for_each_span(at::TensorList self, const at::TensorList* other, const Operand& operand,
                   Run&& run) {
  if (self.empty() || !operand.as_double ||
      (other != nullptr && other->size() != self.size())) {
    return false;
  }
  const c10::Device device = self[0].device();
  if (device.type() != c10::DeviceType::PrivateUse1 || !host_addressable(device.index())) {
    return false;
  }
  const bool floats = operand.as_float.has_value();
  for (size_t i = 0; i < self.size(); ++i) {
    if (!takes(self[i], device, floats)) return false;
    if (other == nullptr) continue;
    const at::Tensor& that = (*other)[i];
    if (!takes(that, device, floats) || that.scalar_type() != self[i].scalar_type() ||
        !that.sizes().equals(self[i].sizes())) {
      return false;
    }
  }
  std::optional<vm::HostSection> section = host_section(device.index());
  if (!section) return false;
  // Every address first, so that a tensor without one leaves every tensor as it was.
  c10::SmallVector<Span, 8> spans;
  for (size_t i = 0; i < self.size(); ++i) {
    const int64_t numel = self[i].numel();
    if (numel == 0) continue;
    void* mine = host_address(self[i]);
    const void* theirs = other != nullptr ? host_address((*other)[i]) : nullptr;
    if (mine == nullptr || (other != nullptr && theirs == nullptr)) return false;
    if (theirs == mine && !(*other)[i].strides().equals(self[i].strides())) {
      return false;  // one address, two layouts (a size-1 dimension's stride): the CPU refuses
    }
    if (theirs != nullptr && theirs != mine) {
      const size_t bytes = static_cast<size_t>(numel) * self[i].element_size();
      const auto* a = static_cast<const char*>(mine);
      const auto* b = static_cast<const char*>(theirs);
      if (a < b + bytes && b < a + bytes) return false;  // partly overlapping: the CPU refuses
    }
    spans.push_back(Span{mine, theirs, numel, self[i].scalar_type() == at::kFloat});
  }
  for (const Span& span : spans) {
    at::parallel_for(0, span.numel, at::internal::GRAIN_SIZE,
                     [&](int64_t begin, int64_t end) { run(span, begin, end); });
  }
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

template <class T>
T* element(void* base, int64_t index) {
  return static_cast<T*>(base) + index;
}
template <class T>
const T* element(const void* base, int64_t index) {
  return static_cast<const T*>(base) + index;
}

// Whether the CPU's add kernel rounds self + alpha * other once (fused) on this machine (Note
// [Fused foreach loops]); nullopt where the loops do not know: every architecture but x86-64,
// whose DEFAULT kernels (on aarch64, say) may well fuse.
std::optional<bool> cpu_fuses_multiply_add() {
#if defined(__x86_64__)
  const std::string capability = at::get_cpu_capability();  // as ATen chose its kernels
  if (capability == "DEFAULT") return false;
  if (capability == "AVX2" || capability == "AVX512") return true;
#endif
  return std::nullopt;
}

// `loop(element 0, value, count)` over each of `self` with `scalar` as its type takes it; the
// scalar operators' for_each_span.
template <class Loop>
bool for_each_with_scalar(at::TensorList self, const at::Scalar& scalar, Loop&& loop) {
  const Operand value(scalar);
  return for_each_span(self, nullptr, value, [&](const Span& span, int64_t begin, int64_t end) {
    if (span.is_float) {
      loop(element<float>(span.self, begin), *value.as_float, end - begin);
    } else {
      loop(element<double>(span.self, begin), *value.as_double, end - begin);
    }
  });
}

}  // namespace

bool fused_foreach_add_(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {
  static const std::optional<bool> fuses = cpu_fuses_multiply_add();
  if (!fuses) return false;
  const Operand a(alpha);
  return for_each_span(self, &other, a, [&](const Span& span, int64_t begin, int64_t end) {
    const int64_t n = end - begin;
    if (span.is_float) {
      float* mine = element<float>(span.self, begin);
      const float* theirs = element<float>(span.other, begin);
      *fuses ? axpy(mine, theirs, *a.as_float, n)
             : axpy_rounding_twice(mine, theirs, *a.as_float, n);
    } else {
      double* mine = element<double>(span.self, begin);
      const double* theirs = element<double>(span.other, begin);
      *fuses ? axpy(mine, theirs, *a.as_double, n)
             : axpy_rounding_twice(mine, theirs, *a.as_double, n);
    }
  });
}

bool fused_foreach_add_(at::TensorList self, const at::Scalar& scalar) {
  return for_each_with_scalar(self, scalar, [](auto* data, auto value, int64_t n) {
    add(data, value, n);
  });
}

bool fused_foreach_mul_(at::TensorList self, const at::Scalar& scalar) {
  return for_each_with_scalar(self, scalar, [](auto* data, auto factor, int64_t n) {
    scale(data, factor, n);
  });
}

uint64_t fused_foreach_calls() { return g_calls.load(std::memory_order_relaxed); }

}  // namespace oclvm::torch_adapter
