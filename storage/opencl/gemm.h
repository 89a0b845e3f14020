// storage/opencl/gemm.h — matrix products through CLBlast, enqueued on a queue's own OpenCL
// objects by a native call's body (Note [Native commands] in storage/queue.h): the torch adapter's
// mm, addmm and bmm on the native path.
//
// The header names no OpenCL type (buffers and the queue are void*, as NativeCallContext hands
// them out), so the layers above include it. Its implementation, gemm.cc, is built into a library
// of its own, oclvm_gemm, only where CLBlast is found; OCLVM_WITH_CLBLAST is defined for those
// who link it.
//
// Thread-safety: enqueue_gemm may be called from any thread that may enqueue on the queue (the
// device's worker, inside a native call); CLBlast keeps its compiled programs under its own lock.
#pragma once

#include <cstddef>
#include <string>

#include "oclvm/storage/storage_objects.h"

namespace oclvm::opencl {

// One operand of a row-major product, as CLBlast reads it: element (i, j) of op(M) lies at
// offset + i * ld + j when not transposed, offset + j * ld + i when transposed; matrix b of a
// batch starts batch_stride elements after matrix b - 1.
struct GemmMatrix {
  void* memory = nullptr;   // the buffer (cl_mem)
  size_t offset = 0;        // elements from the buffer's start to element (0, 0)
  size_t ld = 0;            // the leading dimension, in elements
  bool transposed = false;  // the stored matrix is op(M)'s transpose (never for c)
  size_t batch_stride = 0;  // elements between consecutive matrices (unused for one matrix)
};

// C := alpha * op(A) * op(B) + beta * C for `batch` matrices of m x n (op(A) m x k, op(B) k x n).
// With beta == 0, C's values are not used (CLBlast's kernels skip beta * C then; a batched product
// may still copy C into its scratch space), so C may hold anything before, NaN included.
struct GemmCall {
  DType dtype = DType::kF32;  // kF32 or kF64
  size_t batch = 1;
  size_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 0;  // converted to the dtype
  GemmMatrix a, b, c;
};

// Enqueues the product on `native_queue` (a cl_command_queue) without waiting for it. Throws
// InvalidArgument for a dtype other than kF32 and kF64; OutOfMemoryError when CLBlast reports the
// driver out of memory; BackendError carrying CLBlast's status for any other failure, naming the
// call and `where` (the device, "opencl:0").
void enqueue_gemm(void* native_queue, const GemmCall& call, const std::string& where);

}  // namespace oclvm::opencl
