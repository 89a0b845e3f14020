// adapters/torch/native_gemm.h — one CLBlast product of device tensors' memory, enqueued without
// waiting (native_blas.cc): what the matrix products and the convolutions (native_conv.cc) of the
// native path share. Only in a module built with CLBlast (OCLVM_WITH_CLBLAST).
//
// Thread-safety: any thread, as submit_native.
#pragma once

#if defined(OCLVM_WITH_CLBLAST)

#include <ATen/core/Tensor.h>

#include "oclvm/storage/opencl/gemm.h"

namespace oclvm::torch_adapter {

// Enqueues `product` as one NativeCall on the current stream of c's device. Each of its matrices
// lies in the elements of a device tensor (c, a, b: of the product's dtype, on one device), and
// its offset counts elements from that tensor's element 0; the call orders itself after the work
// on every element each tensor spans, reads a and b, and writes c (reads it too unless beta is 0).
// A tensor that lies past 2^31 elements into its buffer fails the call with a BackendError, which
// the next sync point throws; the caller keeps sizes, leading dimensions and strides within int.
void enqueue_gemm(const at::Tensor& c, const at::Tensor& a, const at::Tensor& b,
                  const opencl::GemmCall& product);

}  // namespace oclvm::torch_adapter

#endif
