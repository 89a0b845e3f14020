// adapters/torch/native_pool.cc — two-dimensional pooling on the native path: max_pool2d with
// indices, avg_pool2d and adaptive_avg_pool2d, forward and backward, as generated OpenCL kernels
// (native_kernels.h).

#include <ATen/ops/_adaptive_avg_pool2d.h>
#include <ATen/ops/avg_pool2d.h>
#include <ATen/ops/avg_pool2d_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/max_pool2d_with_indices.h>
#include <ATen/ops/max_pool2d_with_indices_backward.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/native_kernel_table.h"
#include "adapters/torch/native_kernels.h"

namespace oclvm::torch_adapter {

// Note [Native pooling]
// ~~~~~~~~~~~~~~~~~~~~~
// max_pool2d_with_indices, avg_pool2d and _adaptive_avg_pool2d and their backward, float32 and
// float64, 3-d ([C, H, W]) and 4-d ([N, C, H, W]) inputs of any strides (contiguous and
// channels-last alike), one launch each. The results have the CPU's shapes and layouts: for the
// first two the call runs once on meta tensors, which makes the shapes and raises nothing but
// what the CPU's shared checks raise (such a call is left to the CPU kernel, which raises it);
// the adaptive pool's are computed here as the CPU computes them (its input's suggested memory
// format).
//
// Each forward is a work-item per output element walking its window in the CPU kernel's order:
//   - max: window rows ih0 = oh * sH - pH (raised by dH while negative) to
//     min(ih0 + (kH - 1) * dH + 1, H), columns alike; the first element greater than the running
//     maximum, or NaN, takes it (so the last NaN wins, as on the CPU), and the index is
//     ih * W + iw in the input's plane, starting at the window's first element;
//   - avg: the window clamped to the padded input gives pool_size, then clamped to the input; a
//     window with nothing left gives 0; the sum in the input's dtype divided by divisor_override,
//     pool_size (count_include_pad) or the clamped window's size;
//   - adaptive avg: rows floor(oh * H / OH) to ceil((oh + 1) * H / OH), the sum divided by the
//     rows, then by the columns.
// Each backward is a work-item per input element, gathering, in increasing (oh, ow), the outputs
// whose windows hold it: the max pool's whose index names it (the windows that can hold it,
// from the forward's geometry: the indices must be the forward's, as CUDA's gather assumes too;
// an index outside its window — a dilated window wholly in the padding, which torch's checks
// allow, gives its start — adds nothing, where the CPU's scatter writes wherever it points), each
// average's grad / divisor. The CPU's backward scatters in that order, so the sums add alike, with
// no atomics: the values are the CPU's bits, except the adaptive pool's in channels-last, where
// the CPU's vector lanes divide once by kh * kw (one rounding apart).
//
// Not taken (the CPU kernel answers): other dtypes, tensors on another device, empty tensors,
// the CPU's errors.

namespace {

enum class PoolKernel : uint8_t { kMax, kMaxBackward, kAvg, kAvgBackward, kAdaptive,
                                  kAdaptiveBackward };

// The geometry every pooling kernel takes, in its argument order.
struct Pool {
  int64_t n = 1, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

// The four strides of a 3-d or 4-d tensor as [N, C, H, W] (N's 0 for a 3-d one).
std::array<int64_t, 4> nchw_strides(const at::Tensor& t) {
  if (t.dim() == 3) return {0, t.stride(0), t.stride(1), t.stride(2)};
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

// The OpenCL C of `kind` for element type `t`. Tensors: `out` (the result, or the input's
// gradient), `idx` (the max pool's indices), `in` (the input, or the output's gradient for a
// backward); each with its [N, C, H, W] strides.
KernelSource pool_source(PoolKernel kind, const std::string& t) {
  const std::string name = "oclvm_pool_" + std::to_string(static_cast<int>(kind)) + "_" + t;
  std::string s;
  if (t == "double") s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  s += "#pragma OPENCL FP_CONTRACT OFF\n#define T " + t + "\n";
  s += "__kernel void " + name + R"((OCLVM_BLOB(T, out), OCLVM_BLOB(long, idx), OCLVM_BLOB(T, in),
    long N, long C, long H, long W, long OH, long OW, long kH, long kW, long sH, long sW,
    long pH, long pW, long dH, long dW, long o0, long o1, long o2, long o3, long x0, long x1,
    long x2, long x3, long i0, long i1, long i2, long i3, int count_pad, long divisor) {
)";
  const bool backward = kind == PoolKernel::kMaxBackward || kind == PoolKernel::kAvgBackward ||
                        kind == PoolKernel::kAdaptiveBackward;
  // The work-item's element: of the output for a forward, of the input for a backward.
  s += backward ? R"(  const long i = get_global_id(0);
  if (i >= N * C * H * W) return;
  const long iw = i % W, ih = (i / W) % H, c = (i / (W * H)) % C, n = i / (W * H * C);
)"
                : R"(  const long i = get_global_id(0);
  if (i >= N * C * OH * OW) return;
  const long ow = i % OW, oh = (i / OW) % OH, c = (i / (OW * OH)) % C, n = i / (OW * OH * C);
  __global const T* plane = OCLVM_PTR(T, in) + n * i0 + c * i1;
  const long at = n * o0 + c * o1 + oh * o2 + ow * o3;
)";
  switch (kind) {
    case PoolKernel::kMax:
      s += R"(  long ih0 = oh * sH - pH, iw0 = ow * sW - pW;
  const long ih1 = min(ih0 + (kH - 1) * dH + 1, H), iw1 = min(iw0 + (kW - 1) * dW + 1, W);
  while (ih0 < 0) ih0 += dH;
  while (iw0 < 0) iw0 += dW;
  long best = ih0 * W + iw0;
  T value = -INFINITY;
  for (long y = ih0; y < ih1; y += dH) {
    for (long x = iw0; x < iw1; x += dW) {
      const T v = plane[y * i2 + x * i3];
      if (v > value || isnan(v)) { value = v; best = y * W + x; }
    }
  }
  OCLVM_PTR(T, out)[at] = value;
  OCLVM_PTR(long, idx)[n * x0 + c * x1 + oh * x2 + ow * x3] = best;
}
)";
      break;
    case PoolKernel::kAvg:
      s += R"(  long ih0 = oh * sH - pH, iw0 = ow * sW - pW;
  long ih1 = min(ih0 + kH, H + pH), iw1 = min(iw0 + kW, W + pW);
  const long pool_size = (ih1 - ih0) * (iw1 - iw0);
  ih0 = max(ih0, (long)0); iw0 = max(iw0, (long)0);
  ih1 = min(ih1, H); iw1 = min(iw1, W);
  if (ih0 >= ih1 || iw0 >= iw1) { OCLVM_PTR(T, out)[at] = 0; return; }
  T sum = 0;
  for (long y = ih0; y < ih1; ++y) {
    for (long x = iw0; x < iw1; ++x) sum += plane[y * i2 + x * i3];
  }
  const long factor = divisor != 0 ? divisor : count_pad ? pool_size : (ih1 - ih0) * (iw1 - iw0);
  OCLVM_PTR(T, out)[at] = sum / (T)factor;
}
)";
      break;
    case PoolKernel::kAdaptive:
      s += R"(  const long ih0 = (oh * H) / OH, ih1 = ((oh + 1) * H + OH - 1) / OH;
  const long iw0 = (ow * W) / OW, iw1 = ((ow + 1) * W + OW - 1) / OW;
  T sum = 0;
  for (long y = ih0; y < ih1; ++y) {
    for (long x = iw0; x < iw1; ++x) sum += plane[y * i2 + x * i3];
  }
  OCLVM_PTR(T, out)[at] = sum / (T)(ih1 - ih0) / (T)(iw1 - iw0);
}
)";
      break;
    case PoolKernel::kMaxBackward:
      // The outputs whose windows can hold (ih, iw): oh * sH - pH <= ih <= that + (kH - 1) * dH.
      s += R"(  const long target = ih * W + iw;
  const long ry = ih + pH - (kH - 1) * dH, rx = iw + pW - (kW - 1) * dW;
  const long oh0 = ry <= 0 ? 0 : (ry + sH - 1) / sH, ow0 = rx <= 0 ? 0 : (rx + sW - 1) / sW;
  const long oh1 = min((ih + pH) / sH, OH - 1), ow1 = min((iw + pW) / sW, OW - 1);
  T sum = 0;
  for (long y = oh0; y <= oh1; ++y) {
    for (long x = ow0; x <= ow1; ++x) {
      if (OCLVM_PTR(long, idx)[n * x0 + c * x1 + y * x2 + x * x3] == target) {
        sum += OCLVM_PTR(T, in)[n * i0 + c * i1 + y * i2 + x * i3];
      }
    }
  }
  OCLVM_PTR(T, out)[n * o0 + c * o1 + ih * o2 + iw * o3] = sum;
}
)";
      break;
    case PoolKernel::kAvgBackward:
      // The outputs whose windows hold (ih, iw): oh * sH - pH <= ih < that + kH.
      s += R"(  const long ry = ih + pH - kH + 1, rx = iw + pW - kW + 1;
  const long oh0 = ry <= 0 ? 0 : (ry + sH - 1) / sH, ow0 = rx <= 0 ? 0 : (rx + sW - 1) / sW;
  const long oh1 = min((ih + pH) / sH, OH - 1), ow1 = min((iw + pW) / sW, OW - 1);
  T sum = 0;
  for (long y = oh0; y <= oh1; ++y) {
    for (long x = ow0; x <= ow1; ++x) {
      long ih0 = y * sH - pH, iw0 = x * sW - pW;
      long ih1 = min(ih0 + kH, H + pH), iw1 = min(iw0 + kW, W + pW);
      const long pool_size = (ih1 - ih0) * (iw1 - iw0);
      ih0 = max(ih0, (long)0); iw0 = max(iw0, (long)0);
      ih1 = min(ih1, H); iw1 = min(iw1, W);
      const long factor =
          divisor != 0 ? divisor : count_pad ? pool_size : (ih1 - ih0) * (iw1 - iw0);
      const T delta = OCLVM_PTR(T, in)[n * i0 + c * i1 + y * i2 + x * i3] / (T)factor;
      sum += delta;
    }
  }
  OCLVM_PTR(T, out)[n * o0 + c * o1 + ih * o2 + iw * o3] = sum;
}
)";
      break;
    case PoolKernel::kAdaptiveBackward:
      // The outputs whose windows hold ih: floor(oh * H / OH) <= ih < ceil((oh + 1) * H / OH).
      s += R"(  T sum = 0;
  for (long y = (ih * OH) / H; y < OH && (y * H) / OH <= ih; ++y) {
    const long ih0 = (y * H) / OH, ih1 = ((y + 1) * H + OH - 1) / OH;
    if (ih >= ih1) continue;
    for (long x = (iw * OW) / W; x < OW && (x * W) / OW <= iw; ++x) {
      const long iw0 = (x * W) / OW, iw1 = ((x + 1) * W + OW - 1) / OW;
      if (iw >= iw1) continue;
      const T delta = OCLVM_PTR(T, in)[n * i0 + c * i1 + y * i2 + x * i3] / (T)(ih1 - ih0) /
                      (T)(iw1 - iw0);
      sum += delta;
    }
  }
  OCLVM_PTR(T, out)[n * o0 + c * o1 + ih * o2 + iw * o3] = sum;
}
)";
      break;
  }
  return KernelSource{std::move(s), name,
                      t == "float" ? "-cl-fp32-correctly-rounded-divide-sqrt" : ""};
}

