// storage/opencl/cl_check.h — the one way oclvm checks an OpenCL call.
//
// Every OpenCL call in oclvm goes through check_cl (directly or via OCLVM_CL_CHECK), which turns
// a non-success code into an exception naming the call, the error and the device:
//   "clEnqueueWriteBuffer failed with CL_INVALID_VALUE (-30) on opencl:0"
// CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES and CL_OUT_OF_HOST_MEMORY become
// OutOfMemoryError; every other code becomes BackendError carrying the cl_int.
//
// Thread-safety: stateless.
#pragma once

#include <CL/opencl.hpp>

#include <string>

#include "oclvm/storage/device.h"

namespace oclvm::opencl {

// "CL_INVALID_VALUE" for -30; "CL_UNKNOWN_ERROR" for codes this table does not know.
const char* cl_error_name(cl_int code);

// True for the codes that mean the device or host ran out of memory.
bool is_out_of_memory(cl_int code);

// The message check_cl throws with; exposed for release paths that must not throw.
std::string describe_cl_error(cl_int code, const char* call, const std::string& where);

// Throws (see above) unless code == CL_SUCCESS. `where` names the device ("opencl:0") or, during
// discovery, the platform.
void check_cl(cl_int code, const char* call, const std::string& where);

}  // namespace oclvm::opencl

// Runs an OpenCL C API call and checks its result: OCLVM_CL_CHECK(clFinish(q), device_name).
#define OCLVM_CL_CHECK(call, where) ::oclvm::opencl::check_cl((call), #call, (where))
