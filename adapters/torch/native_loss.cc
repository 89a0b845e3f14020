// adapters/torch/native_loss.cc — nll_loss and its backward on the native path (cross_entropy's
// last step): generated OpenCL kernels that check each target on the device (native_kernels.h).

#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
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
#include "adapters/torch/native_launches.h"

namespace oclvm::torch_adapter {

// Note [Native nll_loss]
// ~~~~~~~~~~~~~~~~~~~~~~
// nll_loss_forward and nll_loss_backward of a float32 or float64 input of shape [N, C] with int64
// targets of shape [N] (or [C] with a zero-dimensional target), an optional weight of C elements,
// any reduction and ignore_index, every tensor on one native-path device, any strides; the results
// are contiguous, as the CPU's. They compute as the CPU's kernel does:
//   - A reduced forward (mean, sum) is one work-item walking the rows in order, with the CPU's
//     cascade of eight partial sums (level j's sum moves up to level j + 1 after row b when b is
//     a multiple of 2^(level_power * (j + 1)), level_power = max(4, ceil(log2 N) / 8)) for the
//     loss and for the weights, each added up from the first level; the mean divides once. The
//     values are the CPU's bits, as its loop is scalar.
//   - reduction='none' is one work-item per row, -x[i, t] * w[t]; total_weight is 0, as the CPU's.
//   - The backward writes every element of the gradient (one work-item each): zero, or at the
//     row's target -w[t] * grad (`none`), or w[t] * -(grad / total_weight) (mean) or
//     w[t] * -grad (sum), reading grad_output and total_weight on the device.
// A target that is neither ignore_index nor in [0, C) is an error found on the device (Note
// [Errors found on the device] in native_launches.cc): the next sync point throws the CPU's
// IndexError, "Target 7 is out of bounds.", and the results are not the CPU's.
//
// Not taken (the CPU kernel answers): other dtypes (float16, bfloat16), uint8 targets, empty
// inputs, other shapes (the CPU's errors among them), tensors on another device.

namespace {

constexpr int kTargetError = static_cast<int>(DeviceError::kTargetOutOfBounds);

enum class LossKernel : uint8_t { kReduced, kPerRow, kBackwardReduced, kBackwardPerRow };

// The CPU's levels of partial sums in nll_loss's reduced forward.
constexpr int kCascadeLevels = 8;

KernelSource loss_source(LossKernel kind, const std::string& t, bool weighted) {
  const std::string name = std::string("oclvm_nll_loss_") +
                           std::to_string(static_cast<int>(kind)) + "_" + t +
                           (weighted ? "_w" : "");
  std::string s;
  if (t == "double") s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  s += "#pragma OPENCL FP_CONTRACT OFF\n";
  s += kDeviceErrorSource;
  const std::string x = "OCLVM_PTR(" + t + ", x)";
  const std::string w = "OCLVM_PTR(" + t + ", w)";
  const std::string target = "OCLVM_PTR(long, target)";
  // Reports a target out of range; `then` follows in the same branch.
  const std::string check = "if (tg < 0 || tg >= classes) { oclvm_report(err_base, err_offset, " +
                            std::to_string(kTargetError) + ", tg, classes); ";
  s += "__kernel void " + name + "(";
  switch (kind) {
    case LossKernel::kReduced:
    case LossKernel::kPerRow:
      s += "OCLVM_BLOB(" + t + ", out), OCLVM_BLOB(" + t + ", total), ";
      break;
    case LossKernel::kBackwardReduced:
    case LossKernel::kBackwardPerRow:
      s += "OCLVM_BLOB(" + t + ", out), OCLVM_BLOB(" + t + ", go), OCLVM_BLOB(" + t +
           ", total), ";
      break;
  }
  s += "OCLVM_BLOB(" + t + ", x), OCLVM_BLOB(long, target), ";
  if (weighted) s += "OCLVM_BLOB(" + t + ", w), long sw, ";
  s += "OCLVM_BLOB(long, err), long rows, long classes, long sx0, long sx1, long st, long sgo, "
       "long ignore_index, int mean, long level_power) {\n";
  s += "  const ulong i = get_global_id(0);\n";
  switch (kind) {
    case LossKernel::kReduced: {
      const std::string levels = std::to_string(kCascadeLevels);
      s += "  if (i != 0) return;\n";
      s += "  " + t + " loss[" + levels + "], weights[" + levels + "];\n";
      s += "  for (int j = 0; j < " + levels + "; ++j) { loss[j] = 0; weights[j] = 0; }\n";
      s += "  long ignored = 0;\n  const long level_mask = ((long)1 << level_power) - 1;\n";
      s += "  for (long b = 0; b < rows; ++b) {\n";
      s += "    const long tg = " + target + "[b * st];\n";
      s += "    if (tg == ignore_index) { ++ignored; continue; }\n";
      s += "    " + check + "OCLVM_PTR(" + t + ", out)[0] = 0; OCLVM_PTR(" + t +
           ", total)[0] = 0; return; }\n";
      s += "    const " + t + " data = " + x + "[b * sx0 + tg * sx1];\n";
      s += weighted ? "    const " + t + " wv = " + w +
                          "[tg * sw];\n    loss[0] -= data * wv;\n    weights[0] += wv;\n"
                    : "    loss[0] -= data;\n";
      s += "    for (int j = 0; j + 1 < " + levels + "; ++j) {\n";
      s += "      if ((b & (level_mask << (j * level_power))) != 0) break;\n";
      s += "      weights[j + 1] += weights[j]; loss[j + 1] += loss[j];\n";
      s += "      weights[j] = 0; loss[j] = 0;\n    }\n  }\n";
      s += "  " + t + " total_weight = 0, value = 0;\n";
      s += weighted ? "  for (int j = 0; j < " + levels + "; ++j) total_weight += weights[j];\n"
                    : "  total_weight = (" + t + ")(rows - ignored);\n";
      s += "  for (int j = 0; j < " + levels + "; ++j) value += loss[j];\n";
      s += "  if (mean) value /= total_weight;\n";
      s += "  OCLVM_PTR(" + t + ", out)[0] = value;\n  OCLVM_PTR(" + t +
           ", total)[0] = total_weight;\n}\n";
      break;
    }
    case LossKernel::kPerRow:
      s += "  if (i >= (ulong)rows) return;\n";
      s += "  if (i == 0) OCLVM_PTR(" + t + ", total)[0] = 0;\n";
      s += "  const long tg = " + target + "[(long)i * st];\n";
      s += "  if (tg == ignore_index) { OCLVM_PTR(" + t + ", out)[i] = 0; return; }\n";
      s += "  " + check + "OCLVM_PTR(" + t + ", out)[i] = 0; return; }\n";
      s += "  OCLVM_PTR(" + t + ", out)[i] = -" + x + "[(long)i * sx0 + tg * sx1] * " +
           (weighted ? w + "[tg * sw]" : "(" + t + ")1") + ";\n}\n";
      break;
    case LossKernel::kBackwardReduced:
    case LossKernel::kBackwardPerRow:
      s += "  if (i >= (ulong)(rows * classes)) return;\n";
      s += "  const long row = (long)i / classes, c = (long)i % classes;\n";
      s += "  const long tg = " + target + "[row * st];\n";
      s += "  " + t + " v = 0;\n";
      s += "  if (tg != ignore_index) {\n";
      s += "    if (tg < 0 || tg >= classes) {\n";
      s += "      if (c == 0) oclvm_report(err_base, err_offset, " + std::to_string(kTargetError) +
           ", tg, classes);\n";
      s += "    } else if (c == tg) {\n";
      if (kind == LossKernel::kBackwardPerRow) {
        s += "      v = -" + (weighted ? w + "[tg * sw]" : "(" + t + ")1") + " * OCLVM_PTR(" + t +
             ", go)[row * sgo];\n";
      } else {
        s += "      const " + t + " g0 = OCLVM_PTR(" + t + ", go)[0];\n";
        s += "      const " + t + " g = -(mean ? g0 / OCLVM_PTR(" + t + ", total)[0] : g0);\n";
        s += weighted ? "      v = " + w + "[tg * sw] * g;\n" : "      v = g;\n";
      }
      s += "    }\n  }\n  OCLVM_PTR(" + t + ", out)[i] = v;\n}\n";
      break;
  }
  return KernelSource{std::move(s), name,
                      t == "float" ? "-cl-fp32-correctly-rounded-divide-sqrt" : ""};
}

// ceil(log2(n)) for n >= 1 (0 for 1, where the CPU's utils::CeilLog2 gives 1: level_power is 4
// either way).
int64_t ceil_log2(int64_t n) {
  int64_t bits = 0;
  while ((int64_t{1} << bits) < n) ++bits;
  return bits;
}

// The operands a call shares, checked: nullopt when the native path does not take it.
struct LossOperands {
  const char* type;
  bool weighted;
  int64_t rows, classes, sx0, sx1, st, sw, ignore_index;
};

std::optional<LossOperands> loss_operands(const at::Tensor& self, const at::Tensor& target,
                                          const std::optional<at::Tensor>& weight,
                                          int64_t reduction, const c10::SymInt& ignore) {
  if (!self.defined() || !target.defined() || !is_device(self) ||
      !native_kernels(self.device().index()) || self.layout() != at::kStrided ||
      self.is_conj() || self.is_neg() || self.numel() == 0 ||
      (self.scalar_type() != at::kFloat && self.scalar_type() != at::kDouble) ||
      target.device() != self.device() || target.scalar_type() != at::kLong ||
      target.layout() != at::kStrided || target.is_neg() || reduction < 0 || reduction > 2) {
    return std::nullopt;
  }
  const bool batched = self.dim() == 2 && target.dim() == 1 && target.size(0) == self.size(0);
  const bool single = self.dim() == 1 && target.dim() == 0;
  if (!batched && !single) return std::nullopt;  // other shapes, and the CPU's errors
  const bool weighted = weight.has_value() && weight->defined();
  if (weighted && (weight->device() != self.device() ||
                   weight->scalar_type() != self.scalar_type() || weight->dim() != 1 ||
                   weight->numel() != self.size(-1) || weight->layout() != at::kStrided ||
                   weight->is_conj() || weight->is_neg())) {
    return std::nullopt;
  }
  const std::optional<int64_t> ignore_index = ignore.maybe_as_int();
  if (!ignore_index) return std::nullopt;
  return LossOperands{cl_type(self.scalar_type()),
                      weighted,
                      batched ? self.size(0) : 1,
                      self.size(-1),
                      batched ? self.stride(0) : 0,
                      self.stride(-1),
                      batched ? target.stride(0) : 0,
                      weighted ? weight->stride(0) : 0,
                      *ignore_index};
}

std::shared_ptr<const Kernel> loss_kernel(const at::Tensor& self, LossKernel kind,
                                          const LossOperands& o) {
  const uint64_t id = (static_cast<uint64_t>(kind) << 2) |
                      (self.scalar_type() == at::kDouble ? 2u : 0u) | (o.weighted ? 1u : 0u);
  return native_kernel(self.device().index(), NativeKernelFamily::kLoss, id,
                       [&] { return loss_source(kind, o.type, o.weighted); });
}

// The arguments after the kernel's own outputs, in its order.
void add_operands(std::vector<LaunchArg>& args, const at::Tensor& self, const at::Tensor& target,
                  const std::optional<at::Tensor>& weight, const LossOperands& o,
                  int64_t grad_stride, bool mean) {
  args.push_back(blob_arg(self, KernelAccess::kRead));
  args.push_back(blob_arg(target, KernelAccess::kRead));
  if (o.weighted) {
    args.push_back(blob_arg(*weight, KernelAccess::kRead));
    args.push_back(LaunchArg::of(o.sw));
  }
  args.push_back(device_error_arg(self.device().index()));
  for (const int64_t v : {o.rows, o.classes, o.sx0, o.sx1, o.st, grad_stride, o.ignore_index}) {
    args.push_back(LaunchArg::of(v));
  }
  args.push_back(LaunchArg::of(static_cast<int32_t>(mean)));
  args.push_back(
      LaunchArg::of(std::max<int64_t>(4, ceil_log2(o.rows) / kCascadeLevels)));  // level_power
}

}  // namespace

std::optional<std::tuple<at::Tensor, at::Tensor>> native_nll_loss(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, const c10::SymInt& ignore_index) {
  const std::optional<LossOperands> o =
      loss_operands(self, target, weight, reduction, ignore_index);
  if (!o) return std::nullopt;
  const bool per_row = reduction == 0 && self.dim() == 2;  // at::Reduction::None
  const LossKernel kind = per_row ? LossKernel::kPerRow : LossKernel::kReduced;
  const std::shared_ptr<const Kernel> kernel = loss_kernel(self, kind, *o);
  if (kernel == nullptr) return std::nullopt;
  at::Tensor out = per_row ? at::empty({o->rows}, self.options()) : at::empty({}, self.options());
  at::Tensor total = at::empty({}, self.options());
  std::vector<LaunchArg> args{blob_arg(out, KernelAccess::kWrite),
                              blob_arg(total, KernelAccess::kWrite)};
  add_operands(args, self, target, weight, *o, 0, /*mean=*/reduction == 1);
  run_native_kernel(kernel, out, args, per_row ? static_cast<size_t>(o->rows) : 1);
  device_errors_submitted(self.device().index());
  count_native_launch();
  return std::make_tuple(std::move(out), std::move(total));
}

std::optional<at::Tensor> native_nll_loss_backward(const at::Tensor& grad_output,
                                                   const at::Tensor& self,
                                                   const at::Tensor& target,
                                                   const std::optional<at::Tensor>& weight,
                                                   int64_t reduction,
                                                   const c10::SymInt& ignore_index,
                                                   const at::Tensor& total_weight) {
  const std::optional<LossOperands> o =
      loss_operands(self, target, weight, reduction, ignore_index);
  if (!o) return std::nullopt;
  const bool per_row = reduction == 0 && self.dim() == 2;
  for (const at::Tensor* t : {&grad_output, &total_weight}) {
    if (!t->defined() || t->device() != self.device() ||
        t->scalar_type() != self.scalar_type() || t->layout() != at::kStrided ||
        t->is_conj() || t->is_neg()) {
      return std::nullopt;
    }
  }
  if (total_weight.numel() != 1 ||
      (per_row ? grad_output.dim() != 1 || grad_output.size(0) != o->rows
               : grad_output.dim() > 1 || grad_output.numel() != 1)) {
    return std::nullopt;  // the CPU's errors
  }
  const LossKernel kind = per_row ? LossKernel::kBackwardPerRow : LossKernel::kBackwardReduced;
  const std::shared_ptr<const Kernel> kernel = loss_kernel(self, kind, *o);
  if (kernel == nullptr) return std::nullopt;
  at::Tensor grad_input = at::empty(self.sizes(), self.options());  // contiguous, as the CPU's
  std::vector<LaunchArg> args{blob_arg(grad_input, KernelAccess::kWrite),
                              blob_arg(grad_output, KernelAccess::kRead),
                              blob_arg(total_weight, KernelAccess::kRead)};
  add_operands(args, self, target, weight, *o, per_row ? grad_output.stride(0) : 0,
               /*mean=*/reduction == 1);
  run_native_kernel(kernel, grad_input, args, static_cast<size_t>(grad_input.numel()));
  device_errors_submitted(self.device().index());
  count_native_launch();
  return grad_input;
}

}  // namespace oclvm::torch_adapter