// Whether the native path takes `t` as a pooling operand on `like`'s device and dtype (`like`
// itself: a float32 or float64 tensor of a native-path device).
bool operand(const at::Tensor& t, const at::Tensor& like) {
  if (!t.defined() || !is_device(t) || t.layout() != at::kStrided || t.is_conj() || t.is_neg() ||
      t.numel() == 0 || (t.dim() != 3 && t.dim() != 4)) {
    return false;
  }
  if (&t == &like) {
    const at::ScalarType type = t.scalar_type();
    return native_kernels(t.device().index()) &&
           (type == at::kFloat || (type == at::kDouble && native_float64(t.device().index())));
  }
  return t.device() == like.device() && t.scalar_type() == like.scalar_type() &&
         t.dim() == like.dim();
}

// A meta tensor of `t`'s sizes, strides and dtype: what the shared meta functions check.
at::Tensor meta_of(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
}

// A device tensor laid out as the meta tensor `meta`, with `like`'s options.
at::Tensor empty_as(const at::Tensor& meta, const at::TensorOptions& like) {
  return at::empty_strided(meta.sizes(), meta.strides(), like);
}

// The geometry of a pooling call over `input` with output [.., OH, OW].
Pool geometry(const at::Tensor& input, int64_t oh, int64_t ow) {
  Pool p;
  p.n = input.dim() == 4 ? input.size(0) : 1;
  p.c = input.size(-3);
  p.h = input.size(-2);
  p.w = input.size(-1);
  p.oh = oh;
  p.ow = ow;
  return p;
}

