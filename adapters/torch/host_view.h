// adapters/torch/host_view.h — a device tensor read into host memory laid out as it is on the
// device (ops.cc), for CPU kernels that must see their operands as the CPU run would.
//
// Thread-safety: as the copies (the VM orders them).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace oclvm::torch_adapter {

// A CPU tensor with `device`'s sizes, strides and conjugate/negative bits, over a host copy of the
// bytes from its element 0 to its farthest element (its span). One device-to-host transfer.
at::Tensor host_view(const at::Tensor& device);

// host_view of each of `devices`, read in one VM list (one sync point for all of them).
std::vector<at::Tensor> host_views(c10::ArrayRef<at::Tensor> devices);

// Whether `t`'s span is at most twice its elements (plus a little): copying the span of a view
// with large gaps (a column of a big matrix) would move far more than the view holds.
bool span_is_compact(const at::Tensor& t);

}  // namespace oclvm::torch_adapter
