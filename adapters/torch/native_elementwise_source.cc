// adapters/torch/native_elementwise_source.cc — the OpenCL C of the native path's elementwise
// kernels: one kernel per (operator, dtypes, rank), which finds each operand's element from its
// work-item's index and the strides it is given, and computes as the CPU's kernel does (Note
// [Native elementwise kernels] in native_kernels.cc).
//
// Thread-safety: pure functions; any thread.

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <utility>

#include "adapters/torch/native_kernel_table.h"
#include "adapters/torch/native_kernels.h"

namespace oclvm::torch_adapter {

bool third_input(BinaryOp op) {
  return op == BinaryOp::kWhere || op == BinaryOp::kWhereNot || op == BinaryOp::kAddcmul ||
         op == BinaryOp::kAddcdiv;
}

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "add";
    case BinaryOp::kSub: return "sub";
    case BinaryOp::kMul: return "mul";
    case BinaryOp::kDiv: return "div";
    case BinaryOp::kCopy: return "copy";
    case BinaryOp::kTanh: return "tanh";
    case BinaryOp::kTanhBackward: return "tanh_backward";
    case BinaryOp::kWhere: return "where";
    case BinaryOp::kWhereNot: return "where_not";
    case BinaryOp::kIsNegInf: return "isneginf";
    case BinaryOp::kAddcmul: return "addcmul";
    case BinaryOp::kAddcdiv: return "addcdiv";
    case BinaryOp::kLerp: return "lerp";
    case BinaryOp::kSqrt: return "sqrt";
    case BinaryOp::kRsqrt: return "rsqrt";
    case BinaryOp::kNeg: return "neg";
    case BinaryOp::kGelu: return "gelu";
    case BinaryOp::kGeluTanh: return "gelu_tanh";
    case BinaryOp::kSilu: return "silu";
    case BinaryOp::kGeluBackward: return "gelu_backward";
    case BinaryOp::kGeluTanhBackward: return "gelu_tanh_backward";
    case BinaryOp::kSiluBackward: return "silu_backward";
    case BinaryOp::kRelu: return "relu";
    case BinaryOp::kThresholdBackward: return "threshold_backward";
    case BinaryOp::kEq: return "eq";
    case BinaryOp::kNe: return "ne";
    case BinaryOp::kLt: return "lt";
    case BinaryOp::kLe: return "le";
    case BinaryOp::kGt: return "gt";
    case BinaryOp::kGe: return "ge";
    case BinaryOp::kBitwiseAnd: return "bitwise_and";
    case BinaryOp::kBitwiseOr: return "bitwise_or";
    case BinaryOp::kBitwiseXor: return "bitwise_xor";
    case BinaryOp::kMinimum: return "minimum";
    case BinaryOp::kMaximum: return "maximum";
    case BinaryOp::kSin: return "sin";
    case BinaryOp::kCos: return "cos";
    case BinaryOp::kExp: return "exp";
    case BinaryOp::kLog: return "log";
    case BinaryOp::kSigmoid: return "sigmoid";
    case BinaryOp::kSigmoidBackward: return "sigmoid_backward";
    case BinaryOp::kAbs: return "abs";
    case BinaryOp::kClamp: return "clamp";
    case BinaryOp::kClampMin: return "clamp_min";
    case BinaryOp::kClampMax: return "clamp_max";
  }
  return "?";
}

