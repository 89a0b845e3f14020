// examples/eager_tensor/tensor_test.cc — tests of the eager tensor example, on real devices.
//
// Every test runs on a Runtime of its own; the fixture checks at the end that every byte came
// back (no live blob on any device) and that no storage was freed by a fallback path. The
// second device is opencl:1 when there are two OpenCL devices, else cpu.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "oclvm/oclvm.h"
#include "ops.h"
#include "tensor.h"

namespace eager {
namespace {


class TensorTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (Device device : runtime_.devices()) {
      const oclvm::DeviceStats stats = runtime_.stats(device);
      EXPECT_EQ(stats.allocation.aggregate().current, 0) << device.str();
      EXPECT_EQ(stats.allocated_bytes.aggregate().current, 0) << device.str();
    }
    EXPECT_EQ(oclvm::BlobStorage::destructor_releases(), 0u);
    EXPECT_EQ(oclvm::TensorStorage::failed_releases(), 0u);
  }

  int64_t live_bytes(Device device) {
    return runtime_.stats(device).allocated_bytes.aggregate().current;
  }

  oclvm::Runtime runtime_{oclvm::Options{}};
  const Device first_{oclvm::DeviceType::kOpenCL, 0};
  const Device second_ = runtime_.opencl_device_count() > 1
                             ? Device{oclvm::DeviceType::kOpenCL, 1}
                             : Device{oclvm::DeviceType::kCpu, 0};
};

std::vector<float> floats(std::initializer_list<float> values) { return values; }

