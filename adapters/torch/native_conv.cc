// adapters/torch/native_conv.cc — convolution and convolution_backward on the native path: one-
// and two-dimensional convolutions of float32 and float64 device tensors as generated im2col and
// col2im kernels around CLBlast products (native_gemm.h), enqueued without waiting
// (native_kernels.h).

#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/host_view.h"
#include "adapters/torch/native_gemm.h"
#include "adapters/torch/native_kernel_table.h"
#include "adapters/torch/native_kernels.h"
#include "adapters/torch/native_launches.h"

namespace oclvm::torch_adapter {

// Note [Native convolutions]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// convolution(input, weight, bias, stride, padding, dilation, transposed=False, output_padding,
// groups) of float32 or float64 tensors on one native-path device, with one or two spatial
// dimensions (a one-dimensional one is a two-dimensional one of height 1), is lowered to matrix
// products. With K = C/groups x KH x KW and L = OH x OW:
//   - im2col copies each sample's input patches into columns: cols[n][c, kh, kw][oh, ow] is the
//     input element that weight (c, kh, kw) meets at output (oh, ow), zero in the padding. A 1 x 1
//     convolution of stride 1 without padding reads a contiguous input as its own columns.
//   - forward: out[n][g] = weight[g] (OC/groups x K) @ cols[n][g] (K x L), one batched CLBlast
//     call per group over the samples (the weight's batch stride 0), written straight into the
//     contiguous [N, OC, OH, OW] result; the bias is then added by the native add.
//   - grad_input: gcols[n][g] = weight[g]^T @ grad_output[n][g], one batched call per group, then
//     col2im, one work-item per input element, adds the column entries that came from it, in
//     (kh, kw) order: no atomics, and the same sums on every run.
//   - grad_weight: the columns laid out as [K][N x L], the gradient's samples side by side
//     likewise (a native copy), so each group's gradient is one product over N x L columns.
//   - grad_bias: the native sum of grad_output over the samples and the spatial dimensions.
// The columns of many samples can be large, so samples go in chunks whose columns hold at most
// kColumnBudget elements (at least one sample); grad_weight adds each chunk's product (beta 1).
// Temporaries come from the caching allocator on the current stream, as every native operator's.
//
// The values are not the CPU's to the bit: the products sum in CLBlast's order, as the CPU's
// kernels (mkldnn or its own im2col) sum in theirs; the callers' tolerances for float32
// convolutions cover it. The result and gradients are contiguous; the caller (ops.cc) gives them
// the layout torch's rule names for the device (Note [Convolution layouts on the device]).
//
// Not taken (the CPU kernel answers, with its values and errors): transposed convolutions, three
// spatial dimensions, other dtypes, mixed dtypes or devices, conjugate or negative bits, empty
// tensors, shapes or arguments the CPU refuses (a weight that does not match the input's channels
// and groups, a non-positive stride or dilation, negative padding, an empty output), float64 on a
// device whose kernels cannot build it, a sample whose columns, an input, a weight or an output
// of more than 2^31 elements, a stride, padding, dilation or padded size past 2^31, and a module
// built without CLBlast.

#if defined(OCLVM_WITH_CLBLAST)
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
// The most elements the columns of one chunk of samples hold (128 MiB of float32).
constexpr int64_t kColumnBudget = int64_t{1} << 25;

// A convolution's shape, its one-dimensional form seen as two-dimensional (height 1).
struct ConvShape {
  int64_t n, c, h, w;       // input
  int64_t oc, kh, kw;       // weight (oc, c / groups, kh, kw)
  int64_t oh, ow;           // output
  int64_t groups;
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t spatial;          // 1 or 2
  int64_t k() const { return c / groups * kh * kw; }  // rows of a group's columns
  int64_t l() const { return oh * ow; }               // columns per sample
};

// A convolution's argument for (height, width): a one-dimensional convolution's padded with
// `height_value`; one value given for two dimensions stands for both, as the CPU reads it. nullopt
// for other lengths.
std::optional<std::array<int64_t, 2>> pair_of(at::IntArrayRef values, int64_t spatial,
                                              int64_t height_value) {
  if (spatial == 1 && values.size() == 1) return std::array<int64_t, 2>{height_value, values[0]};
  if (spatial == 2 && values.size() == 1) return std::array<int64_t, 2>{values[0], values[0]};
  if (spatial == 2 && values.size() == 2) return std::array<int64_t, 2>{values[0], values[1]};
  return std::nullopt;
}

bool plain_float(const at::Tensor& t, const at::Tensor& like) {
  return t.defined() && t.device() == like.device() && t.layout() == at::kStrided &&
         t.scalar_type() == like.scalar_type() && !t.is_conj() && !t.is_neg();
}

// The shape of convolution(input, weight, ...) when the native path takes it, else nullopt.
std::optional<ConvShape> conv_shape(const at::Tensor& input, const at::Tensor& weight,
                                    at::IntArrayRef stride, at::IntArrayRef padding,
                                    at::IntArrayRef dilation, bool transposed, int64_t groups) {
  if (transposed || !input.defined() || !is_device(input) ||
      !native_kernels(input.device().index()) || input.layout() != at::kStrided ||
      input.is_conj() || input.is_neg() ||
      (input.scalar_type() != at::kFloat && input.scalar_type() != at::kDouble) ||
      !plain_float(weight, input) || (input.dim() != 3 && input.dim() != 4) ||
      weight.dim() != input.dim() || groups < 1 || input.numel() == 0 || weight.numel() == 0) {
    return std::nullopt;
  }
  if (input.scalar_type() == at::kDouble && !native_float64(input.device().index())) {
    return std::nullopt;
  }
  ConvShape s;
  s.spatial = input.dim() - 2;
  const std::optional<std::array<int64_t, 2>> st = pair_of(stride, s.spatial, 1);
  const std::optional<std::array<int64_t, 2>> pad = pair_of(padding, s.spatial, 0);
  const std::optional<std::array<int64_t, 2>> dil = pair_of(dilation, s.spatial, 1);
  if (!st || !pad || !dil) return std::nullopt;
  s.stride = *st;
  s.padding = *pad;
  s.dilation = *dil;
  for (size_t i = 0; i < 2; ++i) {
    // The kernels take these as int; the reach below stays far from int64's range then.
    if (s.stride[i] < 1 || s.dilation[i] < 1 || s.padding[i] < 0 || s.stride[i] > kIntMax ||
        s.dilation[i] > kIntMax || s.padding[i] > kIntMax) {
      return std::nullopt;
    }
  }
  const bool two = s.spatial == 2;
  s.n = input.size(0);
  s.c = input.size(1);
  s.h = two ? input.size(2) : 1;
  s.w = input.size(-1);
  s.oc = weight.size(0);
  s.kh = two ? weight.size(2) : 1;
  s.kw = weight.size(-1);
  s.groups = groups;
  if (s.c % groups != 0 || s.oc % groups != 0 || weight.size(1) != s.c / groups) {
    return std::nullopt;
  }
  if (input.numel() > kIntMax || weight.numel() > kIntMax ||
      s.h + 2 * s.padding[0] > kIntMax || s.w + 2 * s.padding[1] > kIntMax) {
    return std::nullopt;  // the kernels' int indices
  }
  const int64_t reach_h = s.dilation[0] * (s.kh - 1) + 1, reach_w = s.dilation[1] * (s.kw - 1) + 1;
  if (s.h + 2 * s.padding[0] < reach_h || s.w + 2 * s.padding[1] < reach_w) return std::nullopt;
  s.oh = (s.h + 2 * s.padding[0] - reach_h) / s.stride[0] + 1;
  s.ow = (s.w + 2 * s.padding[1] - reach_w) / s.stride[1] + 1;
  // CLBlast's sizes and offsets, and the kernels' indices, are int: one sample's columns, the
  // weight, the output and the elements the input spans stay within 2^31.
  if (s.k() * s.groups > kIntMax / s.l() || s.oc * s.l() > kIntMax / s.n ||
      span_elements(input) > kIntMax || weight.numel() > kIntMax) {
    return std::nullopt;
  }
  return s;
}

// Whether the input is its own columns: a 1 x 1 convolution of stride 1, no padding, contiguous.
bool input_is_columns(const ConvShape& s, const at::Tensor& input) {
  return s.kh == 1 && s.kw == 1 && s.stride == std::array<int64_t, 2>{1, 1} &&
         s.padding == std::array<int64_t, 2>{0, 0} && input.is_contiguous();
}

// Samples per chunk, so that a chunk's columns hold at most kColumnBudget elements.
int64_t chunk_samples(const ConvShape& s) {
  return std::clamp<int64_t>(kColumnBudget / (s.k() * s.groups * s.l()), 1, s.n);
}

enum class ConvKernel : uint8_t { kIm2col, kCol2im };

// im2col copies elements; col2im adds them, in `t`. Both run over a two-dimensional range and
// index in int: every offset they form lies within the input, the output or one chunk's columns,
// and every geometry argument is an int, as conv_shape keeps them.
KernelSource conv_source(ConvKernel kind, const std::string& t) {
  const std::string geometry =
      "int C, int H, int W, int KH, int KW, int OW, int L, int sth, int stw, int ph, int pw, "
      "int dh, int dw";
  std::string s, name;
  if (kind == ConvKernel::kIm2col) {
    // Work-item (l, row): output position l, row (b, r) of sample b's columns.
    name = "oclvm_im2col_" + t;
    if (t == "double") s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
    s += "__kernel void " + name + "(OCLVM_BLOB(" + t + ", cols), OCLVM_BLOB(" + t +
        ", in), int rows, " + geometry +
        ", int sn, int sc, int sh, int sw, int sample_step, int row_step) {\n";
    s += "  const int l = (int)get_global_id(0), row = (int)get_global_id(1);\n";
    s += "  if (l >= L || row >= rows) return;\n";
    s += "  const int K = C * KH * KW, b = row / K, r = row - b * K;\n";
    s += "  const int kw = r % KW, kh = r / KW % KH, c = r / (KW * KH);\n";
    s += "  const int oh = l / OW, ow = l - oh * OW;\n";
    s += "  const int ih = oh * sth - ph + kh * dh, iw = ow * stw - pw + kw * dw;\n";
    s += "  OCLVM_PTR(" + t + ", cols)[b * sample_step + r * row_step + l] =\n";
    s += "      ih >= 0 && ih < H && iw >= 0 && iw < W\n";
    s += "          ? OCLVM_PTR(" + t + ", in)[b * sn + c * sc + ih * sh + iw * sw] : (" + t +
         ")0;\n}\n";
  } else {
    // Work-item (p, plane): pixel p of plane (b, c) of the contiguous result.
    name = "oclvm_col2im_" + t;
    if (t == "double") s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
    s += "#pragma OPENCL FP_CONTRACT OFF\n";
    s += "__kernel void " + name + "(OCLVM_BLOB(" + t + ", out), OCLVM_BLOB(" + t +
         ", cols), int planes, " + geometry + ", int OH) {\n";
    s += "  const int p = (int)get_global_id(0), plane = (int)get_global_id(1);\n";
    s += "  if (p >= H * W || plane >= planes) return;\n";
    s += "  const int y = p / W, x = p - y * W, b = plane / C, c = plane - b * C;\n";
    s += "  __global const " + t + "* col = OCLVM_PTR(" + t +
         ", cols) + (b * C + c) * KH * KW * L;\n";
    s += "  " + t + " sum = 0;\n";
    s += "  for (int kh = 0; kh < KH; ++kh) {\n";
    s += "    const int th = y + ph - kh * dh;\n";
    s += "    if (th < 0 || th % sth != 0 || th / sth >= OH) continue;\n";
    s += "    for (int kw = 0; kw < KW; ++kw) {\n";
    s += "      const int tw = x + pw - kw * dw;\n";
    s += "      if (tw < 0 || tw % stw != 0 || tw / stw >= OW) continue;\n";
    s += "      sum += col[(kh * KW + kw) * L + th / sth * OW + tw / stw];\n";
    s += "    }\n  }\n";
    s += "  OCLVM_PTR(" + t + ", out)[plane * H * W + p] = sum;\n}\n";
  }
  return KernelSource{std::move(s), name, ""};
}

std::shared_ptr<const Kernel> conv_kernel(c10::DeviceIndex device, ConvKernel kind,
                                          at::ScalarType type) {
  const uint64_t id = (static_cast<uint64_t>(kind) << 8) | (type == at::kDouble ? 1u : 0u);
  return native_kernel(device, NativeKernelFamily::kConvolution, id,
                       [&] { return conv_source(kind, cl_type(type)); });
}

// The geometry arguments both kernels take, in their order.
std::vector<LaunchArg> geometry_args(const ConvShape& s) {
  std::vector<LaunchArg> args;
  for (const int64_t v : {s.c, s.h, s.w, s.kh, s.kw, s.ow, s.l(), s.stride[0], s.stride[1],
                          s.padding[0], s.padding[1], s.dilation[0], s.dilation[1]}) {
    args.push_back(int_arg(v));
  }
  return args;
}

// cols := the columns of `input`'s samples [first, first + count), with `sample_step` elements
// between samples and `row_step` between rows (K x L per sample: [count][K][L] for (K x L, L),
// [K][count][L] for (L, count x L)).
void im2col(const ConvShape& s, const std::shared_ptr<const Kernel>& kernel,
            const at::Tensor& input, int64_t first, int64_t count, const at::Tensor& cols,
            int64_t sample_step, int64_t row_step) {
  const bool two = s.spatial == 2;
  const at::Tensor samples = input.narrow(0, first, count);
  const int64_t rows = count * s.c * s.kh * s.kw;
  std::vector<LaunchArg> args{blob_arg(cols, KernelAccess::kWrite),
                              blob_arg(samples, KernelAccess::kRead), int_arg(rows)};
  for (LaunchArg& arg : geometry_args(s)) args.push_back(std::move(arg));
  for (const int64_t v : {input.stride(0), input.stride(1), two ? input.stride(2) : int64_t{0},
                          input.stride(-1), sample_step, row_step}) {
    args.push_back(int_arg(v));
  }
  launch_counted(kernel, cols, args, launch_range(s.l(), rows));
}

opencl::GemmMatrix matrix(int64_t offset, int64_t ld, int64_t batch_stride,
                          bool transposed = false) {
  opencl::GemmMatrix m;
  m.offset = static_cast<size_t>(offset);
  m.ld = static_cast<size_t>(ld);
  m.batch_stride = static_cast<size_t>(batch_stride);
  m.transposed = transposed;
  return m;
}

opencl::GemmCall product(const at::Tensor& like, int64_t batch, int64_t m, int64_t n, int64_t k,
                         double beta) {
  opencl::GemmCall call;
  call.dtype = like.scalar_type() == at::kFloat ? DType::kF32 : DType::kF64;
  call.batch = static_cast<size_t>(batch);
  call.m = static_cast<size_t>(m);
  call.n = static_cast<size_t>(n);
  call.k = static_cast<size_t>(k);
  call.beta = beta;
  return call;
}

}  // namespace

