// adapters/torch/native_channel_norm.cc — batch norm and group norm, forward and backward, on the
// native path: generated OpenCL kernels that reduce per channel (batch norm) or per group of
// channels of a sample (group norm), then transform each element (native_kernels.h).

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/host_view.h"
#include "adapters/torch/native_kernel_table.h"
#include "adapters/torch/native_kernels.h"

namespace oclvm::torch_adapter {

// Note [Native batch and group norm]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// native_batch_norm, native_batch_norm_backward, native_group_norm and
// native_group_norm_backward of float32 or float64 tensors on one native-path device, computed
// with the CPU's formulas (its kernels' association of each product and sum), each operation
// rounded on its own (FP_CONTRACT OFF):
//   - batch norm sees its input as [N, C, S], S its spatial dimensions merged: a contiguous and a
//     channels-last input both qualify, and the results take the input's suggested layout, as
//     the CPU's. Training: one work-item per channel takes the mean, then the biased variance
//     from the deviations, both as compensated (Kahan) sums so that the error does not grow with
//     N x S (the CPU sums in double); invstd = 1 / sqrt(var + eps); the running statistics, when
//     given, become momentum * mean + (1 - momentum) * running_mean and likewise with the
//     unbiased variance, written in place by the same work-item. Evaluation uses the running
//     statistics and returns empty saved statistics, as the CPU does. Then one work-item per
//     element: y = x * alpha + beta, alpha = invstd * w, beta = b - mean * alpha.
//     Backward: per channel, sum(dy) and dot = sum((x - mean) * dy), compensated; then per
//     element, in training, dx = ((dy - sum(dy) / (N x S)) - (x - mean) * proj) * invstd * w with
//     proj = dot * invstd^2 / (N x S), in evaluation dx = dy * invstd * w (each product left to
//     right, as the CPU's kernel); dw = dot * invstd and db = sum(dy). torch's InvStd is 0, not
//     inf, where the variance and eps are both 0, and so is this one.
//   - group norm sees a contiguous input as N x groups rows of C / groups x HxW elements. Forward:
//     one work-item per row for the mean and rstd (compensated sums), then per element
//     y = x * scale + bias with scale = rstd * w[c] and bias = -scale * mean + b[c]. Backward:
//     per (sample, channel) ds = sum(dy * x) and db = sum(dy); per row the coefficients
//     c2 = (db_g * mean - ds_g) * rstd^3 / (C / groups x HxW) and
//     c3 = -c2 * mean - db_g * rstd / (C / groups x HxW), where ds_g and db_g sum the row's
//     channels' ds and db weighted by w; per element dx = rstd * w[c] * dy + c2 * x + c3; per
//     channel dw = sum over samples of (ds - db * mean) * rstd, and db's sum.
// The values agree with the CPU's to float rounding, not to the bit (its sums are vectorised, in
// double for batch norm's statistics). Temporaries (per-channel sums, per-row coefficients) come
// from the caching allocator on the current stream.
//
// Not taken (the CPU kernel answers): other dtypes, mixed dtypes or devices, conjugate or
// negative bits, empty inputs, inputs of fewer than two dimensions, shapes and arguments the CPU
// refuses (a weight or statistic of the wrong size, groups that do not divide the channels, a
// group norm's N, C and HxW that do not describe the input), a batch norm input whose spatial
// dimensions do not step as one, a channels-last group norm, float64 on a device whose kernels
// cannot build it, and inputs or gradients of more than 2^31 elements or spanning more (the
// kernels index in int).

namespace {

constexpr int64_t kIndexMax = std::numeric_limits<int32_t>::max();

// The code both families share: the element type T, a compensated sum, and no contraction.
std::string prelude(at::ScalarType type) {
  std::string s;
  if (type == at::kDouble) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  s += "#pragma OPENCL FP_CONTRACT OFF\n";
  s += std::string("#define T ") + cl_type(type) + "\n";
  // sum += term, with its rounding error carried in c (dropped once the sum is not finite).
  s += "#define KAHAN_ADD(sum, c, term) { const T y_ = (term) - c; const T u_ = sum + y_; "
       "c = isfinite(u_) ? (u_ - sum) - y_ : (T)0; sum = u_; }\n";
  return s;
}

// Element (n, c, s) of a tensor seen as [N, C, S] with strides (sn, sc, ss).
constexpr const char* kAt = "#define AT(p, n, c, s) (p)[(n) * sn + (c) * sc + (s) * ss]\n";

enum class ChannelKernel : uint8_t {
  kBatchStats,      // per channel: mean and invstd (training: and the running statistics)
  kBatchApply,      // per element: y
  kBatchReduce,     // per channel: sum(dy), sum((x - mean) * dy), dw, db
  kBatchInput,      // per element: dx
  kGroupStats,      // per row: mean, rstd
  kGroupApply,      // per element: y
  kGroupChannels,   // per (sample, channel): ds, db
  kGroupRows,       // per row: c2, c3
  kGroupInput,      // per element: dx
  kGroupParameters  // per channel: dw, db
};

// Which variant of a kernel: a weight, a bias (or for the backward: dw, db wanted), training,
// running statistics.
struct Variant {
  bool w = false, b = false, train = false, running = false;
  uint64_t bits() const {
    return uint64_t{w} | uint64_t{b} << 1 | uint64_t{train} << 2 | uint64_t{running} << 3;
  }
};

KernelSource channel_source(ChannelKernel kind, at::ScalarType type, Variant v) {
  std::string s = prelude(type);
  s += std::string("#define HAS_W ") + (v.w ? "1" : "0") + "\n#define HAS_B " +
       (v.b ? "1" : "0") + "\n#define TRAIN " + (v.train ? "1" : "0") + "\n#define RUNNING " +
       (v.running ? "1" : "0") + "\n" + kAt;
  std::string name;
  switch (kind) {
    case ChannelKernel::kBatchStats:
      name = "oclvm_batch_norm_stats";
      s += R"(
__kernel void oclvm_batch_norm_stats(OCLVM_BLOB(T, mean), OCLVM_BLOB(T, invstd),
    OCLVM_BLOB(T, x), OCLVM_BLOB(T, rm), OCLVM_BLOB(T, rv), int N, int C, int S, int sn, int sc,
    int ss, T eps, T momentum) {
  const int c = (int)get_global_id(0);
  if (c >= C) return;
  __global const T* x = OCLVM_PTR(T, x);
#if TRAIN
  const T count = (T)N * (T)S;
  T sum = 0, e = 0;
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < S; ++i) KAHAN_ADD(sum, e, AT(x, n, c, i));
  const T mu = sum / count;
  T sq = 0;
  e = 0;
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < S; ++i) KAHAN_ADD(sq, e, (AT(x, n, c, i) - mu) * (AT(x, n, c, i) - mu));
  OCLVM_PTR(T, mean)[c] = mu;
  // torch's InvStd: 0 where the variance and eps are both 0, not inf.
  OCLVM_PTR(T, invstd)[c] = sq == (T)0 && eps == (T)0 ? (T)0 : (T)1 / sqrt(sq / count + eps);
#if RUNNING
  OCLVM_PTR(T, rm)[c] = momentum * mu + ((T)1 - momentum) * OCLVM_PTR(T, rm)[c];
  OCLVM_PTR(T, rv)[c] = momentum * (sq / (count - (T)1)) + ((T)1 - momentum) * OCLVM_PTR(T, rv)[c];
#endif
#else
  OCLVM_PTR(T, mean)[c] = OCLVM_PTR(T, rm)[c];
  OCLVM_PTR(T, invstd)[c] = (T)1 / sqrt(OCLVM_PTR(T, rv)[c] + eps);
#endif
}
)";
      break;
    case ChannelKernel::kBatchApply:
      name = "oclvm_batch_norm_apply";
      s += R"(
__kernel void oclvm_batch_norm_apply(OCLVM_BLOB(T, y), OCLVM_BLOB(T, x), OCLVM_BLOB(T, mean),
    OCLVM_BLOB(T, invstd), OCLVM_BLOB(T, w), OCLVM_BLOB(T, b), int N, int C, int S, int sn,
    int sc, int ss, int yn, int yc, int ys) {
  const int i = (int)get_global_id(0), c = (int)get_global_id(1), n = (int)get_global_id(2);
  if (i >= S || c >= C || n >= N) return;
  const T alpha = OCLVM_PTR(T, invstd)[c]
#if HAS_W
      * OCLVM_PTR(T, w)[c]
#endif
      ;
#if HAS_B
  const T beta = OCLVM_PTR(T, b)[c] - OCLVM_PTR(T, mean)[c] * alpha;
#else
  const T beta = -(OCLVM_PTR(T, mean)[c] * alpha);
#endif
  OCLVM_PTR(T, y)[n * yn + c * yc + i * ys] = AT(OCLVM_PTR(T, x), n, c, i) * alpha + beta;
}
)";
      break;
    case ChannelKernel::kBatchReduce:
      name = "oclvm_batch_norm_reduce";
      s += R"(