TEST_F(TensorTest, ViewsShareTheStorageAndSeeEachOthersWrites) {
  Tensor a = Tensor::arange(runtime_, 12, DType::kF32, first_).view({3, 4});
  Tensor row = a[1];
  Tensor column = a.slice(1, 2, 3);
  Tensor t = a.transpose(0, 1);
  EXPECT_TRUE(row.shares_storage_with(a));
  EXPECT_TRUE(column.shares_storage_with(a));
  EXPECT_TRUE(t.shares_storage_with(a));
  EXPECT_EQ(row.storage().get(), a.storage().get());
  EXPECT_EQ(runtime_.stats(first_).allocation.aggregate().current, 1) << "views allocate nothing";

  EXPECT_EQ(row.shape(), Shape({4}));
  EXPECT_EQ(row.storage_offset(), 4);
  EXPECT_EQ(column.shape(), Shape({3, 1}));
  EXPECT_EQ(column.strides(), Shape({4, 1}));
  EXPECT_EQ(column.storage_offset(), 2);
  EXPECT_EQ(t.shape(), Shape({4, 3}));
  EXPECT_EQ(t.strides(), Shape({1, 4}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(row.is_contiguous());

  row.fill(-1);
  EXPECT_EQ(a.to_host<float>(), floats({0, 1, 2, 3, -1, -1, -1, -1, 8, 9, 10, 11}));
  column.fill(0.5);
  EXPECT_EQ(a.to_host<float>(), floats({0, 1, 0.5, 3, -1, -1, 0.5, -1, 8, 9, 0.5, 11}));
  EXPECT_EQ(t.to_host<float>(), floats({0, -1, 8, 1, -1, 9, 0.5, 0.5, 0.5, 3, -1, 11}));
}

TEST_F(TensorTest, SliceWithStepAndNegativeIndices) {
  Tensor a = Tensor::arange(runtime_, 10, DType::kI32, first_);
  EXPECT_EQ(a.slice(0, 1, 9, 3).to_host<int32_t>(), (std::vector<int32_t>{1, 4, 7}));
  EXPECT_EQ(a.slice(0, -3, 10).to_host<int32_t>(), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(a.select(0, -1).to_host<int32_t>(), (std::vector<int32_t>{9}));
  EXPECT_EQ(a.select(0, -1).dim(), 0);
  EXPECT_EQ(a.slice(0, 4, 4).numel(), 0);
  EXPECT_TRUE(a.slice(0, 4, 4).to_host<int32_t>().empty());
}

TEST_F(TensorTest, BadArgumentsThrowAndChangeNothing) {
  Tensor a = Tensor::arange(runtime_, 6, DType::kI64, first_).view({2, 3});
  const int64_t before = live_bytes(first_);
  EXPECT_THROW(a.select(2, 0), oclvm::InvalidArgument);
  EXPECT_THROW(a.select(0, 2), oclvm::InvalidArgument);
  EXPECT_THROW(a.slice(1, 2, 1), oclvm::InvalidArgument);
  EXPECT_THROW(a.slice(1, 0, 4), oclvm::InvalidArgument);
  EXPECT_THROW(a.slice(1, 0, 3, 0), oclvm::InvalidArgument);
  EXPECT_THROW(a.transpose(0, 1).view({6}), oclvm::InvalidArgument);
  EXPECT_THROW(a.view({4, -1}), oclvm::InvalidArgument);
  EXPECT_THROW(a.view({-1, -1}), oclvm::InvalidArgument);
  EXPECT_THROW(a.view({7}), oclvm::InvalidArgument);
  EXPECT_THROW(a.to_host<int32_t>(), oclvm::InvalidArgument);
  EXPECT_THROW(a.fill(0.5), oclvm::InvalidArgument);
  EXPECT_THROW(a.fill(std::nan("")), oclvm::InvalidArgument);
  EXPECT_THROW(a.copy_from(Tensor::zeros(runtime_, {3, 2}, DType::kI64, first_)),
               oclvm::InvalidArgument);
  EXPECT_THROW(Tensor::full(runtime_, {4}, 300, DType::kU8, first_), oclvm::InvalidArgument);
  EXPECT_THROW(Tensor::empty(runtime_, {2, -1}, DType::kF32, first_), oclvm::InvalidArgument);
  EXPECT_THROW(Tensor::arange(runtime_, 300, DType::kI8, first_), oclvm::InvalidArgument);
  const std::vector<float> three(3, 1.0f);
  EXPECT_THROW(Tensor::from_host<float>(runtime_, three, {2, 2}, first_), oclvm::InvalidArgument);
  EXPECT_THROW(Tensor::empty(runtime_, {4}, DType::kF32, Device{oclvm::DeviceType::kOpenCL, 99}),
               oclvm::InvalidArgument);
  EXPECT_EQ(live_bytes(first_), before);
  EXPECT_EQ(a.to_host<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST_F(TensorTest, CopyToAnotherDeviceMakesAContiguousCopy) {
  const std::vector<double> values = {1.5, -2, 3.25, 4, 5, 6};
  Tensor a = Tensor::from_host<double>(runtime_, values, {2, 3}, first_);
  Tensor b = a.transpose(0, 1).copy_to(second_);
  EXPECT_EQ(b.device(), second_);
  EXPECT_TRUE(b.is_contiguous());
  EXPECT_FALSE(b.shares_storage_with(a));
  EXPECT_EQ(b.shape(), Shape({3, 2}));
  EXPECT_EQ(b.to_host<double>(), (std::vector<double>{1.5, 4, -2, 5, 3.25, 6}));
  Tensor back = b.copy_to(first_);
  EXPECT_EQ(back.to_host<double>(), b.to_host<double>());
  b.fill(0);
  EXPECT_EQ(a.to_host<double>(), values) << "the copy owns its memory";
}

TEST_F(TensorTest, CopyFromIntoAStridedViewAcrossDevices) {
  Tensor a = Tensor::zeros(runtime_, {3, 4}, DType::kI32, first_);
  Tensor src = Tensor::arange(runtime_, 6, DType::kI32, second_).view({2, 3});
  a.slice(0, 1, 3).slice(1, 0, 4, 2).copy_from(src.slice(1, 0, 2));  // 2x2 into every other column
  EXPECT_EQ(a.to_host<int32_t>(), (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 1, 0, 3, 0, 4, 0}));
}

TEST_F(TensorTest, CopyFromAnOverlappingViewOfTheSameStorage) {
  Tensor a = Tensor::arange(runtime_, 5, DType::kI16, first_);
  a.slice(0, 1, 5).copy_from(a.slice(0, 0, 4));  // a shift right by one element
  EXPECT_EQ(a.to_host<int16_t>(), (std::vector<int16_t>{0, 0, 1, 2, 3}));
}

TEST_F(TensorTest, FillEveryDtype) {
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI8,
                          DType::kU8,  DType::kI16, DType::kI32,  DType::kI64, DType::kBool};
  for (DType dtype : dtypes) {
    SCOPED_TRACE(oclvm::dtype_name(dtype));
    Tensor t = Tensor::zeros(runtime_, {2, 5}, dtype, second_);
    t.slice(1, 1, 5, 2).fill(dtype == DType::kBool ? 1 : 3);
    const double x = dtype == DType::kBool ? 1 : 3;
    EXPECT_EQ(t.to_doubles(), (std::vector<double>{0, x, 0, x, 0, 0, x, 0, x, 0}));
  }
}

TEST_F(TensorTest, HalfAndBfloat16Conversions) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00) << "rounds up to infinity";
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001) << "the smallest subnormal";
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000) << "a tie rounds to even (zero)";
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00) << "a tie rounds to even";
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02) << "a tie rounds to even";
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {
    ASSERT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(bits))), bits);
  }
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(-3.5f)), -3.5f);
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80) << "a tie rounds to even";
}