namespace {

// The activations' constants, as decimal literals: 1 / sqrt(2), sqrt(2 / pi), and
// 1 / sqrt(2 * pi) (the normal density's factor).
constexpr const char* kSqrtHalf = "0.70710678118654752440";
constexpr const char* kGeluBeta = "0.79788456080286535588";
constexpr const char* kGeluPdf = "0.39894228040143267794";

// The computation of x (op) y in type `compute`, alpha scaling y for add and sub (sub's alpha
// arrives negated, as the CPU's sub is add with -alpha). int and long multiply and add as their
// unsigned types, whose overflow wraps by definition (signed overflow is undefined in OpenCL C as
// in C); narrower types compute in int, where it cannot overflow.
std::string expression(BinaryOp op, at::ScalarType compute) {
  const bool floating = at::isFloatingType(compute);
  const bool wide = compute == at::kInt || compute == at::kLong;
  const std::string t = cl_type(compute);
  const std::string u = wide ? "u" + t : "";
  auto as_u = [&](const char* v) { return wide ? "(" + u + ")" + v : std::string(v); };
  auto back = [&](const std::string& e) { return wide ? "(" + t + ")(" + e + ")" : e; };
  switch (op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub:
      if (floating) return "fma(y, alpha, x)";
      return back(as_u("x") + " + " + as_u("alpha") + " * " + as_u("y"));
    case BinaryOp::kMul:
      return floating ? "x * y" : back(as_u("x") + " * " + as_u("y"));
    case BinaryOp::kDiv:
      return "x / y";
    case BinaryOp::kCopy:
      return "x";
    case BinaryOp::kTanh:
      return "oclvm_tanh(x)";
    case BinaryOp::kTanhBackward:  // the CPU kernel's a * (1 - b * b), its 1 - b * b fused
      return "x * fma(-y, y, (" + t + ")1)";
    case BinaryOp::kWhere:
      return "c ? x : y";
    case BinaryOp::kWhereNot:
      return "c ? y : x";
    case BinaryOp::kIsNegInf:
      return "x == -INFINITY";
    case BinaryOp::kAddcmul:  // the CPU kernel's self + value * t1 * t2, left to right
      return "x + alpha * y * c";
    case BinaryOp::kAddcdiv:
      return "x + alpha * y / c";
    case BinaryOp::kLerp:  // the CPU's vectorised lerp: from the nearer end, one fma
      return "fabs(alpha) < (" + t + ")0.5 ? fma(alpha, y - x, x) : fma(alpha - (" + t +
             ")1, y - x, y)";
    case BinaryOp::kSqrt:
      return "sqrt(x)";
    case BinaryOp::kRsqrt:  // the CPU's 1 / sqrt(x), each correctly rounded
      return "(" + t + ")1 / sqrt(x)";
    case BinaryOp::kNeg:
      return floating || !wide ? "-x" : back("(" + u + ")0 - " + as_u("x"));
    // The activations as the CPU's vectorised kernels compute them, constants in the type.
    case BinaryOp::kGelu:  // x * 0.5 * (1 + erf(x / sqrt(2)))
      return "x * (" + t + ")0.5 * ((" + t + ")1 + erf(x * (" + t + ")" + kSqrtHalf + "))";
    case BinaryOp::kGeluTanh:  // 0.5 * x * (1 + tanh(beta * (x + kappa * x^3)))
      return "(" + t + ")0.5 * x * ((" + t + ")1 + oclvm_tanh((" + t + ")" + kGeluBeta +
             " * (x + (" + t + ")0.044715 * (x * x * x))))";
    case BinaryOp::kSilu:
      return "x / ((" + t + ")1 + exp(-x))";
    case BinaryOp::kGeluBackward:  // dy * (cdf + x * pdf), y the input
      return "x * (((" + t + ")0.5 * ((" + t + ")1 + erf(y * (" + t + ")" + kSqrtHalf +
             "))) + y * ((" + t + ")" + kGeluPdf + " * exp(y * y * (" + t + ")-0.5)))";
    case BinaryOp::kGeluTanhBackward:
      return "gelu_tanh_backward(x, y)";
    case BinaryOp::kRelu:  // keeps NaN and -0.0, as the CPU's max(x, 0)
      return "x < (" + t + ")0 ? (" + t + ")0 : x";
    case BinaryOp::kThresholdBackward:  // x the forward's input, y the gradient
      return "x <= alpha ? (" + t + ")0 : y";
    case BinaryOp::kEq: return "x == y";
    case BinaryOp::kNe: return "x != y";
    case BinaryOp::kLt: return "x < y";
    case BinaryOp::kLe: return "x <= y";
    case BinaryOp::kGt: return "x > y";
    case BinaryOp::kGe: return "x >= y";
    case BinaryOp::kBitwiseAnd: return "x & y";
    case BinaryOp::kBitwiseOr: return "x | y";
    case BinaryOp::kBitwiseXor: return "x ^ y";
    case BinaryOp::kMinimum:  // NaN when either is NaN, as the CPU's
      return floating ? "isnan(x) || isnan(y) ? x + y : (x < y ? x : y)" : "x < y ? x : y";
    case BinaryOp::kMaximum:
      return floating ? "isnan(x) || isnan(y) ? x + y : (x > y ? x : y)" : "x > y ? x : y";
    case BinaryOp::kSin: return "sin(x)";
    case BinaryOp::kCos: return "cos(x)";
    case BinaryOp::kExp: return "exp(x)";
    case BinaryOp::kLog: return "log(x)";
    case BinaryOp::kSigmoid:  // the CPU's (1 + exp(-x)).reciprocal()
      return "(" + t + ")1 / ((" + t + ")1 + exp(-x))";
    case BinaryOp::kSigmoidBackward:  // the CPU's dy * (1 - y) * y, left to right
      return "x * ((" + t + ")1 - y) * y";
    case BinaryOp::kAbs:  // int and long negate as their unsigned types: the minimum wraps
      if (floating) return "fabs(x)";
      if (wide) return "x < (" + t + ")0 ? " + back("(" + u + ")0 - " + as_u("x")) + " : x";
      return "x < (" + t + ")0 ? -x : x";
    // The CPU's scalar clamp: a NaN stays, else max(x, lower) then min(.., upper), std::max's and
    // std::min's ties
    case BinaryOp::kClamp:
      return std::string(floating ? "isnan(x) ? x : " : "") +
             "(alpha < (x < y ? y : x) ? alpha : (x < y ? y : x))";
    case BinaryOp::kClampMin:
      return std::string(floating ? "isnan(x) ? x : " : "") + "(x < y ? y : x)";
    case BinaryOp::kClampMax:
      return std::string(floating ? "isnan(x) ? x : " : "") + "(y < x ? y : x)";
    case BinaryOp::kSiluBackward:  // dy * s * (1 + x * (1 - s)), s = sigmoid(x)
      return "x * ((" + t + ")1 / ((" + t + ")1 + exp(-y))) * ((" + t + ")1 + y * ((" + t +
             ")1 - (" + t + ")1 / ((" + t + ")1 + exp(-y))))";
  }
  return "";
}

}  // namespace

