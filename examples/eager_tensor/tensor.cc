// examples/eager_tensor/tensor.cc — layout arithmetic, contiguous runs, and the instruction lists
// that move and set data. See tensor.h.
#include "tensor.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <utility>

#include "ops.h"

namespace eager {

std::string shape_text(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

std::pair<int64_t, int64_t> element_span(const Shape& shape, const Shape& strides, int64_t offset) {
  int64_t last = offset;
  for (size_t d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * strides[d];
  return {offset, last};
}

namespace {

using oclvm::InvalidArgument;

// Number of elements of `shape`. Throws InvalidArgument for a negative size or an overflow.
int64_t checked_numel(const Shape& shape) {
  int64_t numel = 1;
  for (int64_t size : shape) {
    if (size < 0 || __builtin_mul_overflow(numel, size, &numel)) {
      throw InvalidArgument("Expected sizes >= 0 whose product fits in int64, but got " +
                            shape_text(shape));
    }
  }
  return numel;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* operation) {
  const int64_t wrapped = dim < 0 ? dim + ndim : dim;
  if (wrapped < 0 || wrapped >= ndim) {
    throw InvalidArgument(std::string("Expected a dimension in [") + std::to_string(-ndim) + ", " +
                          std::to_string(ndim) + ") for " + operation + ", but got " +
                          std::to_string(dim));
  }
  return wrapped;
}

// Calls fn(first, count) for the elements of the layout in row-major order, grouped into maximal
// runs of `count` consecutive storage elements starting at storage element `first`. The run is
// the trailing block of dimensions that is laid out row-major (size-1 dimensions belong to it
// whatever their stride); the dimensions before it are walked like an odometer.
template <typename Fn>
void for_each_run(const Shape& shape, const Shape& strides, int64_t offset, Fn&& fn) {
  for (int64_t size : shape) {
    if (size == 0) return;
  }
  int64_t run = 1;
  size_t outer = shape.size();  // dimensions [0, outer) are walked
  while (outer > 0 && (shape[outer - 1] == 1 || strides[outer - 1] == run)) {
    run *= shape[outer - 1];
    --outer;
  }
  std::vector<int64_t> index(outer, 0);
  int64_t first = offset;
  for (;;) {
    fn(first, run);
    size_t d = outer;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++index[d] < shape[d]) {
        first += strides[d];
        break;
      }
      first -= strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

template <typename Int>
uint64_t encode_integer(double value, DType dtype) {
  // Every bound is exact in a double: the powers of two around int64, the others small.
  const double low = static_cast<double>(std::numeric_limits<Int>::min());
  const double high_exclusive = static_cast<double>(std::numeric_limits<Int>::max()) + 1.0;
  if (!(std::trunc(value) == value && value >= low && value < high_exclusive)) {
    throw InvalidArgument(std::string("Expected a value that ") + oclvm::dtype_name(dtype) +
                          " holds exactly, but got " + std::to_string(value));
  }
  return static_cast<uint64_t>(static_cast<Int>(value));
}

[[noreturn]] void throw_overflow(double value, DType dtype) {
  throw InvalidArgument(std::string("Expected a value that ") + oclvm::dtype_name(dtype) +
                        " holds without overflow, but got " + std::to_string(value));
}

// `value` rounded to float; a finite value beyond float's range is refused (the conversion would
// be undefined behaviour, and the element infinite).
float narrow(double value, DType dtype) {
  if (std::isfinite(value) && std::fabs(value) > std::numeric_limits<float>::max()) {
    throw_overflow(value, dtype);
  }
  return static_cast<float>(value);
}

// A 16-bit float from `convert`, refusing a finite value that rounds to infinity.
uint16_t encode_16(double value, DType dtype, uint16_t (*convert)(float), uint16_t infinity) {
  const uint16_t bits = convert(narrow(value, dtype));
  if (std::isfinite(value) && (bits & 0x7fffu) == infinity) throw_overflow(value, dtype);
  return bits;
}

// `value` as the bits of one element of `dtype` (the low dtype_size bytes count).
uint64_t encode(double value, DType dtype) {
  switch (dtype) {
    case DType::kF32: return std::bit_cast<uint32_t>(narrow(value, dtype));
    case DType::kF64: return std::bit_cast<uint64_t>(value);
    case DType::kF16: return encode_16(value, dtype, &float_to_half, 0x7c00u);
    case DType::kBF16: return encode_16(value, dtype, &float_to_bfloat16, 0x7f80u);
    case DType::kI8: return encode_integer<int8_t>(value, dtype);
    case DType::kU8: return encode_integer<uint8_t>(value, dtype);
    case DType::kI16: return encode_integer<int16_t>(value, dtype);
    case DType::kI32: return encode_integer<int32_t>(value, dtype);
    case DType::kI64: return encode_integer<int64_t>(value, dtype);
    case DType::kBool: return value != 0.0 ? 1 : 0;
  }
  throw InvalidArgument("Expected a known dtype, but got " +
                        std::to_string(static_cast<int>(dtype)));
}

template <typename T>
double load(const uint8_t* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return static_cast<double>(value);
}

uint16_t load_bits16(const uint8_t* bytes) {
  uint16_t bits;
  std::memcpy(&bits, bytes, sizeof(bits));
  return bits;
}

double decode(const uint8_t* bytes, DType dtype) {
  switch (dtype) {
    case DType::kF32: return load<float>(bytes);
    case DType::kF64: return load<double>(bytes);
    case DType::kF16: return half_to_float(load_bits16(bytes));
    case DType::kBF16: return bfloat16_to_float(load_bits16(bytes));
    case DType::kI8: return load<int8_t>(bytes);
    case DType::kU8: return load<uint8_t>(bytes);
    case DType::kI16: return load<int16_t>(bytes);
    case DType::kI32: return load<int32_t>(bytes);
    case DType::kI64: return load<int64_t>(bytes);
    case DType::kBool: return bytes[0] != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

// An integer element (every integer dtype fits in int64).
int64_t decode_integer(const uint8_t* bytes, DType dtype) {
  auto load_exact = [bytes](auto zero) {
    decltype(zero) value;
    std::memcpy(&value, bytes, sizeof(value));
    return static_cast<int64_t>(value);
  };
  switch (dtype) {
    case DType::kI8: return load_exact(int8_t{0});
    case DType::kU8: return load_exact(uint8_t{0});
    case DType::kI16: return load_exact(int16_t{0});
    case DType::kI32: return load_exact(int32_t{0});
    case DType::kI64: return load_exact(int64_t{0});
    case DType::kBool: return bytes[0] != 0 ? 1 : 0;
    default: break;
  }
  throw InvalidArgument(std::string("Expected an integer dtype, but got ") +
                        oclvm::dtype_name(dtype));
}

bool is_floating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kF16 ||
         dtype == DType::kBF16;
}

// ---- Printing ----------------------------------------------------------------------------------

constexpr int64_t kSummarizeAbove = 1000;  // elements; PyTorch's default threshold
constexpr int64_t kEdgeItems = 3;

// Formats the elements of a tensor, given as bytes in row-major order. Integers are printed from
// their bytes (exact for every i64); floating-point cells share one format chosen from the cells
// shown, as PyTorch's: "3." when all are integral, "3.2500" otherwise, "3.2500e+09" when the
// largest magnitude is at least 1e8 or the smallest non-zero one below 1e-4.
class Printer {
 public:
  Printer(const Tensor& tensor, const std::vector<uint8_t>& bytes)
      : shape_(tensor.shape()),
        strides_(oclvm::contiguous_strides(tensor.shape())),
        bytes_(bytes),
        dtype_(tensor.dtype()),
        size_(oclvm::dtype_size(tensor.dtype())),
        summarize_(tensor.numel() > kSummarizeAbove) {
    if (is_floating(dtype_)) {
      bool all_integral = true;
      double largest = 0.0;
      double smallest_nonzero = 0.0;
      visit_shown(0, 0, [&](size_t index) {
        const double v = value(index);
        if (!std::isfinite(v)) return;
        all_integral = all_integral && std::trunc(v) == v;
        const double magnitude = std::fabs(v);
        largest = std::max(largest, magnitude);
        if (magnitude > 0.0 && (smallest_nonzero == 0.0 || magnitude < smallest_nonzero)) {
          smallest_nonzero = magnitude;
        }
      });
      scientific_ = largest >= 1e8 || (smallest_nonzero > 0.0 && smallest_nonzero < 1e-4);
      integral_floats_ = all_integral && !scientific_;
    }
    visit_shown(0, 0, [&](size_t index) { width_ = std::max(width_, cell(index).size()); });
  }

  // The nested brackets; `indent` is the column of the outermost '['.
  std::string body(size_t indent) const { return dim_text(0, 0, indent); }

 private:
  // Indices of dimension `dim` that are printed; -1 stands for "...".
  std::vector<int64_t> shown(size_t dim) const {
    const int64_t size = shape_[dim];
    std::vector<int64_t> indices;
    if (summarize_ && size > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) indices.push_back(i);
      indices.push_back(-1);
      for (int64_t i = size - kEdgeItems; i < size; ++i) indices.push_back(i);
    } else {
      for (int64_t i = 0; i < size; ++i) indices.push_back(i);
    }
    return indices;
  }

  // Calls fn(row-major element index) for every element shown.
  template <typename Fn>
  void visit_shown(size_t dim, int64_t base, Fn&& fn) const {
    if (dim == shape_.size()) {
      fn(static_cast<size_t>(base));
      return;
    }
    for (int64_t i : shown(dim)) {
      if (i >= 0) visit_shown(dim + 1, base + i * strides_[dim], fn);
    }
  }

  const uint8_t* element(size_t index) const { return bytes_.data() + index * size_; }
  double value(size_t index) const { return decode(element(index), dtype_); }

  std::string cell(size_t index) const {
    if (dtype_ == DType::kBool) return element(index)[0] != 0 ? "True" : "False";
    if (!is_floating(dtype_)) return std::to_string(decode_integer(element(index), dtype_));
    const double v = value(index);
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char text[64];
    std::snprintf(text, sizeof(text), scientific_ ? "%.4e" : integral_floats_ ? "%.0f." : "%.4f", v);
    return text;
  }

  std::string padded(std::string text) const {
    if (text.size() < width_) text.insert(0, width_ - text.size(), ' ');
    return text;
  }

  std::string dim_text(size_t dim, int64_t base, size_t indent) const {
    if (shape_.empty()) return cell(0);
    const bool innermost = dim + 1 == shape_.size();
    // Rows of a matrix end in one newline, matrices of a 3-D tensor in two, and so on.
    const std::string separator = innermost ? ", "
                                            : "," + std::string(shape_.size() - dim - 1, '\n') +
                                                  std::string(indent + dim + 1, ' ');
    std::string text = "[";
    bool first = true;
    for (int64_t i : shown(dim)) {
      if (!first) text += separator;
      first = false;
      if (i < 0) {
        text += "...";
      } else if (innermost) {
        text += padded(cell(static_cast<size_t>(base + i)));
      } else {
        text += dim_text(dim + 1, base + i * strides_[dim], indent);
      }
    }
    return text + "]";
  }

  const Shape& shape_;
  const Shape strides_;  // of the row-major bytes_
  const std::vector<uint8_t>& bytes_;
  const DType dtype_;
  const size_t size_;
  const bool summarize_;
  bool scientific_ = false;
  bool integral_floats_ = true;
  size_t width_ = 0;
};

}  // namespace

// ---- Dtype conversions -------------------------------------------------------------------

uint16_t float_to_half(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exponent = (x >> 23) & 0xffu;
  uint32_t mantissa = x & 0x7fffffu;
  if (exponent == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
  const int32_t e = static_cast<int32_t>(exponent) - 127 + 15;  // the half's biased exponent
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);   // too large: infinity
  if (e <= 0) {
    // A half subnormal (or zero): mantissa * 2^-24, from the float's 24-bit significand.
    if (e < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry up to infinity
  return static_cast<uint16_t>(half);
}

float half_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t float_to_bfloat16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bfloat16_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// ---- Creation ----------------------------------------------------------------------------

Tensor::Tensor(oclvm::Runtime& runtime, std::shared_ptr<oclvm::TensorStorage> storage, Shape shape,
               Shape strides, int64_t storage_offset, DType dtype)
    : runtime_(&runtime),
      storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      storage_offset_(storage_offset),
      dtype_(dtype) {}

Tensor Tensor::empty(oclvm::Runtime& runtime, const Shape& shape, DType dtype, Device device) {
  const int64_t numel = checked_numel(shape);
  std::shared_ptr<oclvm::TensorStorage> storage =
      runtime.create_storage(device, Shape{numel}, dtype);
  return Tensor(runtime, std::move(storage), shape, oclvm::contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::full(oclvm::Runtime& runtime, const Shape& shape, double value, DType dtype,
                    Device device) {
  encode(value, dtype);  // refuse a value the dtype cannot hold before allocating
  Tensor tensor = empty(runtime, shape, dtype, device);
  tensor.fill(value);
  return tensor;
}

Tensor Tensor::zeros(oclvm::Runtime& runtime, const Shape& shape, DType dtype, Device device) {
  return full(runtime, shape, 0.0, dtype, device);
}

Tensor Tensor::arange(oclvm::Runtime& runtime, int64_t n, DType dtype, Device device) {
  if (n < 0) throw InvalidArgument("Expected arange(n) with n >= 0, but got " + std::to_string(n));
  if (n > 0) encode(static_cast<double>(n - 1), dtype);  // the largest value must fit
  Tensor tensor = empty(runtime, Shape{n}, dtype, device);  // the size is checked here
  const size_t size = oclvm::dtype_size(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * size);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = encode(static_cast<double>(i), dtype);
    std::memcpy(bytes.data() + static_cast<size_t>(i) * size, &bits, size);  // little-endian
  }
  tensor.write_all(bytes.data());
  return tensor;
}

Tensor Tensor::from_host_bytes(oclvm::Runtime& runtime, const void* values, size_t count,
                               DType dtype, const Shape& shape, Device device) {
  const int64_t numel = checked_numel(shape);
  if (static_cast<uint64_t>(numel) != count) {
    throw InvalidArgument("Expected " + std::to_string(numel) + " values for shape " +
                          shape_text(shape) + ", but got " + std::to_string(count));
  }
  Tensor tensor = empty(runtime, shape, dtype, device);
  tensor.write_all(values);
  return tensor;
}

void Tensor::write_all(const void* values) {
  if (numel() == 0) return;
  oclvm::InstructionsBuilder builder = runtime_->builder();
  builder.copy_host_to_device(values, storage_->blob(),
                              static_cast<size_t>(storage_offset_) * oclvm::dtype_size(dtype_),
                              static_cast<size_t>(numel()) * oclvm::dtype_size(dtype_));
  runtime_->run(builder.take());
}

// ---- Layout ----------------------------------------------------------------------------------

Device Tensor::device() const { return storage_->blob()->device(); }

int64_t Tensor::numel() const {
  int64_t numel = 1;
  for (int64_t size : shape_) numel *= size;
  return numel;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t d = shape_.size(); d-- > 0;) {
    if (shape_[d] == 0) return true;
    if (shape_[d] == 1) continue;
    if (strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

// ---- Views -----------------------------------------------------------------------------------

Tensor Tensor::with_layout(Shape shape, Shape strides, int64_t storage_offset) const {
  return Tensor(*runtime_, storage_, std::move(shape), std::move(strides), storage_offset, dtype_);
}

Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  const int64_t d = wrap_dim(dim, this->dim(), "slice");
  const int64_t size = shape_[d];
  if (start < 0) start += size;
  if (end < 0) end += size;
  if (step <= 0 || start < 0 || end > size || start > end) {
    throw InvalidArgument("Expected 0 <= start <= end <= " + std::to_string(size) +
                          " and step > 0 for a slice of dimension " + std::to_string(d) +
                          ", but got start " + std::to_string(start) + ", end " +
                          std::to_string(end) + ", step " + std::to_string(step));
  }
  Shape shape = shape_;
  Shape strides = strides_;
  // No overflow for any step: the stride is scaled only when a second element exists, and then
  // step < size.
  shape[d] = end == start ? 0 : 1 + (end - start - 1) / step;
  if (shape[d] > 1) strides[d] = strides_[d] * step;
  return with_layout(std::move(shape), std::move(strides), storage_offset_ + start * strides_[d]);
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  const int64_t d = wrap_dim(dim, this->dim(), "select");
  const int64_t size = shape_[d];
  const int64_t wrapped = index < 0 ? index + size : index;
  if (wrapped < 0 || wrapped >= size) {
    throw InvalidArgument("Expected an index in [" + std::to_string(-size) + ", " +
                          std::to_string(size) + ") for dimension " + std::to_string(d) +
                          ", but got " + std::to_string(index));
  }
  Shape shape = shape_;
  Shape strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return with_layout(std::move(shape), std::move(strides), storage_offset_ + wrapped * strides_[d]);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  const int64_t a = wrap_dim(dim0, dim(), "transpose");
  const int64_t b = wrap_dim(dim1, dim(), "transpose");
  Shape shape = shape_;
  Shape strides = strides_;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return with_layout(std::move(shape), std::move(strides), storage_offset_);
}

Tensor Tensor::view(const Shape& requested) const {
  if (!is_contiguous()) {
    throw InvalidArgument("Expected a contiguous tensor for view(" + shape_text(requested) +
                          "), but got strides " + shape_text(strides_) + " for shape " +
                          shape_text(shape_) + "; call contiguous() first");
  }
  Shape shape = requested;
  int64_t known = 1;
  int64_t inferred = -1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1 && inferred < 0) {
      inferred = static_cast<int64_t>(d);
    } else if (shape[d] < 0 || __builtin_mul_overflow(known, shape[d], &known)) {
      throw InvalidArgument("Expected sizes >= 0 and at most one -1 in view(), but got " +
                            shape_text(requested));
    }
  }
  if (inferred >= 0) {
    if (known == 0 || numel() % known != 0) {
      throw InvalidArgument("Expected a shape that " + std::to_string(numel()) +
                            " elements fill, but got " + shape_text(requested));
    }
    shape[static_cast<size_t>(inferred)] = numel() / known;
    known = numel();
  }
  if (known != numel()) {
    throw InvalidArgument("Expected a shape of " + std::to_string(numel()) +
                          " elements for view(), but got " + shape_text(requested));
  }
  Shape strides = oclvm::contiguous_strides(shape);
  return with_layout(std::move(shape), std::move(strides), storage_offset_);
}

// ---- Data ------------------------------------------------------------------------------------

Tensor& Tensor::fill(double value) {
  const uint64_t pattern = encode(value, dtype_);
  const size_t size = oclvm::dtype_size(dtype_);
  oclvm::InstructionsBuilder builder = runtime_->builder();
  for_each_run(shape_, strides_, storage_offset_, [&](int64_t first, int64_t count) {
    builder.fill(storage_->blob(), static_cast<size_t>(first) * size,
                 static_cast<size_t>(count) * size, pattern, size);
  });
  runtime_->run(builder.take());
  return *this;
}

Tensor& Tensor::copy_from(const Tensor& src) {
  if (src.shape_ != shape_ || src.dtype_ != dtype_) {
    throw InvalidArgument("Expected a source of shape " + shape_text(shape_) + " and dtype " +
                          oclvm::dtype_name(dtype_) + ", but got shape " + shape_text(src.shape_) +
                          " and dtype " + oclvm::dtype_name(src.dtype_));
  }
  // The copies below run one after another: a source sharing this storage is cloned first, so
  // that no run reads what an earlier run wrote.
  const Tensor unaliased = shares_storage_with(src) ? src.copy_to(src.device()) : src;
  if (src.device() != device() && !unaliased.is_contiguous()) {
    // Pack it on its own device first (device copies), so that what crosses devices (staged
    // through the host) is one block, not one copy per run.
    return copy_from(unaliased.contiguous());
  }
  // Either this tensor is one block and the source's runs are walked, or the source is made one
  // block and this tensor's runs are walked.
  const bool walk_source = is_contiguous();
  const Tensor source = walk_source ? unaliased : unaliased.contiguous();
  const size_t size = oclvm::dtype_size(dtype_);
  oclvm::InstructionsBuilder builder = runtime_->builder();
  auto copy = [&](int64_t src_first, int64_t dst_first, int64_t count) {
    builder.copy(source.storage_->blob(), static_cast<size_t>(src_first) * size,
                 storage_->blob(), static_cast<size_t>(dst_first) * size,
                 static_cast<size_t>(count) * size);
  };
  if (walk_source) {
    int64_t position = storage_offset_;
    for_each_run(source.shape_, source.strides_, source.storage_offset_,
                 [&](int64_t first, int64_t count) {
                   copy(first, position, count);
                   position += count;
                 });
  } else {
    int64_t position = source.storage_offset_;
    for_each_run(shape_, strides_, storage_offset_, [&](int64_t first, int64_t count) {
      copy(position, first, count);
      position += count;
    });
  }
  runtime_->run(builder.take());
  return *this;
}

Tensor Tensor::copy_to(Device device) const {
  Tensor result = empty(*runtime_, shape_, dtype_, device);
  result.copy_from(*this);
  return result;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : copy_to(device()); }

void Tensor::read_elements(DType as, void* out) const {
  if (as != dtype_) {
    throw InvalidArgument(std::string("Expected to_host<T> with T of dtype ") +
                          oclvm::dtype_name(dtype_) + ", but got T of dtype " +
                          oclvm::dtype_name(as));
  }
  if (numel() == 0) return;
  synchronize(*runtime_);  // the errors of kernels submitted before (ops.h)
  // One download of the storage span the tensor reaches, then a gather of its runs on the host.
  const size_t size = oclvm::dtype_size(dtype_);
  // Not a structured binding: the lambda below captures `first` (clang before 16 refuses that).
  const std::pair<int64_t, int64_t> reached = element_span(shape_, strides_, storage_offset_);
  const int64_t first = reached.first;
  const int64_t last = reached.second;
  std::vector<uint8_t> span(static_cast<size_t>(last - first + 1) * size);
  oclvm::InstructionsBuilder builder = runtime_->builder();
  builder.copy_device_to_host(storage_->blob(), static_cast<size_t>(first) * size, span.data(),
                              span.size());
  runtime_->run(builder.take());
  auto* dst = static_cast<uint8_t*>(out);
  for_each_run(shape_, strides_, storage_offset_, [&](int64_t run_first, int64_t count) {
    const size_t bytes = static_cast<size_t>(count) * size;
    std::memcpy(dst, span.data() + static_cast<size_t>(run_first - first) * size, bytes);
    dst += bytes;
  });
}

std::vector<double> Tensor::to_doubles() const {
  const size_t size = oclvm::dtype_size(dtype_);
  std::vector<uint8_t> bytes(static_cast<size_t>(numel()) * size);
  read_elements(dtype_, bytes.data());
  std::vector<double> values(static_cast<size_t>(numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = decode(bytes.data() + i * size, dtype_);
  return values;
}

std::string Tensor::to_string() const {
  const std::string suffix =
      "device='" + device().str() + "', dtype=" + oclvm::dtype_name(dtype_) + ")";
  if (numel() == 0) return "tensor([], size=" + shape_text(shape_) + ", " + suffix;
  std::vector<uint8_t> bytes(static_cast<size_t>(numel()) * oclvm::dtype_size(dtype_));
  read_elements(dtype_, bytes.data());
  const std::string prefix = "tensor(";
  return prefix + Printer(*this, bytes).body(prefix.size()) + ", " + suffix;
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  return out << tensor.to_string();
}

}  // namespace eager