TEST_F(TensorTest, PrintsLikePyTorch) {
  Tensor a = Tensor::arange(runtime_, 6, DType::kF32, first_).view({2, 3});
  EXPECT_EQ(a.to_string(),
            "tensor([[0., 1., 2.],\n"
            "        [3., 4., 5.]], device='opencl:0', dtype=f32)");
  a.select(0, 0).fill(-0.25);
  EXPECT_EQ(a.to_string(),
            "tensor([[-0.2500, -0.2500, -0.2500],\n"
            "        [ 3.0000,  4.0000,  5.0000]], device='opencl:0', dtype=f32)");
  Tensor cube = Tensor::arange(runtime_, 8, DType::kI64, second_).view({2, 2, 2});
  EXPECT_EQ(cube.to_string(),
            "tensor([[[0, 1],\n"
            "         [2, 3]],\n"
            "\n"
            "        [[4, 5],\n"
            "         [6, 7]]], device='" + second_.str() + "', dtype=i64)");
  EXPECT_EQ(Tensor::full(runtime_, {2}, 1, DType::kBool, first_).to_string(),
            "tensor([True, True], device='opencl:0', dtype=bool)");
  EXPECT_EQ(Tensor::full(runtime_, {}, 2.5, DType::kF16, first_).to_string(),
            "tensor(2.5000, device='opencl:0', dtype=f16)");
  EXPECT_EQ(Tensor::empty(runtime_, {0, 3}, DType::kF32, first_).to_string(),
            "tensor([], size=[0, 3], device='opencl:0', dtype=f32)");
  const std::string big = Tensor::arange(runtime_, 2000, DType::kI32, first_).to_string();
  EXPECT_EQ(big, "tensor([   0,    1,    2, ..., 1997, 1998, 1999], device='opencl:0', dtype=i32)");
}

