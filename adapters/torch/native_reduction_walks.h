// adapters/torch/native_reduction_walks.h — what the native path's row-reduction kernels share
// (native_reduce.cc, native_statistics.cc): the merged walk over a reduction's kept and reduced
// dimensions, the kernels' ids, and the OpenCL C and arguments that find each work-item's
// elements. Defined in native_reduce.cc.
//
// Thread-safety: pure functions; any thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "adapters/torch/native_kernel_table.h"

namespace oclvm::torch_adapter {

// Dimensions of one kind, merged: their sizes, and each operand's strides in elements (the
// result's, self's, and a second input's; 0 where an operand does not walk them).
struct Walk {
  size_t rank = 0;
  std::array<int64_t, kMaxRank> sizes{};
  std::array<std::array<int64_t, kMaxRank>, 3> strides{};  // out, a, b
};

// Adds a dimension to `walk`, merged into the last one when every operand steps over both as one;
// false past kMaxRank dimensions.
bool add_dimension(Walk& walk, int64_t size, const std::array<int64_t, 3>& strides);

// The row-reduction kernels; their ids put the kernel above the dtypes and ranks.
enum class RowOp : uint64_t {
  kSum,
  kSoftmax,
  kSoftmaxBackward,
  kAll,
  kLogSoftmax,
  kLogSoftmaxBackward,
  kAny,
  kMax,  // the extreme kernels: their ids add what they write
  kMin,
  kMoments,  // var, std and their means: the id adds what it writes
  kNorm,     // linalg_vector_norm: the id adds its order's kind
};

// A kernel's id (below 2^44; a kernel may add its variant above that).
uint64_t kernel_id(RowOp op, at::ScalarType in, at::ScalarType out, size_t kept, size_t reduced);

// The OpenCL C that finds a work-item's offsets (io, ia, ib: of its result, self and the second
// input) from its index over the kept dimensions (arguments ks<d>, ko<d>, ka<d>, kb<d>), and
// those parameters; push_kept adds their values.
std::string kept_offsets(size_t kept);
std::string kept_parameters(size_t kept);
void push_kept(std::vector<LaunchArg>& args, const Walk& kept);

// The kept and the reduced dimensions of a reduction of `self` over those `reduced` marks into
// `out` (of the CPU's shape for `keepdim`), merged, and the number of elements each result
// element reduces (`m`); false past kMaxRank dimensions of either kind.
bool reduction_walks(const at::Tensor& self, const std::vector<bool>& reduced, bool keepdim,
                     const at::Tensor& out, Walk& kept, Walk& summed, int64_t& m);

// The OpenCL C that finds element j's offset `ir` in self over the reduced dimensions (arguments
// rs<d>, ra<d>), and those parameters; push_reduced adds their values.
std::string reduced_offset(size_t reduced, const std::string& j);
std::string reduced_parameters(size_t reduced);
void push_reduced(std::vector<LaunchArg>& args, const Walk& summed);

}  // namespace oclvm::torch_adapter