KernelSource binary_source(const BinaryKernelKey& key) {
  // Elements are held as storage_type and computed in opmath_type: float for float16 and
  // bfloat16, as the CPU's kernels compute them, rounded once on the store.
  const at::ScalarType compute = opmath_type(key.compute);
  const std::string to = storage_type(key.out), ta = storage_type(key.self),
                    tb = storage_type(key.other), tc = cl_type(compute);
  std::string name = std::string("oclvm_") + op_name(key.op) + "_" +
                     kernel_type_name(key.out) + "_" + kernel_type_name(key.self) + "_" +
                     (key.other_is_scalar ? "scalar" : kernel_type_name(key.other)) + "_" +
                     kernel_type_name(key.compute) + "_r" + std::to_string(key.rank);
  std::string s;
  const bool doubles = key.out == at::kDouble || key.self == at::kDouble ||
                       key.other == at::kDouble || key.compute == at::kDouble;
  if (doubles) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  if (key.out == at::kBFloat16 || key.self == at::kBFloat16 || key.other == at::kBFloat16 ||
      key.compute == at::kBFloat16) {
    s += kBFloat16Source;
  }
  // Each product and sum rounds on its own, as in the CPU's kernels (fma only where written).
  s += "#pragma OPENCL FP_CONTRACT OFF\n";
  if (key.op == BinaryOp::kTanh || key.op == BinaryOp::kGeluTanh ||
      key.op == BinaryOp::kGeluTanhBackward) {
    // tanh, exactly +-1 where the correctly rounded value is (|x| past 9.1 in float, 19.1 in
    // double), as the CPU's: a driver's tanh may stop an ulp short, which 1 - tanh^2 magnifies.
    s += tc + " oclvm_tanh(" + tc + " x) {\n  return fabs(x) > (" + tc + ")" +
         (compute == at::kDouble ? "19.1" : "9.1") + " ? copysign((" + tc +
         ")1, x) : tanh(x);\n}\n";
  }
  if (key.op == BinaryOp::kGeluTanhBackward) {
    // The CPU kernel's steps: d(0.5 * x * (1 + tanh(inner))) / dx, times dy.
    s += tc + " gelu_tanh_backward(" + tc + " dy, " + tc + " x) {\n";
    s += "  const " + tc + " x_sq = x * x, x_cube = x_sq * x;\n";
    s += "  const " + tc + " inner = (" + tc + ")" + kGeluBeta + " * (x + (" + tc +
         ")0.044715 * x_cube);\n";
    s += "  const " + tc + " tanh_inner = oclvm_tanh(inner);\n";
    s += "  const " + tc + " left = (" + tc + ")0.5 * x, right = (" + tc + ")1 + tanh_inner;\n";
    s += "  const " + tc + " left_derivative = (" + tc + ")0.5 * right;\n";
    s += "  const " + tc + " tanh_derivative = (" + tc + ")1 - tanh_inner * tanh_inner;\n";
    s += "  const " + tc + " inner_derivative = (" + tc + ")" + kGeluBeta + " * ((" + tc +
         ")1 + (" + tc + ")3 * (" + tc + ")0.044715 * x_sq);\n";
    s += "  return dy * (left_derivative + left * tanh_derivative * inner_derivative);\n}\n";
  }
  s += "__kernel void " + name + "(OCLVM_BLOB(" + to + ", out), OCLVM_BLOB(" + ta + ", a), ";
  s += key.other_is_scalar ? tc + " b_value, " : "OCLVM_BLOB(" + tb + ", b), ";
  const bool third = third_input(key.op);
  // where's condition is a bool; addcmul's and addcdiv's third input has the computation's dtype.
  const at::ScalarType third_type =
      key.op == BinaryOp::kWhere || key.op == BinaryOp::kWhereNot ? at::kBool : key.compute;
  if (third) s += std::string("OCLVM_BLOB(") + storage_type(third_type) + ", c), ";
  s += tc + " alpha, ulong n";
  for (size_t d = 0; d < key.rank; ++d) {
    const std::string i = std::to_string(d);
    s += ", long size" + i + ", long so" + i + ", long sa" + i;
    if (!key.other_is_scalar) s += ", long sb" + i;
    if (third) s += ", long sc" + i;
  }
  s += ") {\n  const ulong i = get_global_id(0);\n  if (i >= n) return;\n";
  s += "  long io = 0, ia = 0, ib = 0, ic = 0;\n  ulong rest = i;\n";
  for (size_t d = key.rank; d-- > 0;) {
    const std::string i = std::to_string(d);
    // The outermost dimension takes what is left: no division (none at all at rank 1).
    s += d == 0 ? "  { const long k = (long)rest;"
                : "  { const long k = (long)(rest % (ulong)size" + i + "); rest /= (ulong)size" +
                      i + ";";
    s += " io += k * so" + i + "; ia += k * sa" + i + ";";
    if (!key.other_is_scalar) s += " ib += k * sb" + i + ";";
    if (third) s += " ic += k * sc" + i + ";";
    s += " }\n";
  }
  s += "  const " + tc + " x = (" + tc + ")" + load_element(key.self, "a", "ia") + ";\n";
  s += key.other_is_scalar
           ? "  const " + tc + " y = b_value;\n"
           : "  const " + tc + " y = (" + tc + ")" + load_element(key.other, "b", "ib") + ";\n";
  if (third) {
    const std::string t3 = cl_type(opmath_type(third_type));
    s += "  const " + t3 + " c = " + load_element(third_type, "c", "ic") + ";\n";
  }
  // Comparisons and isneginf give 0 or 1 already; every other result is converted from the
  // computation's dtype.
  const bool gives_bool = compares(key.op) || key.op == BinaryOp::kIsNegInf;
  s += "  " +
       store_element(key.out, "out", "io", expression(key.op, compute),
                     gives_bool ? at::kBool : compute) +
       "\n}\n";
  // The CPU's float division and square root are correctly rounded; OpenCL's defaults allow 2.5
  // and 3 ulp.
  const bool float_division =
      (key.op == BinaryOp::kDiv || key.op == BinaryOp::kAddcdiv || key.op == BinaryOp::kSqrt ||
       key.op == BinaryOp::kRsqrt || key.op == BinaryOp::kSilu || key.op == BinaryOp::kSigmoid ||
       key.op == BinaryOp::kSiluBackward) &&
      compute == at::kFloat;
  return KernelSource{std::move(s), std::move(name),
                      float_division ? "-cl-fp32-correctly-rounded-divide-sqrt" : ""};
}
}  // namespace oclvm::torch_adapter