__kernel void oclvm_batch_norm_reduce(OCLVM_BLOB(T, sums), OCLVM_BLOB(T, dw), OCLVM_BLOB(T, db),
    OCLVM_BLOB(T, dy), OCLVM_BLOB(T, x), OCLVM_BLOB(T, mean), OCLVM_BLOB(T, invstd), int N, int C,
    int S, int sn, int sc, int ss, int gn, int gc, int gs, T eps) {
  const int c = (int)get_global_id(0);
  if (c >= C) return;
  __global const T* x = OCLVM_PTR(T, x);
  __global const T* dy = OCLVM_PTR(T, dy);
#if TRAIN
  const T mu = OCLVM_PTR(T, mean)[c], r = OCLVM_PTR(T, invstd)[c];
#else
  const T mu = OCLVM_PTR(T, mean)[c], r = (T)1 / sqrt(OCLVM_PTR(T, invstd)[c] + eps);
#endif
  T sum = 0, dot = 0, e = 0, f = 0;
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < S; ++i) {
      const T g = dy[n * gn + c * gc + i * gs];
      KAHAN_ADD(sum, e, g);
      KAHAN_ADD(dot, f, (AT(x, n, c, i) - mu) * g);
    }
  OCLVM_PTR(T, sums)[3 * c] = sum;
  OCLVM_PTR(T, sums)[3 * c + 1] = dot;
  OCLVM_PTR(T, sums)[3 * c + 2] = r;