// Regressions from a review of the example: each of these gave a wrong result or undefined
// behaviour before.
TEST_F(TensorTest, EdgeValuesPrintAndConvertExactly) {
  const std::vector<int64_t> extremes = {std::numeric_limits<int64_t>::max(),
                                         std::numeric_limits<int64_t>::min(), (1LL << 53) + 1};
  Tensor big = Tensor::from_host<int64_t>(runtime_, extremes, {3}, first_);
  EXPECT_EQ(big.to_string(),
            "tensor([ 9223372036854775807, -9223372036854775808,     9007199254740993], "
            "device='opencl:0', dtype=i64)");
  EXPECT_EQ(Tensor::full(runtime_, {2}, 1e300, DType::kF64, first_).to_string(),
            "tensor([1.0000e+300, 1.0000e+300], device='opencl:0', dtype=f64)");
  const std::vector<float> small = {1e-5f, 0.5f};
  EXPECT_EQ(Tensor::from_host<float>(runtime_, small, {2}, first_).to_string(),
            "tensor([1.0000e-05, 5.0000e-01], device='opencl:0', dtype=f32)");
  EXPECT_THROW(Tensor::full(runtime_, {2}, 1e10, DType::kF16, first_), oclvm::InvalidArgument);
  EXPECT_THROW(Tensor::full(runtime_, {2}, 65520, DType::kF16, first_), oclvm::InvalidArgument);
  EXPECT_THROW(Tensor::full(runtime_, {2}, 1e300, DType::kF32, first_), oclvm::InvalidArgument);
  EXPECT_THROW(Tensor::full(runtime_, {2}, 1e39, DType::kBF16, first_), oclvm::InvalidArgument);
  EXPECT_EQ(Tensor::full(runtime_, {1}, 65504, DType::kF16, first_).to_doubles()[0], 65504.0);
  EXPECT_TRUE(std::isinf(
      Tensor::full(runtime_, {1}, std::numeric_limits<double>::infinity(), DType::kF16, first_)
          .to_doubles()[0]))
      << "an infinite value stays allowed";
  std::vector<bool> flags = Tensor::full(runtime_, {3}, 1, DType::kBool, first_).to_host<bool>();
  EXPECT_EQ(flags, (std::vector<bool>{true, true, true}));
}

TEST_F(TensorTest, SlicesWithHugeStepsAndHugeArangesAreHandled) {
  Tensor a = Tensor::arange(runtime_, 5, DType::kI32, first_);
  Tensor one = a.slice(0, 0, 5, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(one.shape(), Shape({1}));
  EXPECT_EQ(one.to_host<int32_t>(), (std::vector<int32_t>{0}));
  EXPECT_EQ(a.slice(0, 1, 5, 3).to_host<int32_t>(), (std::vector<int32_t>{1, 4}));
  const int64_t before = live_bytes(first_);
  EXPECT_THROW(Tensor::arange(runtime_, (int64_t{1} << 62) + 1, DType::kF32, first_),
               oclvm::InvalidArgument);
  EXPECT_THROW(Tensor::arange(runtime_, 129, DType::kI8, first_), oclvm::InvalidArgument);
  EXPECT_EQ(live_bytes(first_), before);
}

TEST_F(TensorTest, TheLastTensorOfAStorageReleasesItsMemory) {
  const int64_t before = live_bytes(first_);
  auto a = std::make_unique<Tensor>(Tensor::zeros(runtime_, {256}, DType::kF32, first_));
  std::weak_ptr<oclvm::TensorStorage> storage = a->storage();
  EXPECT_EQ(live_bytes(first_) - before, 1024);
  Tensor view = a->slice(0, 128, 256);
  a.reset();
  EXPECT_FALSE(storage.expired()) << "the view keeps the storage";
  EXPECT_EQ(live_bytes(first_) - before, 1024);
  view = Tensor::zeros(runtime_, {1}, DType::kU8, second_);  // the last owner goes
  EXPECT_TRUE(storage.expired());
  EXPECT_EQ(live_bytes(first_), before) << "released through the releaser hook";
}

TEST(TensorLifetimeTest, TensorsMayOutliveTheirRuntime) {
  std::unique_ptr<Tensor> survivor;
  std::weak_ptr<oclvm::BlobStorage> memory;
  {
    oclvm::Runtime runtime{oclvm::Options{}};
    survivor = std::make_unique<Tensor>(
        Tensor::full(runtime, {64}, 2, DType::kF64, Device{oclvm::DeviceType::kOpenCL, 0}));
    memory = survivor->storage()->blob()->storage();
  }
  EXPECT_FALSE(memory.expired());
  survivor.reset();  // its ReleaseTensor runs here, on this thread, after the Runtime's shutdown
  EXPECT_TRUE(memory.expired());
  EXPECT_EQ(oclvm::BlobStorage::destructor_releases(), 0u);
}

// ---- Computing on the device (ops.h) -----------------------------------------------------------

// a OP b on the host, with broadcasting over row-major data of the given shapes.
std::vector<double> host_binary(const std::vector<double>& a, const Shape& sa,
                                const std::vector<double>& b, const Shape& sb, const Shape& out,
                                double (*op)(double, double)) {
  std::vector<double> result;
  const size_t rank = out.size();
  auto index_in = [&](const Shape& shape, const std::vector<int64_t>& at) {
    int64_t index = 0;
    const size_t pad = rank - shape.size();
    for (size_t d = 0; d < shape.size(); ++d) {
      index = index * shape[d] + (shape[d] == 1 ? 0 : at[pad + d]);
    }
    return static_cast<size_t>(index);
  };
  std::vector<int64_t> at(rank, 0);
  int64_t n = 1;
  for (int64_t size : out) n *= size;
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = i;
    for (size_t d = rank; d-- > 0;) {
      at[d] = r % out[d];
      r /= out[d];
    }
    result.push_back(op(a[index_in(sa, at)], b[index_in(sb, at)]));
  }
  return result;
}