// A [kH, kW] pair of an int[2] argument that may hold one value (torch's int[2]); `fallback` for
// an empty one (stride defaults to the kernel).
std::pair<int64_t, int64_t> pair_of(at::IntArrayRef v, std::pair<int64_t, int64_t> fallback) {
  if (v.empty()) return fallback;
  return {v[0], v.size() == 1 ? v[0] : v[1]};
}

// geometry() with the window: torch's one-or-two-element size lists, an empty stride meaning the
// kernel size. The meta call has already checked them.
Pool window_geometry(const at::Tensor& input, int64_t oh, int64_t ow, at::IntArrayRef kernel_size,
                     at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
  Pool p = geometry(input, oh, ow);
  std::tie(p.kh, p.kw) = pair_of(kernel_size, {1, 1});
  std::tie(p.sh, p.sw) = pair_of(stride, {p.kh, p.kw});
  std::tie(p.ph, p.pw) = pair_of(padding, {0, 0});
  std::tie(p.dh, p.dw) = pair_of(dilation, {1, 1});
  return p;
}

// Launches `kind` over `work` work-items; false when the device cannot build it.
bool launch_pool(PoolKernel kind, const at::Tensor& out, const at::Tensor& idx,
                 const at::Tensor& in, const Pool& p, int64_t work, bool count_pad = false,
                 int64_t divisor = 0) {
  const at::ScalarType type = out.scalar_type();
  const uint64_t id = (static_cast<uint64_t>(kind) << 1) | (type == at::kDouble ? 1u : 0u);
  const std::shared_ptr<const Kernel> kernel =
      native_kernel(out.device().index(), NativeKernelFamily::kPool, id,
                    [&] { return pool_source(kind, cl_type(type)); });
  if (kernel == nullptr) return false;
  const bool writes_idx = kind == PoolKernel::kMax;
  std::vector<LaunchArg> args{
      blob_arg(out, KernelAccess::kWrite),
      blob_arg(idx.defined() ? idx : in,
               writes_idx ? KernelAccess::kWrite : KernelAccess::kRead),
      blob_arg(in, KernelAccess::kRead)};
  for (const int64_t v : {p.n, p.c, p.h, p.w, p.oh, p.ow, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw,
                          p.dh, p.dw}) {
    args.push_back(LaunchArg::of(v));
  }
  const at::Tensor& indexed = idx.defined() ? idx : out;
  for (const at::Tensor* t : {&out, &indexed, &in}) {
    for (const int64_t s : nchw_strides(*t)) args.push_back(LaunchArg::of(s));
  }
  args.push_back(LaunchArg::of(static_cast<int32_t>(count_pad)));
  args.push_back(LaunchArg::of(divisor));
  launch_counted(kernel, out, args, launch_range(work));
  return true;
}

}  // namespace