#if HAS_W
  OCLVM_PTR(T, dw)[c] = dot * r;
#endif
#if HAS_B
  OCLVM_PTR(T, db)[c] = sum;
#endif
}
)";
      break;
    case ChannelKernel::kBatchInput:
      name = "oclvm_batch_norm_input";
      s += R"(
__kernel void oclvm_batch_norm_input(OCLVM_BLOB(T, dx), OCLVM_BLOB(T, dy), OCLVM_BLOB(T, x),
    OCLVM_BLOB(T, mean), OCLVM_BLOB(T, sums), OCLVM_BLOB(T, w), int N, int C, int S, int sn,
    int sc, int ss, int gn, int gc, int gs, int on, int oc, int os) {
  const int i = (int)get_global_id(0), c = (int)get_global_id(1), n = (int)get_global_id(2);
  if (i >= S || c >= C || n >= N) return;
  const T r = OCLVM_PTR(T, sums)[3 * c + 2];
  const T g = OCLVM_PTR(T, dy)[n * gn + c * gc + i * gs];
#if TRAIN
  const T count = (T)N * (T)S;
  const T proj = OCLVM_PTR(T, sums)[3 * c + 1] * r * r / count;
  const T gmean = OCLVM_PTR(T, sums)[3 * c] / count;
  T v = (g - gmean - (AT(OCLVM_PTR(T, x), n, c, i) - OCLVM_PTR(T, mean)[c]) * proj) * r;
#else
  T v = g * r;
#endif
#if HAS_W
  v = v * OCLVM_PTR(T, w)[c];
#endif
  OCLVM_PTR(T, dx)[n * on + c * oc + i * os] = v;
}
)";
      break;
    case ChannelKernel::kGroupStats:
      name = "oclvm_group_norm_stats";
      s += R"(
__kernel void oclvm_group_norm_stats(OCLVM_BLOB(T, mean), OCLVM_BLOB(T, rstd), OCLVM_BLOB(T, x),
    int rows, int D, T eps) {
  const int row = (int)get_global_id(0);
  if (row >= rows) return;
  __global const T* x = OCLVM_PTR(T, x) + row * D;
  T sum = 0, e = 0;
  for (int j = 0; j < D; ++j) KAHAN_ADD(sum, e, x[j]);
  const T mu = sum / (T)D;
  T sq = 0;
  e = 0;
  for (int j = 0; j < D; ++j) KAHAN_ADD(sq, e, (x[j] - mu) * (x[j] - mu));
  OCLVM_PTR(T, mean)[row] = mu;
  OCLVM_PTR(T, rstd)[row] = (T)1 / sqrt(fmax(sq / (T)D, (T)0) + eps);
}
)";
      break;
    case ChannelKernel::kGroupApply:
      name = "oclvm_group_norm_apply";
      s += R"(
__kernel void oclvm_group_norm_apply(OCLVM_BLOB(T, y), OCLVM_BLOB(T, x), OCLVM_BLOB(T, mean),
    OCLVM_BLOB(T, rstd), OCLVM_BLOB(T, w), OCLVM_BLOB(T, b), int HW, int C, int per_group,
    int N) {
  const int i = (int)get_global_id(0), c = (int)get_global_id(1), n = (int)get_global_id(2);
  if (i >= HW || c >= C || n >= N) return;
  const int row = n * (C / per_group) + c / per_group;
  const T scale = OCLVM_PTR(T, rstd)[row]
#if HAS_W
      * OCLVM_PTR(T, w)[c]
#endif
      ;
  const T shift = -scale * OCLVM_PTR(T, mean)[row]
#if HAS_B
      + OCLVM_PTR(T, b)[c]
#endif
      ;
  const int at = (n * C + c) * HW + i;
  OCLVM_PTR(T, y)[at] = OCLVM_PTR(T, x)[at] * scale + shift;
}
)";
      break;
    case ChannelKernel::kGroupChannels:
      name = "oclvm_group_norm_channels";
      s += R"(
