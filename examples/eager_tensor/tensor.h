// examples/eager_tensor/tensor.h — a small eager tensor library on oclvm's TensorStorage.
//
// The worked example of design/embedding.md: what an eager tensor runtime keeps itself (shape,
// strides, dtype, storage offset) and what it leaves to oclvm (the memory, its statistics, the
// copies and fills, as instruction lists run on an oclvm::Runtime). It is built against the
// installed oclvm package (find_package(oclvm)), like any embedder's code.
//
//   eager::Tensor a = eager::Tensor::arange(runtime, 12, DType::kF32, device).view({3, 4});
//   eager::Tensor row = a.select(0, 1);        // a view: same TensorStorage, no copy
//   row.fill(-1);                              // one FillBlob per contiguous run of the view
//   eager::Tensor b = a.transpose(0, 1).copy_to(other_device);   // contiguous, on the other device
//   std::cout << b << "\n";                    // tensor([[...]], device='opencl:1', dtype=f32)
//
// Memory: a tensor holds a shared_ptr<oclvm::TensorStorage>; views copy it. When the last tensor
// of a storage dies, the storage's releaser hook runs a ReleaseTensor and the memory is back in
// the device's allocator before the destructor returns. Nothing here frees memory by hand.
//
// Layout: element (i0, i1, ...) lives at storage element storage_offset + sum(i_k * stride_k),
// strides in elements, every stride >= 0. Every operation that touches data walks the tensor as
// contiguous runs (the longest trailing block of dimensions laid out row-major) and emits one
// instruction per run, all in one list and one Runtime::run.
//
// Errors: bad arguments (a dimension out of range, a view of a non-contiguous tensor, a value
// the dtype cannot hold, a host type that is not the dtype) throw oclvm::InvalidArgument before
// anything runs; device errors come from oclvm as its exceptions.
//
// Thread-safety: a Tensor is a value (thread-compatible): distinct tensors may be used from
// different threads at once, also views of one storage as long as no two threads write
// overlapping elements. The Runtime a tensor was made with must outlive every operation on it;
// a tensor may be destroyed after it (the storage keeps what it needs alive).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <type_traits>
#include <vector>

#include "oclvm/oclvm.h"

