// adapters/torch/registration.h — what each operator file of the adapter registers with torch's
// dispatcher; registration.cc makes the libraries and calls these once, when `oclvm._C` loads
// (it registers the allocator, guard, host allocator and hooks there too).
//
// Thread-safety: the register_* functions are called only from registration.cc's static
// initialisers; fused_sdp_choice is stateless.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>

namespace oclvm::torch_adapter {

// aten kernels for PrivateUse1 (ops.cc): creation, views, resize, copies, fill, set_, ...
void register_native_kernels(torch::Library& m);
// aten kernels for PrivateUse1 (rnn_cells.cc): the fused LSTM and GRU cells and their backward.
void register_rnn_cells(torch::Library& m);
// aten kernels for PrivateUse1 (dropout.cc): native_dropout drawing from the device's generator.
void register_dropout(torch::Library& m);
// aten kernels for SparsePrivateUse1 (sparse.cc): the structure of sparse COO tensors.
void register_sparse_kernels(torch::Library& m);
// aten kernels for SparseCsrPrivateUse1 (sparse.cc): the structure of compressed sparse tensors.
void register_sparse_compressed_kernels(torch::Library& m);
// aten kernels for NestedTensorPrivateUse1 (nested.cc): the structure of nested tensors.
void register_nested_kernels(torch::Library& m);
// The boxed CPU fallback of NestedTensorPrivateUse1 (nested.cc, Note [Nested tensors on the
// device]).
void register_nested_fallback(torch::Library& m);
// aten kernels for AutocastPrivateUse1 (autocast.cc): the mixed-precision policy.
void register_autocast_kernels(torch::Library& m);
// The AutocastPrivateUse1 fallback for every other operator of every namespace: fall through.
void register_autocast_fallthrough(torch::Library& m);
// The PrivateUse1 _fused_sdp_choice_stub (attention.cc): scaled dot-product attention chooses its
// kernel as the CPU does.
int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa);

}  // namespace oclvm::torch_adapter