__kernel void oclvm_group_norm_channels(OCLVM_BLOB(T, sums), OCLVM_BLOB(T, dy), OCLVM_BLOB(T, x),
    int planes, int HW) {
  const int p = (int)get_global_id(0);
  if (p >= planes) return;
  __global const T* x = OCLVM_PTR(T, x) + p * HW;
  __global const T* dy = OCLVM_PTR(T, dy) + p * HW;
  T ds = 0, db = 0, e = 0, f = 0;
  for (int i = 0; i < HW; ++i) {
    KAHAN_ADD(ds, e, dy[i] * x[i]);
    KAHAN_ADD(db, f, dy[i]);
  }
  OCLVM_PTR(T, sums)[2 * p] = ds;
  OCLVM_PTR(T, sums)[2 * p + 1] = db;
}
)";
      break;
    case ChannelKernel::kGroupRows:
      name = "oclvm_group_norm_rows";
      s += R"(
__kernel void oclvm_group_norm_rows(OCLVM_BLOB(T, coef), OCLVM_BLOB(T, sums), OCLVM_BLOB(T, mean),
    OCLVM_BLOB(T, rstd), OCLVM_BLOB(T, w), int rows, int C, int per_group, int HW) {
  const int row = (int)get_global_id(0);
  if (row >= rows) return;
  const int groups = C / per_group, n = row / groups, first = (row - n * groups) * per_group;
  T ds = 0, db = 0;
  for (int k = 0; k < per_group; ++k) {
    const int p = n * C + first + k;
#if HAS_W
    ds += OCLVM_PTR(T, sums)[2 * p] * OCLVM_PTR(T, w)[first + k];
    db += OCLVM_PTR(T, sums)[2 * p + 1] * OCLVM_PTR(T, w)[first + k];
#else
    ds += OCLVM_PTR(T, sums)[2 * p];
    db += OCLVM_PTR(T, sums)[2 * p + 1];
#endif
  }
  const T mu = OCLVM_PTR(T, mean)[row], r = OCLVM_PTR(T, rstd)[row];
  const T s = (T)1 / (T)(per_group * HW);
  const T c2 = (db * mu - ds) * r * r * r * s;
  OCLVM_PTR(T, coef)[2 * row] = c2;
  OCLVM_PTR(T, coef)[2 * row + 1] = -c2 * mu - db * r * s;
}
)";
      break;
    case ChannelKernel::kGroupInput:
      name = "oclvm_group_norm_input";
      s += R"(
__kernel void oclvm_group_norm_input(OCLVM_BLOB(T, dx), OCLVM_BLOB(T, dy), OCLVM_BLOB(T, x),
    OCLVM_BLOB(T, rstd), OCLVM_BLOB(T, coef), OCLVM_BLOB(T, w), int HW, int C, int per_group,
    int N) {
  const int i = (int)get_global_id(0), c = (int)get_global_id(1), n = (int)get_global_id(2);
  if (i >= HW || c >= C || n >= N) return;
  const int row = n * (C / per_group) + c / per_group;
  const T c1 = OCLVM_PTR(T, rstd)[row]
#if HAS_W
      * OCLVM_PTR(T, w)[c]
#endif
      ;
  const int at = (n * C + c) * HW + i;
  OCLVM_PTR(T, dx)[at] = c1 * OCLVM_PTR(T, dy)[at] + OCLVM_PTR(T, coef)[2 * row] *
      OCLVM_PTR(T, x)[at] + OCLVM_PTR(T, coef)[2 * row + 1];
}
)";
      break;
    case ChannelKernel::kGroupParameters:
      name = "oclvm_group_norm_parameters";
      s += R"(
__kernel void oclvm_group_norm_parameters(OCLVM_BLOB(T, dw), OCLVM_BLOB(T, db),
    OCLVM_BLOB(T, sums), OCLVM_BLOB(T, mean), OCLVM_BLOB(T, rstd), int N, int C, int per_group) {
  const int c = (int)get_global_id(0);
  if (c >= C) return;
  const int groups = C / per_group;
  T sw = 0, sb = 0;
  for (int n = 0; n < N; ++n) {
    const int p = n * C + c, row = n * groups + c / per_group;
    sw += (OCLVM_PTR(T, sums)[2 * p] - OCLVM_PTR(T, sums)[2 * p + 1] * OCLVM_PTR(T, mean)[row]) *
          OCLVM_PTR(T, rstd)[row];
    sb += OCLVM_PTR(T, sums)[2 * p + 1];
  }
#if HAS_W
  OCLVM_PTR(T, dw)[c] = sw;
#endif
#if HAS_B
  OCLVM_PTR(T, db)[c] = sb;
#endif
}
)";
      break;
  }
  const char* options = type == at::kFloat ? "-cl-fp32-correctly-rounded-divide-sqrt" : "";
  return KernelSource{std::move(s), std::move(name), options};
}

std::shared_ptr<const Kernel> channel_kernel(c10::DeviceIndex device, ChannelKernel kind,
                                             at::ScalarType type, Variant v) {
  const uint64_t id = (static_cast<uint64_t>(kind) << 16) |
                      (static_cast<uint64_t>(type == at::kDouble) << 8) | v.bits();
  return native_kernel(device, NativeKernelFamily::kChannelNorm, id,
                       [&] { return channel_source(kind, type, v); });
}

LaunchArg float_arg(at::ScalarType type, double value) {
  return type == at::kFloat ? LaunchArg::of(static_cast<float>(value)) : LaunchArg::of(value);
}

