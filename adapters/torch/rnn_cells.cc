// adapters/torch/rnn_cells.cc — the fused LSTM and GRU cell operators of the "opencl" device.
//
// On any device but the CPU, ATen's nn.LSTM / nn.GRU / nn.LSTMCell / nn.GRUCell step through
// _thnn_fused_lstm_cell / _thnn_fused_gru_cell, whose backward passes call
// _thnn_fused_lstm_cell_backward_impl / _thnn_fused_gru_cell_backward. PyTorch implements them
// for CUDA only, so the CPU fallback has no kernel to run. Here they are computed on the host
// from ATen's own elementwise operators (the gate arithmetic of the CPU's unfused cells), on CPU
// copies of the arguments, and the results are copied to the device.
//
// The workspaces keep the layout the backward passes here expect (and CUDA's kernels use):
//   LSTM  workspace = [i | f | g | o], the activated gates, (batch, 4 * hidden)
//   GRU   workspace = [r | z | n | hx | hn], (batch, 5 * hidden), hn the hidden part of the new
//         gate (its bias included)
// Gate order is PyTorch's: LSTM input, forget, cell, output; GRU reset, update, new.
//
// Thread-safety: stateless; as ATen's operators.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "adapters/torch/registration.h"

namespace oclvm::torch_adapter {
namespace {

at::Tensor to_host(const at::Tensor& t) { return t.defined() ? t.cpu() : t; }

at::Tensor to_host(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? t->cpu() : at::Tensor();
}

at::Tensor to_device(const at::Tensor& host, const c10::Device& device) {
  return host.defined() ? host.to(device) : host;
}

// gates (+ bias, when defined)
at::Tensor with_bias(const at::Tensor& gates, const at::Tensor& bias) {
  return bias.defined() ? gates + bias : gates;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  const c10::Device device = input_gates.device();
  const at::Tensor gates = with_bias(to_host(input_gates), to_host(input_bias)) +
                           with_bias(to_host(hidden_gates), to_host(hidden_bias));
  const std::vector<at::Tensor> chunks = gates.chunk(4, 1);
  const at::Tensor i = chunks[0].sigmoid();
  const at::Tensor f = chunks[1].sigmoid();
  const at::Tensor g = chunks[2].tanh();
  const at::Tensor o = chunks[3].sigmoid();
  const at::Tensor cy = f * to_host(cx) + i * g;
  const at::Tensor hy = o * cy.tanh();
  const at::Tensor workspace = at::cat({i, f, g, o}, 1);
  return {to_device(hy, device), to_device(cy, device), to_device(workspace, device)};
}

// Gradients of the gates' pre-activations, of cx and of the (summed) biases.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const c10::Device device = workspace.device();
  const at::Tensor host_workspace = to_host(workspace);
  const std::vector<at::Tensor> gates = host_workspace.chunk(4, 1);
  const at::Tensor& i = gates[0];
  const at::Tensor& f = gates[1];
  const at::Tensor& g = gates[2];
  const at::Tensor& o = gates[3];
  const at::Tensor host_cx = to_host(cx);
  const at::Tensor tanh_cy = to_host(cy).tanh();
  const at::Tensor ghy = to_host(grad_hy);
  const at::Tensor gcy = to_host(grad_cy);
  // d loss / d cy: through hy = o * tanh(cy), plus what came for cy itself.
  at::Tensor gc = ghy.defined() ? ghy * o * (1 - tanh_cy * tanh_cy) : at::zeros_like(host_cx);
  if (gcy.defined()) gc = gc + gcy;
  const at::Tensor gi = gc * g * i * (1 - i);
  const at::Tensor gf = gc * host_cx * f * (1 - f);
  const at::Tensor gg = gc * i * (1 - g * g);
  const at::Tensor go = ghy.defined() ? ghy * tanh_cy * o * (1 - o) : at::zeros_like(o);
  const at::Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
  const at::Tensor grad_cx = gc * f;
  const at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {to_device(grad_gates, device), to_device(grad_cx, device),
          to_device(grad_bias, device)};
}

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates,
                                                  const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx,
                                                  const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  const c10::Device device = input_gates.device();
  const std::vector<at::Tensor> in =
      with_bias(to_host(input_gates), to_host(input_bias)).chunk(3, 1);
  const std::vector<at::Tensor> hid =
      with_bias(to_host(hidden_gates), to_host(hidden_bias)).chunk(3, 1);
  const at::Tensor host_hx = to_host(hx);
  const at::Tensor r = (in[0] + hid[0]).sigmoid();
  const at::Tensor z = (in[1] + hid[1]).sigmoid();
  const at::Tensor n = (in[2] + r * hid[2]).tanh();
  const at::Tensor hy = n + z * (host_hx - n);
  const at::Tensor workspace = at::cat({r, z, n, host_hx, hid[2]}, 1);
  return {to_device(hy, device), to_device(workspace, device)};
}

// Gradients of the input gates, the hidden gates, hx, and the two (summed) biases.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const c10::Device device = workspace.device();
  const std::vector<at::Tensor> parts = to_host(workspace).chunk(5, 1);
  const at::Tensor& r = parts[0];
  const at::Tensor& z = parts[1];
  const at::Tensor& n = parts[2];
  const at::Tensor& hx = parts[3];
  const at::Tensor& hn = parts[4];
  const at::Tensor ghy = to_host(grad_hy);
  // hy = n + z * (hx - n)
  const at::Tensor gn = ghy * (1 - z) * (1 - n * n);
  const at::Tensor gz = ghy * (hx - n) * z * (1 - z);
  const at::Tensor gr = gn * hn * r * (1 - r);
  const at::Tensor grad_input_gates = at::cat({gr, gz, gn}, 1);
  const at::Tensor grad_hidden_gates = at::cat({gr, gz, gn * r}, 1);
  const at::Tensor grad_hx = ghy * z;
  const at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  const at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {to_device(grad_input_gates, device), to_device(grad_hidden_gates, device),
          to_device(grad_hx, device), to_device(grad_input_bias, device),
          to_device(grad_hidden_bias, device)};
}

}  // namespace

void register_rnn_cells(torch::Library& m) {
  m.impl("_thnn_fused_lstm_cell", fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", fused_lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", fused_gru_cell_backward);
}

}  // namespace oclvm::torch_adapter