TEST_F(TensorTest, ElementwiseOperationsBroadcastOverStridedViewsAsTheHostDoes) {
  // a: a transposed 3 x 4 view (strides 1, 3); b: every other column of a 1 x 8 row, stretched.
  Tensor base = Tensor::arange(runtime_, 12, DType::kF32, first_).view({4, 3});
  Tensor a = base.transpose(0, 1);
  Tensor row = Tensor::arange(runtime_, 8, DType::kF32, first_).view({1, 8});
  Tensor b = row.slice(1, 0, 8, 2);
  const std::vector<double> ha = a.to_doubles();
  const std::vector<double> hb = b.to_doubles();
  const struct {
    BinaryOp op;
    double (*host)(double, double);
  } cases[] = {
      {BinaryOp::kAdd, [](double x, double y) { return x + y; }},
      {BinaryOp::kSub, [](double x, double y) { return x - y; }},
      {BinaryOp::kMul, [](double x, double y) { return x * y; }},
      {BinaryOp::kDiv, [](double x, double y) { return x / (y + 1); }},
      {BinaryOp::kMaximum, [](double x, double y) { return std::max(x, y); }},
  };
  Tensor b1 = add(b, Tensor::full(runtime_, {1}, 1.0, DType::kF32, first_));
  for (const auto& c : cases) {
    Tensor out = binary(c.op, a, c.op == BinaryOp::kDiv ? b1 : b);
    EXPECT_EQ(out.shape(), Shape({3, 4}));
    const std::vector<double> expected = host_binary(ha, {3, 4}, hb, {1, 4}, {3, 4}, c.host);
    const std::vector<double> got = out.to_doubles();
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_FLOAT_EQ(static_cast<float>(got[i]), static_cast<float>(expected[i])) << i;
    }
  }
  // A 4-d broadcast of a column against a row, in i64.
  Tensor col = Tensor::arange(runtime_, 3, DType::kI64, first_).view({1, 3, 1, 1});
  Tensor r = Tensor::arange(runtime_, 2, DType::kI64, first_).view({2, 1, 1, 1});
  Tensor outer = mul(add(col, r), Tensor::full(runtime_, {1}, 10, DType::kI64, first_));
  EXPECT_EQ(outer.shape(), Shape({2, 3, 1, 1}));
  EXPECT_EQ(outer.to_host<int64_t>(), (std::vector<int64_t>{0, 10, 20, 10, 20, 30}));
}

