// adapters/torch/native_norm.cc — layer norm and its backward on the native path: generated OpenCL
// kernels over the rows of the normalised shape (native_kernels.h).

#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>
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
#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"

namespace oclvm::torch_adapter {

// Note [Native layer norm]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// native_layer_norm and native_layer_norm_backward of float32 or float64 tensors on a native-path
// device, as the CPU's kernels compute them, with the input seen as M rows of N elements (N the
// normalised shape's size; a non-contiguous input is made contiguous first, as the CPU does):
//   forward, one work-item per row: the mean, then the population variance from the deviations,
//     each a compensated sum (Kahan's, dropped once it is not finite) so that its error does not
//     grow with N or with the row's offset; rstd = 1 / sqrt(max(var, 0) + eps) (correctly
//     rounded); y = ((x - mean) * rstd) * w + b, without w or b where they are absent, each
//     operation rounded on its own as in the CPU's float kernel; mean and rstd are kept (shape:
//     the leading dimensions, then a 1 per normalised one);
//   backward, one work-item per row for dx: ds = sum((dy * w) * x), db = sum(dy * w), then
//     dx = rstd * dy * w + ((db * mean - ds) * rstd^3 / N) * x + c, c as the CPU forms it; and one
//     work-item per column for dw = sum over rows of dy * (rstd * x + (-rstd * mean)) and
//     db = sum of dy. The products associate as the CPU's kernel writes them, and fuse where its
//     compiled code does (db * mean - ds, and dw's terms), so that terms that cancel or leave a
//     residue there (a row of one element, where rstd is 1 / sqrt(eps)) do the same here.
// The CPU's mean and variance are Welford's, its sums vectorised: the values agree to float
// rounding, not to the bit. Not taken: other dtypes, mixed dtypes or devices, a shape the CPU
// refuses, an empty input, a gradient asked of an absent weight or bias.

namespace {

enum class NormKernel : uint64_t { kForward, kBackwardInput, kBackwardParameters };

// The kernel `which` for `type`, with or without weight (`w`) and bias (`b`).
std::shared_ptr<const Kernel> norm_kernel(c10::DeviceIndex device, NormKernel which,
                                          at::ScalarType type, bool w, bool b) {
  const uint64_t id = (uint64_t{1} << 40) | (static_cast<uint64_t>(which) << 16) |
                      (static_cast<uint64_t>(type) << 8) | (uint64_t{w} << 1) | uint64_t{b};
  return native_kernel(device, NativeKernelFamily::kReduction, id, [&] {
    const std::string t = cl_type(type);
    const std::string suffix = t + (w ? "_w" : "") + (b ? "_b" : "");
    std::string s;
    if (type == at::kDouble) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
    s += "#pragma OPENCL FP_CONTRACT OFF\n";
    const std::string blob = "OCLVM_BLOB(" + t + ", ";
    const auto ptr = [&](const char* name) { return "OCLVM_PTR(" + t + ", " + name + ")"; };
    std::string name;
    if (which == NormKernel::kForward) {
      name = "oclvm_layer_norm_" + suffix;
      s += "__kernel void " + name + "(" + blob + "y), " + blob + "mean), " + blob + "rstd), " +
           blob + "x), " + (w ? blob + "w), " : "") + (b ? blob + "b), " : "") + "ulong m, ulong n, " +
           t + " eps) {\n";
      s += "  const ulong i = get_global_id(0);\n  if (i >= m) return;\n";
      s += "  const __global " + t + "* xr = " + ptr("x") + " + i * n;\n";
      s += "  __global " + t + "* yr = " + ptr("y") + " + i * n;\n";
      // Both sums compensated (Kahan's, dropped once not finite), so their error does not grow
      // with the row's length or its offset.
      const auto kahan = [&](const std::string& total, const std::string& term) {
        s += "  " + t + " " + total + " = 0;\n  {\n    " + t + " c = 0;\n";
        s += "    for (ulong j = 0; j < n; ++j) {\n      const " + t + " y = " + term +
             " - c;\n      const " + t + " u = " + total + " + y;\n";
        s += "      c = isfinite(u) ? (u - " + total + ") - y : (" + t + ")0;\n      " + total +
             " = u;\n    }\n  }\n";
      };
      kahan("sum", "xr[j]");
      s += "  const " + t + " mu = sum / (" + t + ")n;\n";
      kahan("sq", "(xr[j] - mu) * (xr[j] - mu)");
      s += "  const " + t + " var = fmax(sq / (" + t + ")n, (" + t + ")0);\n";
      s += "  const " + t + " r = (" + t + ")1 / sqrt(var + eps);\n";
      s += "  " + ptr("mean") + "[i] = mu;\n  " + ptr("rstd") + "[i] = r;\n";
      s += "  for (ulong j = 0; j < n; ++j) {\n    " + t + " v = (xr[j] - mu) * r;\n";
      if (w) s += "    v = v * " + ptr("w") + "[j];\n";
      if (b) s += "    v = v + " + ptr("b") + "[j];\n";
      s += "    yr[j] = v;\n  }\n}\n";
    } else if (which == NormKernel::kBackwardInput) {
      name = "oclvm_layer_norm_backward_input_" + suffix;
      s += "__kernel void " + name + "(" + blob + "dx), " + blob + "dy), " + blob + "x), " + blob +
           "mean), " + blob + "rstd), " + (w ? blob + "w), " : "") + "ulong m, ulong n) {\n";
      s += "  const ulong i = get_global_id(0);\n  if (i >= m) return;\n";
      s += "  const __global " + t + "* xr = " + ptr("x") + " + i * n;\n";
      s += "  const __global " + t + "* gr = " + ptr("dy") + " + i * n;\n";
      s += "  __global " + t + "* dr = " + ptr("dx") + " + i * n;\n";
      const std::string wj = w ? " * " + ptr("w") + "[j]" : "";
      s += "  " + t + " ds = 0, db = 0;\n";
      s += "  for (ulong j = 0; j < n; ++j) { const " + t + " g = gr[j]" + wj +
           "; ds += g * xr[j]; db += g; }\n";
      s += "  const " + t + " mu = " + ptr("mean") + "[i], a = " + ptr("rstd") + "[i];\n";
      s += "  const " + t + " scale = (" + t + ")1 / (" + t + ")n;\n";
      s += "  const " + t + " bb = fma(db, mu, -ds) * a * a * a * scale;\n";
      s += "  const " + t + " c = -bb * mu - db * a * scale;\n";
      const std::string ady = w ? "a * gr[j] * " + ptr("w") + "[j]" : "a * gr[j]";
      s += "  for (ulong j = 0; j < n; ++j) dr[j] = " + ady + " + bb * xr[j] + c;\n}\n";
    } else {
      name = "oclvm_layer_norm_backward_parameters_" + suffix;
      s += "__kernel void " + name + "(" + (w ? blob + "dw), " : "") + (b ? blob + "db), " : "") +
           blob + "dy), " + blob + "x), " + blob + "mean), " + blob + "rstd), ulong m, ulong n) {\n";
      s += "  const ulong j = get_global_id(0);\n  if (j >= n) return;\n";
      s += "  " + t + " sw = 0, sb = 0;\n";
      s += "  for (ulong i = 0; i < m; ++i) {\n";
      s += "    const " + t + " g = " + ptr("dy") + "[i * n + j];\n";
      if (w) {  // (x - mean) * rstd as the CPU forms it: rstd * x + (-rstd * mean)
        s += "    const " + t + " a = " + ptr("rstd") + "[i], shift = -a * " + ptr("mean") +
             "[i];\n";
        s += "    sw = fma(g, fma(a, " + ptr("x") + "[i * n + j], shift), sw);\n";
      }
      s += "    sb += g;\n  }\n";
      if (w) s += "  " + ptr("dw") + "[j] = sw;\n";
      if (b) s += "  " + ptr("db") + "[j] = sb;\n";
      s += "}\n";
    }
    const char* options = type == at::kFloat ? "-cl-fp32-correctly-rounded-divide-sqrt" : "";
    return KernelSource{std::move(s), std::move(name), options};
  });
}

void run_launch(const std::shared_ptr<const Kernel>& kernel, const at::Tensor& on,
                const std::vector<LaunchArg>& args, uint64_t work_items) {
  run_native_kernel(kernel, on, args, static_cast<size_t>(work_items));
  count_native_launch();
}

// A float tensor of the native path on `device` with `type` (an absent one passes).
bool norm_operand(const at::Tensor& t, c10::DeviceIndex device, at::ScalarType type) {
  return !t.defined() || (is_device(t) && t.device().index() == device &&
                          t.layout() == at::kStrided && !t.is_conj() && !t.is_neg() &&
                          t.scalar_type() == type);
}

// The rows (M) and their length (N) of `input` under `normalized_shape`; nullopt for a call the
// CPU refuses or this path does not take (then nothing has happened).
std::optional<std::pair<int64_t, int64_t>> rows_of(const at::Tensor& input,
                                                   at::IntArrayRef normalized_shape,
                                                   const at::Tensor& weight,
                                                   const at::Tensor& bias) {
  if (!input.defined() || !is_device(input)) return std::nullopt;
  const c10::DeviceIndex device = input.device().index();
  const at::ScalarType type = input.scalar_type();
  if (!native_kernels(device) || (type != at::kFloat && type != at::kDouble) ||
      (type == at::kDouble && !native_float64(device)) || !norm_operand(input, device, type) ||
      !norm_operand(weight, device, type) || !norm_operand(bias, device, type)) {
    return std::nullopt;
  }
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  if (k == 0 || input.dim() < k) return std::nullopt;
  int64_t n = 1;
  for (int64_t d = 0; d < k; ++d) {
    if (input.size(input.dim() - k + d) != normalized_shape[d]) return std::nullopt;
    n *= normalized_shape[d];
  }
  for (const at::Tensor* p : {&weight, &bias}) {
    if (p->defined() && !p->sizes().equals(normalized_shape)) return std::nullopt;
  }
  if (n == 0 || input.numel() == 0) return std::nullopt;
  return std::make_pair(input.numel() / n, n);
}

// mean's and rstd's shape: the input's leading dimensions, then a 1 per normalised one.
std::vector<int64_t> stat_shape(const at::Tensor& input, size_t normalized) {
  std::vector<int64_t> shape = input.sizes().vec();
  for (size_t d = shape.size() - normalized; d < shape.size(); ++d) shape[d] = 1;
  return shape;
}

}  // namespace

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_layer_norm(
    const at::Tensor& input, c10::SymIntArrayRef normalized,
    const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& bias_opt,
    double eps) {
  const std::optional<at::IntArrayRef> normalized_shape = c10::asIntArrayRefSlowOpt(normalized);
  if (!normalized_shape) return std::nullopt;  // symbolic sizes
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const std::optional<std::pair<int64_t, int64_t>> rows =
      rows_of(input, *normalized_shape, weight, bias);
  if (!rows) return std::nullopt;
  const auto [m, n] = *rows;
  const at::ScalarType type = input.scalar_type();
  const std::shared_ptr<const Kernel> kernel = norm_kernel(
      input.device().index(), NormKernel::kForward, type, weight.defined(), bias.defined());
  if (kernel == nullptr) return std::nullopt;
  const at::Tensor x = input.contiguous();
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  at::Tensor y = at::empty(input.sizes(), input.options());
  const std::vector<int64_t> shape = stat_shape(input, normalized_shape->size());
  at::Tensor mean = at::empty(shape, input.options()), rstd = at::empty(shape, input.options());
  std::vector<LaunchArg> args{blob_arg(y, KernelAccess::kWrite),
                              blob_arg(mean, KernelAccess::kWrite),
                              blob_arg(rstd, KernelAccess::kWrite),
                              blob_arg(x, KernelAccess::kRead)};
  if (w.defined()) args.push_back(blob_arg(w, KernelAccess::kRead));
  if (b.defined()) args.push_back(blob_arg(b, KernelAccess::kRead));
  args.push_back(LaunchArg::of(static_cast<uint64_t>(m)));
  args.push_back(LaunchArg::of(static_cast<uint64_t>(n)));
  args.push_back(type == at::kFloat ? LaunchArg::of(static_cast<float>(eps)) : LaunchArg::of(eps));
  run_launch(kernel, y, args, static_cast<uint64_t>(m));
  return std::make_tuple(std::move(y), std::move(mean), std::move(rstd));
}

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, std::array<bool, 3> output_mask) {
  const std::optional<at::IntArrayRef> normalized_shape = c10::asIntArrayRefSlowOpt(normalized);
  if (!normalized_shape) return std::nullopt;
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const std::optional<std::pair<int64_t, int64_t>> rows =
      rows_of(input, *normalized_shape, weight, bias);
  if (!rows || (output_mask[1] && !weight.defined()) || (output_mask[2] && !bias.defined())) {
    return std::nullopt;
  }
  const auto [m, n] = *rows;
  const c10::DeviceIndex device = input.device().index();
  const at::ScalarType type = input.scalar_type();
  for (const at::Tensor* t : {&grad_out, &mean, &rstd}) {
    if (!t->defined() || !norm_operand(*t, device, type)) return std::nullopt;
  }
  if (!grad_out.sizes().equals(input.sizes()) || mean.numel() != m || rstd.numel() != m) {
    return std::nullopt;
  }
  std::shared_ptr<const Kernel> input_kernel, parameters_kernel;
  if (output_mask[0]) {
    input_kernel = norm_kernel(device, NormKernel::kBackwardInput, type, weight.defined(), false);
    if (input_kernel == nullptr) return std::nullopt;
  }
  if (output_mask[1] || output_mask[2]) {
    parameters_kernel =
        norm_kernel(device, NormKernel::kBackwardParameters, type, output_mask[1], output_mask[2]);
    if (parameters_kernel == nullptr) return std::nullopt;
  }
  const at::Tensor x = input.contiguous(), dy = grad_out.contiguous();
  const at::Tensor mu = mean.contiguous(), r = rstd.contiguous();
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  at::Tensor dx, dw, db;
  if (output_mask[0]) {
    dx = at::empty(input.sizes(), input.options());
    std::vector<LaunchArg> args{blob_arg(dx, KernelAccess::kWrite),
                                blob_arg(dy, KernelAccess::kRead), blob_arg(x, KernelAccess::kRead),
                                blob_arg(mu, KernelAccess::kRead),
                                blob_arg(r, KernelAccess::kRead)};
    if (w.defined()) args.push_back(blob_arg(w, KernelAccess::kRead));
    args.push_back(LaunchArg::of(static_cast<uint64_t>(m)));
    args.push_back(LaunchArg::of(static_cast<uint64_t>(n)));
    run_launch(input_kernel, dx, args, static_cast<uint64_t>(m));
  }
  if (parameters_kernel != nullptr) {
    std::vector<LaunchArg> args;
    if (output_mask[1]) {
      dw = at::empty(weight.sizes(), weight.options());
      args.push_back(blob_arg(dw, KernelAccess::kWrite));
    }
    if (output_mask[2]) {
      db = at::empty(bias.sizes(), bias.options());
      args.push_back(blob_arg(db, KernelAccess::kWrite));
    }
    for (const at::Tensor* t : {&dy, &x, &mu, &r}) args.push_back(blob_arg(*t, KernelAccess::kRead));
    args.push_back(LaunchArg::of(static_cast<uint64_t>(m)));
    args.push_back(LaunchArg::of(static_cast<uint64_t>(n)));
    run_launch(parameters_kernel, output_mask[1] ? dw : db, args, static_cast<uint64_t>(n));
  }
  return std::make_tuple(std::move(dx), std::move(dw), std::move(db));
}

}  // namespace oclvm::torch_adapter
