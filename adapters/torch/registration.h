// adapters/torch/registration.h — what each operator file of the adapter registers with torch's
// dispatcher; registration.cc makes the libraries and calls these once, when `oclvm._C` loads.
//
// Thread-safety: called only from registration.cc's static initialisers.
#pragma once

#include <torch/library.h>

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
// aten kernels for AutocastPrivateUse1 (autocast.cc): the mixed-precision policy.
void register_autocast_kernels(torch::Library& m);
// The AutocastPrivateUse1 fallback for every other operator of every namespace: fall through.
void register_autocast_fallthrough(torch::Library& m);

}  // namespace oclvm::torch_adapter
