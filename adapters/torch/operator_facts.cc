// adapters/torch/operator_facts.cc — what the fallback learns of an operator from its schema
// (operator_facts.h): its generators, the writes its schema leaves unmarked, whether the direct
// path takes it, its device check and the dtypes it widens.
#include "adapters/torch/operator_facts.h"

#include <ATen/core/op_registration/adaption.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <unordered_map>

#include "oclvm/storage/hot_thread_local.h"

namespace oclvm::torch_adapter {
namespace {

// kExactSameDevice and kTensorIteratorDevice: sorted "name.overload" strings, written into the
// build tree by device_checks.py when the build is configured.
#include "oclvm_torch/device_checks.inc"

struct WidenedOperator {
  std::string_view name;  // "name" or "name.overload", as in native_functions.yaml
  Widen widen;
};

constexpr std::array kWidenedOperators{
    WidenedOperator{"_upsample_bilinear2d_aa", Widen::kHalfToFloat},
    WidenedOperator{"_upsample_bilinear2d_aa.out", Widen::kHalfToFloat},
    WidenedOperator{"_upsample_bilinear2d_aa_backward", Widen::kHalfToFloat},
    WidenedOperator{"_upsample_bilinear2d_aa_backward.grad_input", Widen::kHalfToFloat},
    WidenedOperator{"abs", Widen::kBoolToByte},
    WidenedOperator{"abs.out", Widen::kBoolToByte},
    WidenedOperator{"avg_pool3d", Widen::kHalfToFloat},
    WidenedOperator{"avg_pool3d.out", Widen::kHalfToFloat},
    WidenedOperator{"avg_pool3d_backward", Widen::kHalfToFloat},
    WidenedOperator{"avg_pool3d_backward.grad_input", Widen::kHalfToFloat},
    WidenedOperator{"histc", Widen::kIntegralToDouble},
    WidenedOperator{"histc.out", Widen::kIntegralToDouble},
    WidenedOperator{"multi_margin_loss", Widen::kHalfToFloat},
    WidenedOperator{"multi_margin_loss.out", Widen::kHalfToFloat},
    WidenedOperator{"multi_margin_loss_backward", Widen::kHalfToFloat},
    WidenedOperator{"multi_margin_loss_backward.grad_input", Widen::kHalfToFloat},
    WidenedOperator{"multilabel_margin_loss_backward", Widen::kHalfToFloat},
    WidenedOperator{"multilabel_margin_loss_backward.grad_input", Widen::kHalfToFloat},
    WidenedOperator{"multilabel_margin_loss_forward", Widen::kHalfToFloat},
    WidenedOperator{"multilabel_margin_loss_forward.output", Widen::kHalfToFloat},
    WidenedOperator{"nansum", Widen::kComplexNanSum},
    WidenedOperator{"nansum.out", Widen::kComplexNanSum},
    WidenedOperator{"polygamma", Widen::kHalfToFloat},
    WidenedOperator{"polygamma.out", Widen::kHalfToFloat},
    WidenedOperator{"round.decimals", Widen::kHalfToFloat},
    WidenedOperator{"round.decimals_out", Widen::kHalfToFloat},
    WidenedOperator{"rrelu_with_noise", Widen::kHalfToFloat},
    WidenedOperator{"rrelu_with_noise.out", Widen::kHalfToFloat},
    WidenedOperator{"rrelu_with_noise_", Widen::kHalfToFloat},
    WidenedOperator{"rrelu_with_noise_backward", Widen::kHalfToFloat},
    WidenedOperator{"trace", Widen::kBoolToByte},
};

// "name" or "name.overload" of an aten operator; empty for other namespaces.
std::string aten_name(const c10::FunctionSchema& schema) {
  constexpr std::string_view kNamespace = "aten::";
  const std::string& qualified = schema.name();
  if (qualified.compare(0, kNamespace.size(), kNamespace) != 0) return {};
  std::string name = qualified.substr(kNamespace.size());
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  return name;
}

Widen widen_of(const c10::FunctionSchema& schema) {
  const std::string name = aten_name(schema);
  for (const WidenedOperator& entry : kWidenedOperators) {
    if (entry.name == name) return entry.widen;
  }
  return Widen::kNone;
}

}  // namespace

DeviceCheck device_check_of(const c10::FunctionSchema& schema) {
  const std::string name = aten_name(schema);
  if (name.empty()) return DeviceCheck::kNone;
  const auto listed = [&name](const auto& list) {
    return std::binary_search(list.begin(), list.end(), std::string_view(name));
  };
  if (listed(kExactSameDevice)) return DeviceCheck::kExactSame;
  if (listed(kTensorIteratorDevice)) return DeviceCheck::kTensorIterator;
  return DeviceCheck::kNone;
}

namespace {

// Note [Mutations the schema does not mark]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// at::native::cpu_fallback copies back only the arguments whose schema carries a write
// annotation (`Tensor(a!)`). A few CPU kernels also update arguments their schema leaves
// unmarked; through the plain fallback the device tensor would keep its old value and a model
// would silently evaluate wrong (BatchNorm's running statistics stayed at their initial values).
// For these operators the fallback hands the kernel a CPU copy of each such argument and copies
// it back into the device tensor afterwards. The list was found by running every operator of
// PyTorch's OpInfo database and real modules on the CPU and comparing every unmarked tensor
// argument before and after (tests/torch/conformance/unmarked_mutations.md).
struct UnmarkedWrites {
  std::string_view op;        // qualified name, e.g. "aten::native_batch_norm"
  std::string_view overload;  // "" for the default overload
  std::vector<std::string_view> arguments;
};

const std::vector<UnmarkedWrites>& unmarked_writes() {
  static const std::vector<UnmarkedWrites>* const table = new std::vector<UnmarkedWrites>{
      {"aten::native_batch_norm", "", {"running_mean", "running_var"}},
      {"aten::native_batch_norm", "out", {"running_mean", "running_var"}},
      {"aten::batch_norm_update_stats", "", {"running_mean", "running_var"}},
  };
  return *table;
}

bool is_generator(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  const auto* optional = type->castRaw<c10::OptionalType>();
  return optional != nullptr && optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// What kind of value an argument or return is, for the direct path.
enum class Kind : uint8_t {
  kOther,          // tensors, scalars, int lists, ...: the direct path handles them
  kTensorList,     // Tensor[]: handled element by element
  kUnsupported,    // Tensor?[] or a Device: ATen's fallback
};

Kind kind_of(const c10::TypePtr& type) {
  const c10::TypePtr element = type->kind() == c10::TypeKind::OptionalType
                                   ? type->castRaw<c10::OptionalType>()->getElementType()
                                   : type;
  if (element->kind() == c10::TypeKind::DeviceObjType) return Kind::kUnsupported;
  if (element->kind() != c10::TypeKind::ListType) return Kind::kOther;
  const c10::TypePtr item = element->castRaw<c10::ListType>()->getElementType();
  if (item->kind() == c10::TypeKind::TensorType) {
    return type->kind() == c10::TypeKind::OptionalType ? Kind::kUnsupported : Kind::kTensorList;
  }
  if (item->kind() == c10::TypeKind::OptionalType) return Kind::kUnsupported;  // Tensor?[]
  return Kind::kOther;
}

// Note [The direct path of the fallback]: operators whose arguments and returns are tensors,
// tensor lists and values, and whose returns are not views of their arguments.
bool takes_direct_path(const c10::FunctionSchema& schema) {
  for (const c10::Argument& argument : schema.arguments()) {
    if (kind_of(argument.type()) == Kind::kUnsupported) return false;
  }
  for (const c10::Argument& result : schema.returns()) {
    if (kind_of(result.type()) == Kind::kUnsupported) return false;
    const c10::AliasInfo* alias = result.alias_info();
    if (alias != nullptr && !alias->isWrite()) return false;  // a view of an argument
  }
  return true;
}

OperatorFacts learn(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  OperatorFacts facts;
  facts.fallback = &fallback_counter(c10::toString(op.operator_name()));
  facts.direct = takes_direct_path(schema);
  const std::vector<c10::Argument>& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (is_generator(arguments[i].type())) facts.generators.push_back(i);
  }
  for (const UnmarkedWrites& entry : unmarked_writes()) {
    if (schema.name() != entry.op || schema.overload_name() != entry.overload) continue;
    for (const std::string_view name : entry.arguments) {
      const std::optional<int> index = schema.argumentIndexWithName(name);
      TORCH_INTERNAL_ASSERT(index.has_value(), "no argument ", name, " in ", schema);
      facts.unmarked_writes.push_back(static_cast<size_t>(*index));
    }
  }
  facts.functional = !schema.is_mutable() && facts.unmarked_writes.empty();
  facts.device_check = device_check_of(schema);
  facts.widen = widen_of(schema);
  return facts;
}

}  // namespace

std::optional<c10::ScalarType> widened(Widen widen, c10::ScalarType type) {
  switch (widen) {
    case Widen::kIntegralToDouble:
      if (c10::isIntegralType(type, /*includeBool=*/false)) return c10::kDouble;
      return std::nullopt;
    case Widen::kHalfToFloat:
      if (type == c10::kHalf || type == c10::kBFloat16) return c10::kFloat;
      return std::nullopt;
    case Widen::kBoolToByte:
      if (type == c10::kBool) return c10::kByte;
      return std::nullopt;
    case Widen::kComplexNanSum:
    case Widen::kNone:
      break;
  }
  return std::nullopt;
}

void check_exact_same_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                             size_t begin) {
  const std::vector<c10::Argument>& arguments = op.schema().arguments();
  const std::string& method = op.schema().name();
  std::optional<c10::Device> common;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = stack[begin + i];
    const char* argument = arguments[i].name().c_str();
    if (value.isTensor()) {
      c10::impl::check_and_update_common_device(common, value.toTensor(), method.c_str(), argument);
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList()) {
        c10::impl::check_and_update_common_device(common, tensor, method.c_str(), argument);
      }
    } else if (value.isOptionalTensorList()) {
      c10::impl::check_and_update_common_device(common, value.toOptionalTensorList(),
                                                method.c_str(), argument);
    }
  }
}

// An operator's schema lives as long as its registration, so its address identifies it.
OperatorFacts& facts_of(const c10::OperatorHandle& op) {
  OCLVM_HOT_TLS thread_local std::unordered_map<const c10::FunctionSchema*, OperatorFacts> known;
  const c10::FunctionSchema& schema = op.schema();
  auto it = known.find(&schema);
  if (it == known.end()) it = known.emplace(&schema, learn(op)).first;
  return it->second;
}

}  // namespace oclvm::torch_adapter
