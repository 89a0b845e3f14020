// storage/opencl/gemm.cc — enqueue_gemm (gemm.h): one CLBlast call, Gemm or GemmStridedBatched,
// and its status turned into oclvm's errors.
#include "oclvm/storage/opencl/gemm.h"

#include <clblast.h>

#include <string>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/opencl/cl_check.h"

namespace oclvm::opencl {
namespace {

clblast::Transpose transpose_of(const GemmMatrix& matrix) {
  return matrix.transposed ? clblast::Transpose::kYes : clblast::Transpose::kNo;
}

template <typename T>
clblast::StatusCode enqueue(cl_command_queue queue, const GemmCall& call) {
  const auto memory = [](const GemmMatrix& matrix) { return static_cast<cl_mem>(matrix.memory); };
  const T alpha = static_cast<T>(call.alpha), beta = static_cast<T>(call.beta);
  const GemmMatrix &a = call.a, &b = call.b, &c = call.c;
  if (call.batch == 1) {
    return clblast::Gemm<T>(clblast::Layout::kRowMajor, transpose_of(a), transpose_of(b), call.m,
                            call.n, call.k, alpha, memory(a), a.offset, a.ld, memory(b), b.offset,
                            b.ld, beta, memory(c), c.offset, c.ld, &queue, nullptr);
  }
  return clblast::GemmStridedBatched<T>(
      clblast::Layout::kRowMajor, transpose_of(a), transpose_of(b), call.m, call.n, call.k, alpha,
      memory(a), a.offset, a.ld, a.batch_stride, memory(b), b.offset, b.ld, b.batch_stride, beta,
      memory(c), c.offset, c.ld, c.batch_stride, call.batch, &queue, nullptr);
}

}  // namespace

void enqueue_gemm(void* native_queue, const GemmCall& call, const std::string& where) {
  cl_command_queue queue = static_cast<cl_command_queue>(native_queue);
  clblast::StatusCode status;
  if (call.dtype == DType::kF32) {
    status = enqueue<float>(queue, call);
  } else if (call.dtype == DType::kF64) {
    status = enqueue<double>(queue, call);
  } else {
    throw InvalidArgument(std::string("Expected f32 or f64 matrices for a CLBlast product, but got ") +
                          dtype_name(call.dtype));
  }
  if (status == clblast::StatusCode::kSuccess) return;
  const int code = static_cast<int>(status);
  const char* const routine = call.batch == 1 ? "clblast::Gemm" : "clblast::GemmStridedBatched";
  // CLBlast passes the driver's codes on as they are; kTempBufferAllocFailure is
  // CL_MEM_OBJECT_ALLOCATION_FAILURE.
  if (is_out_of_memory(code)) {
    throw OutOfMemoryError(std::string("Out of memory: ") + routine + " on " + where + " (" +
                           cl_error_name(code) + ")");
  }
  throw BackendError(std::string(routine) + " failed on " + where + " with CLBlast status " +
                         std::to_string(code),
                     code);
}

}  // namespace oclvm::opencl
