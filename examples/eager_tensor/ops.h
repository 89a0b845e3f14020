// examples/eager_tensor/ops.h — computing on the device: elementwise operations and a sum, each
// one or two of oclvm's LaunchKernel instructions, and a matrix product through CLBlast, one
// NativeCall; all submitted without waiting.
//
//   eager::Tensor c = eager::add(a, b.slice(1, 0, 4, 2));   // broadcasting, strided operands
//   eager::Tensor s = eager::sum(c);                           // a 0-d tensor
//   eager::Tensor p = eager::matmul(m, n.transpose(0, 1));     // CLBlast's GEMM
//   double total = s.to_doubles()[0];                          // the first wait for the device
//
// Each operation builds its launches into one list and hands it to Runtime::submit: the host
// goes on at once, and the VM orders the kernels by their blobs, so a later copy, download or
// release of a tensor waits for the kernels that use it. The submission's ticket is kept until
// the next synchronize() of that Runtime, which every download (Tensor::to_host, to_doubles,
// printing) calls first, so a kernel's error is reported there rather than lost.
//
// The kernels are OpenCL C written here, compiled once per device and dtype by oclvm's kernel
// cache (and kept on disk for the next process); their blob parameters use OCLVM_BLOB.
//
// Errors: operands of different dtypes or devices, shapes that do not broadcast, more than 4
// dimensions, or a dtype without kernels here (f16, bf16, i8, u8, i16, bool) throw
// oclvm::InvalidArgument before anything is built.
//
// Thread-safety: like Tensor. synchronize() may be called from any thread; the tickets it waits
// for are kept under a mutex.
#pragma once

#include "tensor.h"

namespace eager {

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kMaximum };

// a OP b elementwise, with NumPy's broadcasting (shapes aligned at the last dimension; a size
// of 1 stretches), as a new contiguous tensor on the operands' device. kDiv is for f32 and f64
// only (integer division by zero has no defined result on a device).
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
inline Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kAdd, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kSub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMul, a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kDiv, a, b); }
inline Tensor maximum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMaximum, a, b); }

// The sum of every element as a 0-d tensor: f32 and f64 keep their dtype, i32 and i64 give i64
// (as torch.sum). Two launches: work-groups reduce slices into partial sums, one group adds those.
Tensor sum(const Tensor& a);

// The matrix product a @ b of a [m, k] and a [k, n] tensor, f32 or f64, as a new contiguous
// [m, n] tensor: one NativeCall that hands the stream's queue and the operands' buffers to
// CLBlast's GEMM (Note [Native commands] in oclvm's storage/queue.h). Row-major operands, and
// transposed views of them, go in as they are (CLBlast takes a leading dimension and a
// transpose flag); any other layout is made contiguous first. CLBlast compiles its kernels on
// its first use in a process (seconds on PoCL, unless PoCL's own cache has them). Throws
// InvalidArgument for other ranks, dtypes, operands on two devices or on the host device (which
// has no queue to lend), or inner sizes that differ.
Tensor matmul(const Tensor& a, const Tensor& b);

// Waits for every list the operations above submitted on `runtime` and rethrows the first error.
void synchronize(oclvm::Runtime& runtime);

}  // namespace eager