std::optional<std::tuple<at::Tensor, at::Tensor>> native_max_pool2d_with_indices(
    const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  if (!operand(self, self)) return std::nullopt;
  at::Tensor meta_out, meta_idx;
  try {
    std::tie(meta_out, meta_idx) = at::max_pool2d_with_indices(meta_of(self), kernel_size, stride,
                                                               padding, dilation, ceil_mode);
  } catch (const c10::Error&) {
    return std::nullopt;  // the CPU kernel raises it
  }
  const Pool p = window_geometry(self, meta_out.size(-2), meta_out.size(-1), kernel_size, stride,
                                padding, dilation);
  at::Tensor out = empty_as(meta_out, self.options());
  at::Tensor idx = empty_as(meta_idx, self.options().dtype(at::kLong));
  if (out.numel() != 0 &&
      !launch_pool(PoolKernel::kMax, out, idx, self, p, out.numel())) {
    return std::nullopt;
  }
  return std::make_tuple(std::move(out), std::move(idx));
}

std::optional<at::Tensor> native_max_pool2d_with_indices_backward(
    const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
    const at::Tensor& indices) {
  if (!operand(self, self) || !operand(grad_output, self) || !indices.defined() ||
      !is_device(indices) || indices.device() != self.device() ||
      indices.scalar_type() != at::kLong || indices.layout() != at::kStrided ||
      indices.sizes() != grad_output.sizes()) {
    return std::nullopt;
  }
  at::Tensor meta_grad;
  try {
    meta_grad = at::max_pool2d_with_indices_backward(meta_of(grad_output), meta_of(self),
                                                     kernel_size, stride, padding, dilation,
                                                     ceil_mode, meta_of(indices));
  } catch (const c10::Error&) {
    return std::nullopt;
  }
  const Pool p = window_geometry(self, grad_output.size(-2), grad_output.size(-1), kernel_size,
                                stride, padding, dilation);
  at::Tensor grad_input = empty_as(meta_grad, self.options());
  if (!launch_pool(PoolKernel::kMaxBackward, grad_input, indices, grad_output, p,
                   grad_input.numel())) {
    return std::nullopt;
  }
  return grad_input;
}