// A blob argument for `t`, or for `stand_in` where `t` is absent (a kernel variant that does not
// read it still takes the argument).
LaunchArg blob_or(const at::Tensor& t, const at::Tensor& stand_in, KernelAccess access) {
  return blob_arg(t.defined() ? t : stand_in, t.defined() ? access : KernelAccess::kRead);
}

// Whether `t` (absent: yes) is a float tensor of `like`'s dtype and device, without bits.
bool operand(const at::Tensor& t, const at::Tensor& like) {
  return !t.defined() || (is_device(t) && t.device() == like.device() &&
                          t.layout() == at::kStrided && !t.is_conj() && !t.is_neg() &&
                          t.scalar_type() == like.scalar_type());
}

// Whether the native path takes an input of this kind on its device (its other tensors checked
// with operand()).
bool native_input(const at::Tensor& input) {
  if (!input.defined() || !is_device(input) || !native_kernels(input.device().index()) ||
      !operand(input, input) || input.dim() < 2 || input.numel() == 0 ||
      input.numel() > kIndexMax || span_elements(input) > kIndexMax) {
    return false;
  }
  const at::ScalarType type = input.scalar_type();
  return type == at::kFloat || (type == at::kDouble && native_float64(input.device().index()));
}

// A vector of `size` elements (absent: yes).
bool vector_of(const at::Tensor& t, int64_t size) {
  return !t.defined() || (t.dim() == 1 && t.size(0) == size);
}

// [N, C, S] strides of `t` (dims >= 2), its spatial dimensions merged; nullopt when they do not
// step as one.
std::optional<std::array<int64_t, 3>> ncs_strides(const at::Tensor& t) {
  const std::optional<std::pair<int64_t, int64_t>> spatial = dimensions_as_one(t, 2, t.dim());
  if (!spatial) return std::nullopt;
  return std::array<int64_t, 3>{t.stride(0), t.stride(1), spatial->second};
}

// The spatial size S of `t`.
int64_t spatial_size(const at::Tensor& t) {
  int64_t s = 1;
  for (int64_t d = 2; d < t.dim(); ++d) s *= t.size(d);
  return s;
}

at::Tensor value_of(const std::optional<at::Tensor>& t) { return t.value_or(at::Tensor()); }

// The checks below throw, on either path, where torch 2.13's CPU kernel for a device's batch norm
// would read past a vector (it then returns another allocation's bytes, or crashes) or through an
// absent one (it crashes), in torch's own words for them. Inputs of fewer than two dimensions are
// left to the CPU's checks.
using NamedTensors = std::initializer_list<std::pair<const char*, const at::Tensor*>>;

// Each given vector holds one element per channel.
void check_per_channel(const at::Tensor& input, NamedTensors vectors) {
  if (!is_device(input) || input.dim() < 2) return;
  for (const auto& [name, t] : vectors) {
    TORCH_CHECK(!t->defined() || t->numel() == input.size(1), name, " should contain ",
                input.size(1), " elements not ", t->numel());
  }
}