TEST_F(TensorTest, ChainedOperationsRunAsynchronouslyUntilTheDownload) {
  Tensor x = Tensor::full(runtime_, {1000}, 1.0, DType::kF64, first_);
  for (int i = 0; i < 50; ++i) x = add(x, x);  // 2^50, exactly representable
  const std::vector<double> values = x.to_doubles();
  EXPECT_EQ(values.front(), std::ldexp(1.0, 50));
  EXPECT_EQ(values.back(), std::ldexp(1.0, 50));
}

TEST_F(TensorTest, SumReducesEveryElementOfAnyLayout) {
  Tensor a = Tensor::arange(runtime_, 100000, DType::kF64, first_);
  EXPECT_EQ(sum(a).to_doubles(), std::vector<double>{99999.0 * 100000.0 / 2});
  EXPECT_EQ(sum(a).shape(), Shape({}));
  Tensor m = Tensor::arange(runtime_, 600, DType::kI32, first_).view({20, 30});
  Tensor strided = m.transpose(0, 1).slice(0, 1, 30, 3);  // 10 x 20, not contiguous
  double expected = 0;
  for (double v : strided.to_doubles()) expected += v;
  Tensor s = sum(strided);
  EXPECT_EQ(s.dtype(), DType::kI64);
  EXPECT_EQ(s.to_host<int64_t>(), std::vector<int64_t>{static_cast<int64_t>(expected)});
  Tensor f = Tensor::full(runtime_, {7}, 0.5, DType::kF32, first_);
  EXPECT_EQ(sum(f).to_host<float>(), std::vector<float>{3.5f});
  EXPECT_EQ(sum(Tensor::zeros(runtime_, {0}, DType::kF32, first_)).to_host<float>(),
            std::vector<float>{0.0f});
}

// The host's a @ b of row-major values.
std::vector<double> host_matmul(const std::vector<double>& a, const std::vector<double>& b,
                                size_t m, size_t k, size_t n) {
  std::vector<double> out(m * n, 0.0);
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      for (size_t l = 0; l < k; ++l) out[i * n + j] += a[i * k + l] * b[l * n + j];
    }
  }
  return out;
}

// Small integers: every product and sum is exact in f32, so CLBlast's order of summation cannot
// change the result and it must equal the host's exactly.
Tensor small_integers(oclvm::Runtime& runtime, int64_t rows, int64_t cols, DType dtype,
                      Device device, int seed) {
  std::vector<double> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<double>(static_cast<int>((i * 7 + static_cast<size_t>(seed)) % 9) - 4);
  }
  Tensor t = Tensor::empty(runtime, {rows, cols}, dtype, device);
  if (dtype == DType::kF32) {
    std::vector<float> f(values.begin(), values.end());
    t.copy_from(Tensor::from_host<float>(runtime, f, {rows, cols}, device));
  } else {
    t.copy_from(Tensor::from_host<double>(runtime, values, {rows, cols}, device));
  }
  return t;
}