namespace eager {

using oclvm::Device;
using oclvm::DType;
using Shape = oclvm::Dims;  // sizes or strides, in elements

// "[2, 3]", as messages print a shape.
std::string shape_text(const Shape& shape);
// The storage elements a layout reaches, [first, last], for a layout of at least one element.
std::pair<int64_t, int64_t> element_span(const Shape& shape, const Shape& strides, int64_t offset);

// The DType of a C++ element type (float f32, double f64, int8_t i8, uint8_t u8, int16_t i16,
// int32_t i32, int64_t i64, bool). f16 and bf16 have no C++ type here: use Tensor::to_doubles.
template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }
template <> constexpr DType dtype_of<int8_t>() { return DType::kI8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }
template <> constexpr DType dtype_of<int16_t>() { return DType::kI16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<bool>() { return DType::kBool; }

class Tensor {
 public:
  // ---- Creation (each allocates a new storage through runtime.create_storage) ----------------
  // Uninitialised contents.
  static Tensor empty(oclvm::Runtime& runtime, const Shape& shape, DType dtype, Device device);
  static Tensor full(oclvm::Runtime& runtime, const Shape& shape, double value, DType dtype,
                     Device device);
  static Tensor zeros(oclvm::Runtime& runtime, const Shape& shape, DType dtype, Device device);
  // 0, 1, ..., n - 1 as a 1-D tensor (an integer dtype must hold n - 1 exactly; a floating one
  // rounds as a conversion would, and must not overflow).
  static Tensor arange(oclvm::Runtime& runtime, int64_t n, DType dtype, Device device);
  // A contiguous tensor of `shape` holding `values` (row-major); values.size() must equal the
  // number of elements.
  template <typename T>
  static Tensor from_host(oclvm::Runtime& runtime, std::span<const T> values, const Shape& shape,
                          Device device) {
    return from_host_bytes(runtime, values.data(), values.size(), dtype_of<T>(), shape, device);
  }

  // ---- Layout ----------------------------------------------------------------------------------
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t storage_offset() const { return storage_offset_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  // The Runtime the tensor was made with (operations make their results with it).
  oclvm::Runtime& runtime() const { return *runtime_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const;
  bool is_contiguous() const;
  // The shared front-end owner of the memory; views of one tensor return the same pointer.
  const std::shared_ptr<oclvm::TensorStorage>& storage() const { return storage_; }
  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }

  // ---- Views (share the storage; nothing is copied or allocated) -------------------------------
  // Elements start, start + step, ... below end along `dim` (0 <= start <= end <= size, step > 0;
  // a negative dim counts from the back).
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  // Index `index` of `dim`, which disappears (a negative index counts from the back).
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  // The same elements with another shape; one dimension may be -1 (inferred). Only for a
  // contiguous tensor (else InvalidArgument: use contiguous() first).
  Tensor view(const Shape& shape) const;

  // ---- Data ------------------------------------------------------------------------------------
  // Sets every element of this tensor (a view: only its elements) to `value`, converted to the
  // dtype (InvalidArgument when the dtype cannot hold it: 300 in u8, 0.5 in i32, NaN in i64,
  // 1e5 in f16). f16 and bf16 values are rounded to float first, then to 16 bits (a value
  // within a rounding step of a 16-bit tie can round differently from a direct rounding).
  Tensor& fill(double value);
  // Copies `src` (same shape; any dtype equal to this one; any device) into this tensor's
  // elements, on this tensor's device.
  Tensor& copy_from(const Tensor& src);
  // A new contiguous tensor on `device` with this tensor's elements (device to device on one
  // device, staged through the host across devices: oclvm's CopyBlob).
  Tensor copy_to(Device device) const;
  // This tensor if contiguous, else a contiguous copy on the same device.
  Tensor contiguous() const;
  // The elements in row-major order. to_host<T> requires dtype_of<T>() == dtype().
  template <typename T>
  std::vector<T> to_host() const {
    std::vector<T> out(static_cast<size_t>(numel()));
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> has no data()
      std::vector<uint8_t> bytes(out.size());
      read_elements(DType::kBool, bytes.data());
      for (size_t i = 0; i < out.size(); ++i) out[i] = bytes[i] != 0;
    } else {
      read_elements(dtype_of<T>(), out.data());
    }
    return out;
  }
  // The elements in row-major order as doubles (every dtype; i64 beyond 2^53 loses precision).
  std::vector<double> to_doubles() const;

  // PyTorch-style text: tensor([[0., 1.], [2., 3.]], device='opencl:0', dtype=f32). Tensors of
  // more than 1000 elements show the first and last 3 entries of each dimension, with "...".
  std::string to_string() const;

 private:
  Tensor(oclvm::Runtime& runtime, std::shared_ptr<oclvm::TensorStorage> storage, Shape shape,
         Shape strides, int64_t storage_offset, DType dtype);
  static Tensor from_host_bytes(oclvm::Runtime& runtime, const void* values, size_t count,
                                DType dtype, const Shape& shape, Device device);
  // Downloads the elements in row-major order into `out` (numel() elements of `as`).
  void read_elements(DType as, void* out) const;
  Tensor with_layout(Shape shape, Shape strides, int64_t storage_offset) const;
  // Uploads numel() elements, row-major, into this contiguous tensor.
  void write_all(const void* values);

  oclvm::Runtime* runtime_;
  std::shared_ptr<oclvm::TensorStorage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t storage_offset_;
  DType dtype_;
};

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

// Dtype conversions the example needs (IEEE half and bfloat16 with round-to-nearest-even).
uint16_t float_to_half(float value);
float half_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(uint16_t bits);

}  // namespace eager