// Each vector is given; `when` says in which mode it must be.
void check_given(const at::Tensor& input, NamedTensors vectors, const char* when) {
  if (!is_device(input) || input.dim() < 2) return;
  for (const auto& [name, t] : vectors) TORCH_CHECK(t->defined(), name, " must be defined ", when);
}

}  // namespace

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, const std::optional<at::Tensor>& running_mean_opt,
    const std::optional<at::Tensor>& running_var_opt, bool training, double momentum,
    double eps) {
  const at::Tensor w = value_of(weight_opt), b = value_of(bias_opt);
  const at::Tensor rm = value_of(running_mean_opt), rv = value_of(running_var_opt);
  if (!training) {
    check_given(input, {{"running_mean", &rm}, {"running_var", &rv}}, "in evaluation mode");
  }
  check_per_channel(input,
                    {{"weight", &w}, {"bias", &b}, {"running_mean", &rm}, {"running_var", &rv}});
  if (!native_input(input)) return std::nullopt;
  const int64_t n = input.size(0), c = input.size(1), s = spatial_size(input);
  for (const at::Tensor* t : {&w, &b, &rm, &rv}) {
    if (!operand(*t, input) || !vector_of(*t, c)) return std::nullopt;
  }
  // Evaluation needs both running statistics; training updates both or neither (the CPU's).
  if (rm.defined() != rv.defined() || (!training && !rm.defined())) return std::nullopt;
  if (rm.defined() && (!rm.is_contiguous() || !rv.is_contiguous() || rm.is_alias_of(rv))) {
    return std::nullopt;  // written in place by index
  }
  const std::optional<std::array<int64_t, 3>> in = ncs_strides(input);
  at::Tensor y = at::empty_like(input, input.suggest_memory_format());
  const std::optional<std::array<int64_t, 3>> out = ncs_strides(y);
  if (!in || !out) return std::nullopt;
  const Variant v{w.defined(), b.defined(), training, rm.defined()};
  const at::ScalarType type = input.scalar_type();
  const c10::DeviceIndex device = input.device().index();
  const std::shared_ptr<const Kernel> stats =
      channel_kernel(device, ChannelKernel::kBatchStats, type, v);
  const std::shared_ptr<const Kernel> apply =
      channel_kernel(device, ChannelKernel::kBatchApply, type, v);
  if (stats == nullptr || apply == nullptr) return std::nullopt;
  at::Tensor mean = at::empty({c}, input.options()), invstd = at::empty({c}, input.options());
  const at::Tensor wc = w.defined() ? w.contiguous() : w, bc = b.defined() ? b.contiguous() : b;
  launch_counted(stats, mean,
                 {blob_arg(mean, KernelAccess::kWrite), blob_arg(invstd, KernelAccess::kWrite),
                  blob_arg(input, KernelAccess::kRead),
                  blob_or(rm, input, KernelAccess::kReadWrite),
                  blob_or(rv, input, KernelAccess::kReadWrite), int_arg(n), int_arg(c), int_arg(s),
                  int_arg((*in)[0]), int_arg((*in)[1]), int_arg((*in)[2]), float_arg(type, eps),
                  float_arg(type, momentum)},
                 launch_range(c));
  launch_counted(apply, y,
                 {blob_arg(y, KernelAccess::kWrite), blob_arg(input, KernelAccess::kRead),
                  blob_arg(mean, KernelAccess::kRead), blob_arg(invstd, KernelAccess::kRead),
                  blob_or(wc, input, KernelAccess::kRead), blob_or(bc, input, KernelAccess::kRead),
                  int_arg(n), int_arg(c), int_arg(s), int_arg((*in)[0]), int_arg((*in)[1]),
                  int_arg((*in)[2]), int_arg((*out)[0]), int_arg((*out)[1]), int_arg((*out)[2])},
                 launch_range(s, c, n));
  if (!training) {  // the CPU's saved statistics in evaluation: empty
    return std::make_tuple(std::move(y), at::empty({0}, input.options()),
                           at::empty({0}, input.options()));
  }
  return std::make_tuple(std::move(y), std::move(mean), std::move(invstd));
}

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input,
    const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& running_mean_opt,
    const std::optional<at::Tensor>& running_var_opt,
    const std::optional<at::Tensor>& save_mean_opt,
    const std::optional<at::Tensor>& save_invstd_opt, bool train, double eps,
    std::array<bool, 3> output_mask) {
  const at::Tensor w = value_of(weight_opt);
  // The statistics the forward used: the saved ones in training, the running ones otherwise.
  const at::Tensor mean = train ? value_of(save_mean_opt) : value_of(running_mean_opt);
  const at::Tensor spread = train ? value_of(save_invstd_opt) : value_of(running_var_opt);
  const at::Tensor rm = value_of(running_mean_opt), rv = value_of(running_var_opt);
  const at::Tensor sm = value_of(save_mean_opt), si = value_of(save_invstd_opt);
  // The statistics the mode reads (evaluation's saved ones are empty, and unread).
  if (train) {
    check_given(input, {{"save_mean", &sm}, {"save_invstd", &si}}, "in training mode");
    check_per_channel(input, {{"weight", &w}, {"save_mean", &sm}, {"save_invstd", &si}});
  } else {
    check_given(input, {{"running_mean", &rm}, {"running_var", &rv}}, "in evaluation mode");
    check_per_channel(input, {{"weight", &w}, {"running_mean", &rm}, {"running_var", &rv}});
  }
  if (!native_input(input) || !grad_out.defined() || !operand(grad_out, input) ||
      !grad_out.sizes().equals(input.sizes()) || span_elements(grad_out) > kIndexMax ||
      !mean.defined() || !spread.defined() || (output_mask[1] && !w.defined())) {
    return std::nullopt;
  }
  const int64_t n = input.size(0), c = input.size(1), s = spatial_size(input);
  for (const at::Tensor* t : {&w, &mean, &spread}) {
    if (!operand(*t, input) || !vector_of(*t, c)) return std::nullopt;
  }
  const std::optional<std::array<int64_t, 3>> in = ncs_strides(input);
  const std::optional<std::array<int64_t, 3>> grad = ncs_strides(grad_out);
  if (!in || !grad) return std::nullopt;
  const at::ScalarType type = input.scalar_type();
  const c10::DeviceIndex device = input.device().index();
  const std::shared_ptr<const Kernel> reduce = channel_kernel(
      device, ChannelKernel::kBatchReduce, type, Variant{output_mask[1], output_mask[2], train});
  const std::shared_ptr<const Kernel> input_kernel =
      output_mask[0] ? channel_kernel(device, ChannelKernel::kBatchInput, type,
                                      Variant{w.defined(), false, train})
                     : nullptr;
  if (reduce == nullptr || (output_mask[0] && input_kernel == nullptr)) return std::nullopt;
  const at::Tensor mu = mean.contiguous(), r = spread.contiguous();
  const at::Tensor wc = w.defined() ? w.contiguous() : w;
  at::Tensor dx, dw, db;
  if (output_mask[1]) dw = at::empty({c}, input.options());
  if (output_mask[2]) db = at::empty({c}, input.options());
  at::Tensor sums = at::empty({3 * c}, input.options());
  launch_counted(reduce, sums,
                 {blob_arg(sums, KernelAccess::kWrite), blob_or(dw, input, KernelAccess::kWrite),
                  blob_or(db, input, KernelAccess::kWrite), blob_arg(grad_out, KernelAccess::kRead),
                  blob_arg(input, KernelAccess::kRead), blob_arg(mu, KernelAccess::kRead),
                  blob_arg(r, KernelAccess::kRead), int_arg(n), int_arg(c), int_arg(s),
                  int_arg((*in)[0]), int_arg((*in)[1]), int_arg((*in)[2]), int_arg((*grad)[0]),
                  int_arg((*grad)[1]), int_arg((*grad)[2]), float_arg(type, eps)},
                 launch_range(c));
  if (output_mask[0]) {
    dx = at::empty_like(input, input.suggest_memory_format());
    const std::optional<std::array<int64_t, 3>> out = ncs_strides(dx);
    if (!out) return std::nullopt;  // not reached: empty_like's layouts merge
    launch_counted(input_kernel, dx,
                   {blob_arg(dx, KernelAccess::kWrite), blob_arg(grad_out, KernelAccess::kRead),
                    blob_arg(input, KernelAccess::kRead), blob_arg(mu, KernelAccess::kRead),
                    blob_arg(sums, KernelAccess::kRead), blob_or(wc, sums, KernelAccess::kRead),
                    int_arg(n), int_arg(c), int_arg(s), int_arg((*in)[0]), int_arg((*in)[1]),
                    int_arg((*in)[2]), int_arg((*grad)[0]), int_arg((*grad)[1]),
                    int_arg((*grad)[2]),
                    int_arg((*out)[0]), int_arg((*out)[1]), int_arg((*out)[2])},
                   launch_range(s, c, n));
  }
  return std::make_tuple(std::move(dx), std::move(dw), std::move(db));
}