TEST_F(TensorTest, MatmulThroughCLBlastEqualsTheHost) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    // Contiguous operands, sizes that fit no tile.
    Tensor a = small_integers(runtime_, 37, 29, dtype, first_, 1);
    Tensor b = small_integers(runtime_, 29, 53, dtype, first_, 2);
    Tensor p = matmul(a, b);
    EXPECT_EQ(p.shape(), Shape({37, 53}));
    EXPECT_EQ(p.dtype(), dtype);
    EXPECT_EQ(p.to_doubles(), host_matmul(a.to_doubles(), b.to_doubles(), 37, 29, 53));
  }
  // A transposed view (CLBlast transposes it), a row slice with a leading dimension wider than
  // its columns, and a view of neither layout (made contiguous first).
  Tensor base = small_integers(runtime_, 40, 30, DType::kF32, first_, 3);
  Tensor at = base.transpose(0, 1);                  // [30, 40], strides (1, 30)
  Tensor rows = small_integers(runtime_, 40, 64, DType::kF32, first_, 4).slice(1, 4, 20);
  EXPECT_EQ(matmul(at, rows).to_doubles(),
            host_matmul(at.to_doubles(), rows.to_doubles(), 30, 40, 16));
  Tensor every_other = small_integers(runtime_, 16, 40, DType::kF32, first_, 5).slice(1, 0, 40, 2);
  Tensor c = small_integers(runtime_, 20, 8, DType::kF32, first_, 6);
  EXPECT_EQ(matmul(every_other, c).to_doubles(),
            host_matmul(every_other.to_doubles(), c.to_doubles(), 16, 20, 8));
  // An inner size of 0 gives zeros; on the second OpenCL device (when there is one) as on the
  // first. The host device has no queue to lend.
  const Device other = second_.type == oclvm::DeviceType::kOpenCL ? second_ : first_;
  EXPECT_EQ(matmul(Tensor::zeros(runtime_, {2, 0}, DType::kF32, other),
                   Tensor::zeros(runtime_, {0, 3}, DType::kF32, other))
                .to_doubles(),
            std::vector<double>(6, 0.0));
  Tensor a2 = small_integers(runtime_, 5, 6, DType::kF32, other, 7);
  Tensor b2 = small_integers(runtime_, 6, 4, DType::kF32, other, 8);
  EXPECT_EQ(matmul(a2, b2).to_doubles(), host_matmul(a2.to_doubles(), b2.to_doubles(), 5, 6, 4));
}

TEST_F(TensorTest, OperationsRefuseWhatTheyCannotComputeAndChangeNothing) {
  Tensor a = Tensor::zeros(runtime_, {3}, DType::kF32, first_);
  const int64_t before = live_bytes(first_);
  EXPECT_THROW(add(a, Tensor::zeros(runtime_, {3}, DType::kF64, first_)), oclvm::InvalidArgument);
  EXPECT_THROW(add(a, Tensor::zeros(runtime_, {4}, DType::kF32, first_)), oclvm::InvalidArgument);
  EXPECT_THROW(add(a, Tensor::zeros(runtime_, {3}, DType::kF32, second_)), oclvm::InvalidArgument);
  EXPECT_THROW(add(Tensor::zeros(runtime_, {3}, DType::kU8, first_),
                   Tensor::zeros(runtime_, {3}, DType::kU8, first_)),
               oclvm::InvalidArgument);
  EXPECT_THROW(div(Tensor::zeros(runtime_, {3}, DType::kI32, first_),
                   Tensor::zeros(runtime_, {3}, DType::kI32, first_)),
               oclvm::InvalidArgument);
  EXPECT_THROW(add(a.view({1, 1, 1, 1, 3}), a), oclvm::InvalidArgument);
  {
    Tensor m = Tensor::zeros(runtime_, {2, 3}, DType::kF32, first_);
    const int64_t with_m = live_bytes(first_);
    EXPECT_THROW(matmul(m, m), oclvm::InvalidArgument);                   // inner sizes 3 and 2
    EXPECT_THROW(matmul(a, a), oclvm::InvalidArgument);                   // 1-D
    EXPECT_THROW(matmul(m, Tensor::zeros(runtime_, {3, 2}, DType::kF32, second_)),
                 oclvm::InvalidArgument);                                  // two devices
    EXPECT_THROW(matmul(Tensor::zeros(runtime_, {2, 3}, DType::kI32, first_),
                        Tensor::zeros(runtime_, {3, 2}, DType::kI32, first_)),
                 oclvm::InvalidArgument);                                  // no integer GEMM
    const Device host{oclvm::DeviceType::kCpu, 0};
    EXPECT_THROW(matmul(Tensor::zeros(runtime_, {2, 3}, DType::kF32, host),
                        Tensor::zeros(runtime_, {3, 2}, DType::kF32, host)),
                 oclvm::InvalidArgument);                                  // no queue to lend
    EXPECT_EQ(live_bytes(first_), with_m);
  }
  EXPECT_EQ(live_bytes(first_), before);
}

}  // namespace
}  // namespace eager