std::optional<at::Tensor> native_convolution(const at::Tensor& input, const at::Tensor& weight,
                                             const std::optional<at::Tensor>& bias,
                                             at::IntArrayRef stride, at::IntArrayRef padding,
                                             at::IntArrayRef dilation, bool transposed,
                                             int64_t groups) {
  const std::optional<ConvShape> shape =
      conv_shape(input, weight, stride, padding, dilation, transposed, groups);
  if (!shape) return std::nullopt;
  const ConvShape& s = *shape;
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias && (!plain_float(*bias, input) || bias->dim() != 1 || bias->numel() != s.oc)) {
    return std::nullopt;
  }
  const bool direct = input_is_columns(s, input);
  const std::shared_ptr<const Kernel> kernel =
      direct ? nullptr : conv_kernel(input.device().index(), ConvKernel::kIm2col,
                                     input.scalar_type());
  if (!direct && kernel == nullptr) return std::nullopt;
  std::vector<int64_t> sizes{s.n, s.oc, s.oh, s.ow};
  if (s.spatial == 1) sizes.erase(sizes.begin() + 2);
  at::Tensor out = at::empty(sizes, input.options());  // contiguous: [N][OC][L]
  const at::Tensor w = weight.contiguous();           // [groups][OC / groups][K]
  const int64_t k = s.k(), l = s.l(), ocg = s.oc / s.groups, rows = k * s.groups;
  const int64_t chunk = chunk_samples(s);
  at::Tensor cols;
  if (!direct) cols = at::empty({std::min(chunk, s.n) * rows * l}, input.options());
  for (int64_t first = 0; first < s.n; first += chunk) {
    const int64_t count = std::min(chunk, s.n - first);
    const at::Tensor& columns = direct ? input : cols;
    const int64_t columns_offset = direct ? first * rows * l : 0;
    if (!direct) im2col(s, kernel, input, first, count, cols, rows * l, l);
    for (int64_t g = 0; g < s.groups; ++g) {
      opencl::GemmCall call = product(out, count, ocg, l, k, 0);
      call.a = matrix(g * ocg * k, k, 0);
      call.b = matrix(columns_offset + g * k * l, l, rows * l);
      call.c = matrix((first * s.oc + g * ocg) * l, l, s.oc * l);
      enqueue_gemm(out, w, columns, call);
      count_native_launch();
    }
  }
  if (has_bias) {
    std::vector<int64_t> bias_shape(static_cast<size_t>(out.dim()), 1);
    bias_shape[1] = s.oc;
    const at::Tensor b = bias->view(bias_shape);
    if (!native_binary_(BinaryOp::kAdd, out, b, 1)) out.add_(b);
  }
  return out;
}

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    int64_t groups, std::array<bool, 3> output_mask) {
  const std::optional<ConvShape> shape =
      conv_shape(input, weight, stride, padding, dilation, transposed, groups);
  if (!shape || !plain_float(grad_output, input) || grad_output.dim() != input.dim()) {
    return std::nullopt;
  }
  const ConvShape& s = *shape;
  std::vector<int64_t> out_sizes{s.n, s.oc, s.oh, s.ow};
  if (s.spatial == 1) out_sizes.erase(out_sizes.begin() + 2);
  if (grad_output.sizes() != at::IntArrayRef(out_sizes)) return std::nullopt;
  const c10::DeviceIndex device = input.device().index();
  const std::shared_ptr<const Kernel> to_columns =
      conv_kernel(device, ConvKernel::kIm2col, input.scalar_type());
  const std::shared_ptr<const Kernel> from_columns =
      conv_kernel(device, ConvKernel::kCol2im, input.scalar_type());
  if (to_columns == nullptr || from_columns == nullptr) return std::nullopt;

  const int64_t k = s.k(), l = s.l(), ocg = s.oc / s.groups, rows = k * s.groups;
  const int64_t chunk = chunk_samples(s);
  const at::Tensor go = grad_output.contiguous();  // [N][OC][L]
  const at::Tensor w = weight.contiguous();        // [groups][OC / groups][K]
  at::Tensor grad_input, grad_weight, grad_bias;
  at::Tensor cols;  // one chunk's columns, or gcols
  if (output_mask[0] || output_mask[1]) {
    cols = at::empty({std::min(chunk, s.n) * rows * l}, input.options());
  }
  if (output_mask[0]) grad_input = at::empty(input.sizes(), input.options());
  if (output_mask[1]) grad_weight = at::empty(weight.sizes(), weight.options());
  for (int64_t first = 0; first < s.n; first += chunk) {
    const int64_t count = std::min(chunk, s.n - first);
    if (output_mask[0]) {
      // gcols[b][g] (K x L) = weight[g]^T (K x OC/groups) @ grad_output[b][g] (OC/groups x L).
      for (int64_t g = 0; g < s.groups; ++g) {
        opencl::GemmCall call = product(go, count, k, l, ocg, 0);
        call.a = matrix(g * ocg * k, k, 0, /*transposed=*/true);
        call.b = matrix((first * s.oc + g * ocg) * l, l, s.oc * l);
        call.c = matrix(g * k * l, l, rows * l);
        enqueue_gemm(cols, w, go, call);
        count_native_launch();
      }
      const at::Tensor samples = grad_input.narrow(0, first, count);
      std::vector<LaunchArg> args{blob_arg(samples, KernelAccess::kWrite),
                                  blob_arg(cols, KernelAccess::kRead), int_arg(count * s.c)};
      for (LaunchArg& arg : geometry_args(s)) args.push_back(std::move(arg));
      args.push_back(int_arg(s.oh));
      launch_counted(from_columns, samples, args, launch_range(s.h * s.w, count * s.c));
    }
    if (output_mask[1]) {
      // grad_weight[g] (OC/groups x K) += grad_output[g] (OC/groups x count L) @ cols[g]^T, with
      // the chunk's columns and gradient laid out as [K][count][L] and [OC][count][L].
      im2col(s, to_columns, input, first, count, cols, l, count * l);
      const at::Tensor side_by_side = go.narrow(0, first, count).transpose(0, 1).contiguous();
      for (int64_t g = 0; g < s.groups; ++g) {
        opencl::GemmCall call = product(go, 1, ocg, k, count * l, first == 0 ? 0 : 1);
        call.a = matrix(g * ocg * count * l, count * l, 0);
        call.b = matrix(g * k * count * l, count * l, 0, /*transposed=*/true);
        call.c = matrix(g * ocg * k, k, 0);
        enqueue_gemm(grad_weight, side_by_side, cols, call);
        count_native_launch();
      }
    }
  }
  if (output_mask[2]) {
    grad_bias = s.spatial == 2 ? at::sum(grad_output, {0, 2, 3}) : at::sum(grad_output, {0, 2});
  }
  return std::make_tuple(grad_input, grad_weight, grad_bias);
}

#else  // a module built without CLBlast: the CPU kernels answer

std::optional<at::Tensor> native_convolution(const at::Tensor&, const at::Tensor&,
                                             const std::optional<at::Tensor>&, at::IntArrayRef,
                                             at::IntArrayRef, at::IntArrayRef, bool, int64_t) {
  return std::nullopt;
}

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> native_convolution_backward(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, at::IntArrayRef, at::IntArrayRef,
    at::IntArrayRef, bool, int64_t, std::array<bool, 3>) {
  return std::nullopt;
}

#endif

}  // namespace oclvm::torch_adapter