std::optional<at::Tensor> native_avg_pool2d(const at::Tensor& self, at::IntArrayRef kernel_size,
                                            at::IntArrayRef stride, at::IntArrayRef padding,
                                            bool ceil_mode, bool count_include_pad,
                                            std::optional<int64_t> divisor_override) {
  if (!operand(self, self)) return std::nullopt;
  at::Tensor meta_out;
  try {
    meta_out = at::avg_pool2d(meta_of(self), kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override);
  } catch (const c10::Error&) {
    return std::nullopt;
  }
  const Pool p = window_geometry(self, meta_out.size(-2), meta_out.size(-1), kernel_size, stride,
                                padding, {});
  at::Tensor out = empty_as(meta_out, self.options());
  if (out.numel() != 0 &&
      !launch_pool(PoolKernel::kAvg, out, at::Tensor(), self, p, out.numel(), count_include_pad,
                   divisor_override.value_or(0))) {
    return std::nullopt;
  }
  return out;
}

std::optional<at::Tensor> native_avg_pool2d_backward(
    const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
    at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
    std::optional<int64_t> divisor_override) {
  if (!operand(self, self) || !operand(grad_output, self)) return std::nullopt;
  at::Tensor meta_grad;
  try {
    meta_grad = at::avg_pool2d_backward(meta_of(grad_output), meta_of(self), kernel_size, stride,
                                        padding, ceil_mode, count_include_pad, divisor_override);
  } catch (const c10::Error&) {
    return std::nullopt;
  }
  const Pool p = window_geometry(self, grad_output.size(-2), grad_output.size(-1), kernel_size,
                                stride, padding, {});
  at::Tensor grad_input = empty_as(meta_grad, self.options());
  if (!launch_pool(PoolKernel::kAvgBackward, grad_input, at::Tensor(), grad_output, p,
                   grad_input.numel(), count_include_pad, divisor_override.value_or(0))) {
    return std::nullopt;
  }
  return grad_input;
}

std::optional<at::Tensor> native_adaptive_avg_pool2d(const at::Tensor& self,
                                                     c10::SymIntArrayRef output_size) {
  if (!operand(self, self) || output_size.size() != 2) return std::nullopt;
  const std::optional<int64_t> oh = output_size[0].maybe_as_int();
  const std::optional<int64_t> ow = output_size[1].maybe_as_int();
  if (!oh || !ow || *oh <= 0 || *ow <= 0) return std::nullopt;  // the CPU's errors
  const Pool p = geometry(self, *oh, *ow);
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  sizes[sizes.size() - 2] = *oh;
  sizes[sizes.size() - 1] = *ow;
  at::Tensor out =
      at::empty(sizes, self.options().memory_format(self.suggest_memory_format()));
  if (!launch_pool(PoolKernel::kAdaptive, out, at::Tensor(), self, p, out.numel())) {
    return std::nullopt;
  }
  return out;
}

std::optional<at::Tensor> native_adaptive_avg_pool2d_backward(const at::Tensor& grad_output,
                                                              const at::Tensor& self) {
  if (!operand(self, self) || !operand(grad_output, self) ||
      grad_output.sizes().slice(0, grad_output.dim() - 2) !=
          self.sizes().slice(0, self.dim() - 2)) {
    return std::nullopt;
  }
  const Pool p = geometry(self, grad_output.size(-2), grad_output.size(-1));
  at::Tensor grad_input =
      at::empty(self.sizes(), self.options().memory_format(self.suggest_memory_format()));
  if (!launch_pool(PoolKernel::kAdaptiveBackward, grad_input, at::Tensor(), grad_output, p,
                   grad_input.numel())) {
    return std::nullopt;
  }
  return grad_input;
}

}  // namespace oclvm::torch_adapter
