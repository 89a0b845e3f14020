// adapters/torch/sparse.cc — sparse tensors (COO and compressed) on the device: their structure
// kernels, registered for SparsePrivateUse1 and SparseCsrPrivateUse1 by registration.cc.
//
// Note [Sparse tensors on the device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A sparse tensor is a small structure over dense tensors: COO holds `indices` and `values`, the
// compressed layouts hold compressed and plain indices and `values`. Those members are ordinary
// opencl tensors, held in device memory through the adapter's allocator like any other. What a
// sparse dispatch key needs of a backend is therefore two things:
//   - the structure kernels, which make, inspect, resize and copy the structure and touch no
//     element on their own (elements move through the members' own copies). ATen writes them
//     once for every device (its sparse Meta backend uses the same ones), so they are registered
//     here as they are;
//   - arithmetic, which goes through the boxed CPU fallback as dense operators do: the fallback
//     moves a sparse argument to the CPU member by member, runs the CPU's sparse kernel and moves
//     the result back (fallback.cc). Operators with an explicit composite beside their sparse
//     CPU kernel are routed to that fallback too, as dense ones are (Note [Composite kernels the
//     CPU does not use] in ops.cc): the composite `mm` made a sparse result the CPU's kernel
//     cannot fill.
// Without them torch raised NotImplementedError on the first `to_sparse()` of a device tensor,
// found by PyTorch's OpInfo database (to_sparse, sparse.sampled_addmm, sparse.mm.reduce).
//
// Thread-safety: the kernels are ATen's and hold no state of their own.
#include <ATen/ATen.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <torch/library.h>

#include <string>

#include "adapters/torch/fallback.h"
#include "adapters/torch/registration.h"

namespace oclvm::torch_adapter {
namespace {

// How the boxed CPU fallback writes a result the CPU kernel wrote (an out= argument) back into
// the device's sparse tensor: the sparse copy, which resizes the structure and copies its members.
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::Tensor target = dst;
  return target.copy_(self);
}

}  // namespace

void register_sparse_kernels(torch::Library& m) {
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse));
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(at::native::new_with_dims_sparse));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors",
         TORCH_FN(at::native::new_with_dims_and_tensor_sparse_symint));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(at::native::sparse_resize_and_clear_));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
  m.impl("zero_", TORCH_FN(at::native::zero_sparse_));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  // Note [Composite kernels the CPU does not use] (ops.cc), for the CPU's sparse kernels.
  for (const std::string& name : cpu_kernels_under_composites(
           c10::DispatchKey::SparseCPU, c10::DispatchKey::SparsePrivateUse1)) {
    m.impl(name.c_str(),
           torch::CppFunction::makeFromBoxedFunction<&sparse_cpu_fallback_on_one_device>());
  }
}

void register_sparse_compressed_kernels(torch::Library& m) {
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse_compressed));
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
  m.impl("resize_as_sparse_", TORCH_FN(at::native::resize_as_sparse_compressed_));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_compressed_));
  m.impl("zero_", TORCH_FN(at::native::zero_sparse_csr_));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  for (const std::string& name : cpu_kernels_under_composites(
           c10::DispatchKey::SparseCsrCPU, c10::DispatchKey::SparseCsrPrivateUse1)) {
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<
                             &sparse_compressed_cpu_fallback_on_one_device>());
  }
}

}  // namespace oclvm::torch_adapter