namespace {

// The (N, C, HxW, groups) of a group norm the native path takes; nullopt otherwise.
struct GroupShape {
  int64_t n, c, hw, groups;
  int64_t per_group() const { return c / groups; }
};

std::optional<GroupShape> group_shape(const at::Tensor& input, c10::SymInt n, c10::SymInt c,
                                      c10::SymInt hw, int64_t groups) {
  const std::optional<int64_t> n_ = n.maybe_as_int(), c_ = c.maybe_as_int(),
                               hw_ = hw.maybe_as_int();
  if (!n_ || !c_ || !hw_ || !native_input(input) ||
      input.suggest_memory_format() != at::MemoryFormat::Contiguous || groups < 1 ||
      *c_ % groups != 0 || input.size(0) != *n_ || input.size(1) != *c_ ||
      spatial_size(input) != *hw_ || *hw_ == 0) {
    return std::nullopt;
  }
  return GroupShape{*n_, *c_, *hw_, groups};
}

}  // namespace

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_group_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, c10::SymInt n, c10::SymInt c, c10::SymInt hw,
    int64_t groups, double eps) {
  const at::Tensor w = value_of(weight_opt), b = value_of(bias_opt);
  const std::optional<GroupShape> shape = group_shape(input, n, c, hw, groups);
  if (!shape) return std::nullopt;
  const GroupShape& g = *shape;
  for (const at::Tensor* t : {&w, &b}) {
    if (!operand(*t, input) || !vector_of(*t, g.c)) return std::nullopt;
  }
  const at::ScalarType type = input.scalar_type();
  const c10::DeviceIndex device = input.device().index();
  const Variant v{w.defined(), b.defined()};
  const std::shared_ptr<const Kernel> stats =
      channel_kernel(device, ChannelKernel::kGroupStats, type, Variant{});
  const std::shared_ptr<const Kernel> apply =
      channel_kernel(device, ChannelKernel::kGroupApply, type, v);
  if (stats == nullptr || apply == nullptr) return std::nullopt;
  const at::Tensor x = input.contiguous();
  const at::Tensor wc = w.defined() ? w.contiguous() : w, bc = b.defined() ? b.contiguous() : b;
  at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  at::Tensor mean = at::empty({g.n, groups}, input.options());
  at::Tensor rstd = at::empty({g.n, groups}, input.options());
  launch_counted(stats, mean,
                 {blob_arg(mean, KernelAccess::kWrite), blob_arg(rstd, KernelAccess::kWrite),
                  blob_arg(x, KernelAccess::kRead), int_arg(g.n * groups),
                  int_arg(g.per_group() * g.hw),
                  float_arg(type, eps)},
                 launch_range(g.n * groups));
  launch_counted(apply, y,
                 {blob_arg(y, KernelAccess::kWrite), blob_arg(x, KernelAccess::kRead),
                  blob_arg(mean, KernelAccess::kRead), blob_arg(rstd, KernelAccess::kRead),
                  blob_or(wc, x, KernelAccess::kRead), blob_or(bc, x, KernelAccess::kRead),
                  int_arg(g.hw), int_arg(g.c), int_arg(g.per_group()), int_arg(g.n)},
                 launch_range(g.hw, g.c, g.n));
  return std::make_tuple(std::move(y), std::move(mean), std::move(rstd));
}

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt, c10::SymInt n,
    c10::SymInt c, c10::SymInt hw, int64_t groups, std::array<bool, 3> output_mask) {
  const at::Tensor w = value_of(weight_opt);
  const std::optional<GroupShape> shape = group_shape(input, n, c, hw, groups);
  if (!shape || !grad_out.defined() || !operand(grad_out, input) ||
      !grad_out.sizes().equals(input.sizes()) || (output_mask[1] && !w.defined()) ||
      !operand(w, input) || !vector_of(w, shape->c)) {
    return std::nullopt;
  }
  const GroupShape& g = *shape;
  for (const at::Tensor* t : {&mean, &rstd}) {
    if (!t->defined() || !operand(*t, input) || t->numel() != g.n * groups) return std::nullopt;
  }
  const at::ScalarType type = input.scalar_type();
  const c10::DeviceIndex device = input.device().index();
  const Variant v{w.defined()};
  const std::shared_ptr<const Kernel> channels =
      channel_kernel(device, ChannelKernel::kGroupChannels, type, Variant{});
  const std::shared_ptr<const Kernel> rows =
      output_mask[0] ? channel_kernel(device, ChannelKernel::kGroupRows, type, v) : nullptr;
  const std::shared_ptr<const Kernel> input_kernel =
      output_mask[0] ? channel_kernel(device, ChannelKernel::kGroupInput, type, v) : nullptr;
  const std::shared_ptr<const Kernel> parameters =
      output_mask[1] || output_mask[2]
          ? channel_kernel(device, ChannelKernel::kGroupParameters, type,
                           Variant{output_mask[1], output_mask[2]})
          : nullptr;
  if (channels == nullptr || (output_mask[0] && (rows == nullptr || input_kernel == nullptr)) ||
      ((output_mask[1] || output_mask[2]) && parameters == nullptr)) {
    return std::nullopt;
  }
  const at::Tensor x = input.contiguous(), dy = grad_out.contiguous();
  const at::Tensor mu = mean.contiguous(), r = rstd.contiguous();
  const at::Tensor wc = w.defined() ? w.contiguous() : w;
  at::Tensor sums = at::empty({2 * g.n * g.c}, input.options());
  launch_counted(channels, sums,
                 {blob_arg(sums, KernelAccess::kWrite), blob_arg(dy, KernelAccess::kRead),
                  blob_arg(x, KernelAccess::kRead), int_arg(g.n * g.c), int_arg(g.hw)},
                 launch_range(g.n * g.c));
  at::Tensor dx, dw, db;
  if (output_mask[0]) {
    at::Tensor coef = at::empty({2 * g.n * groups}, input.options());
    launch_counted(rows, coef,
                   {blob_arg(coef, KernelAccess::kWrite), blob_arg(sums, KernelAccess::kRead),
                    blob_arg(mu, KernelAccess::kRead), blob_arg(r, KernelAccess::kRead),
                    blob_or(wc, sums, KernelAccess::kRead), int_arg(g.n * groups), int_arg(g.c),
                    int_arg(g.per_group()), int_arg(g.hw)},
                   launch_range(g.n * groups));
    dx = at::empty_like(x, at::MemoryFormat::Contiguous);
    launch_counted(input_kernel, dx,
                   {blob_arg(dx, KernelAccess::kWrite), blob_arg(dy, KernelAccess::kRead),
                    blob_arg(x, KernelAccess::kRead), blob_arg(r, KernelAccess::kRead),
                    blob_arg(coef, KernelAccess::kRead), blob_or(wc, sums, KernelAccess::kRead),
                    int_arg(g.hw), int_arg(g.c), int_arg(g.per_group()), int_arg(g.n)},
                   launch_range(g.hw, g.c, g.n));
  }
  if (parameters != nullptr) {
    if (output_mask[1]) dw = at::empty({g.c}, input.options());
    if (output_mask[2]) db = at::empty({g.c}, input.options());
    launch_counted(parameters, sums,
                   {blob_or(dw, sums, KernelAccess::kWrite),
                    blob_or(db, sums, KernelAccess::kWrite),
                    blob_arg(sums, KernelAccess::kRead), blob_arg(mu, KernelAccess::kRead),
                    blob_arg(r, KernelAccess::kRead), int_arg(g.n), int_arg(g.c),
                    int_arg(g.per_group())},
                   launch_range(g.c));
  }
  return std::make_tuple(std::move(dx), std::move(dw), std::move(db));
}

}  // namespace oclvm::torch_adapter
