// adapters/torch/host_kernels.cc — unboxed kernels for the hottest functional operators
// (HostKernel) and for the optimizers' _foreach_ operators (HostListKernel); host_kernels.h.
#include "adapters/torch/host_kernels.h"

#include <ATen/Operators.h>
#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/InferenceMode.h>

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "adapters/torch/allocator.h"
#include "adapters/torch/fallback.h"
#include "adapters/torch/fallback_counts.h"
#include "adapters/torch/foreach_loops.h"
#include "adapters/torch/host_results.h"
#include "adapters/torch/host_view.h"
#include "adapters/torch/native_kernels.h"
#include "adapters/torch/native_operators.h"
#include "adapters/torch/native_reduction_operators.h"
#include "adapters/torch/operator_facts.h"

namespace oclvm::torch_adapter {
namespace {

// Note [Unboxed host kernels]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every operator without a kernel of its own reaches the boxed fallback, and boxing is what made
// a tiny functional operator cost twice the CPU's once the copies were gone (Note [Operators in
// a host section] in fallback.cc): the dispatcher copies each argument into an IValue stack, and
// copying a tensor that Python holds takes its reference count from 1 to 2, which in torch 2.13
// also increfs its Python object, re-acquiring the GIL the binding had released (about 0.3 us an
// operator); then the fallback looks its facts up, walks the schema, and unboxes the results.
// For the operators a training step calls most, the adapter registers unboxed kernels instead,
// made from one template (HostKernel): the device tensor arguments are borrowed, not copied (no
// reference count changes, so Python is not touched), aliased on the host (host_aliases), and the
// CPU kernel runs on the aliases in a host section with its result written in device memory
// (Note [Results written in device memory]), which then becomes the device tensor. Exactly what
// the fallback's host-section path does, without the boxing. A call the fast path cannot take (a
// device that is not host-addressable, or OCLVM_ZERO_COPY=0 or =map; tensors on two devices, or a
// CPU tensor that is not a 0-dim scalar; an empty, sparse or scattered tensor; no section to be
// had) goes to the boxed fallback the operator had before, unchanged.
//
// HostKernel takes functional operators only, whose results are new tensors (one, or a tuple)
// and whose arguments are tensors, optional tensors and values: nothing is written but the new
// results, so no write-back is needed. (The _foreach_ operators, in place or not, have
// HostListKernel below.)

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;
constexpr c10::DispatchKeySet kCpu{c10::DispatchKey::CPU};

std::atomic<uint64_t> g_calls{0};

// Op's count of CPU-kernel calls (fallback_counts.h), found once.
template <class Op>
FallbackCounter& counter_of() {
  static FallbackCounter& counter = fallback_counter(
      std::string(Op::name) + (std::string_view(Op::overload_name).empty() ? "" : ".") +
      Op::overload_name);
  return counter;
}

bool is_device_tensor(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == kType;
}

// The argument the CPU kernel gets for `value`: its host alias when it is a device tensor (the
// next one of `hosts`), else itself.
template <class T>
const T& on_host(const T& value, const std::vector<at::Tensor>& /*hosts*/, size_t& /*next*/) {
  return value;
}
const at::Tensor& on_host(const at::Tensor& value, const std::vector<at::Tensor>& hosts,
                          size_t& next) {
  return is_device_tensor(value) ? hosts[next++] : value;
}
std::optional<at::Tensor> on_host(const std::optional<at::Tensor>& value,
                                  const std::vector<at::Tensor>& hosts, size_t& next) {
  if (!value.has_value()) return std::nullopt;
  return on_host(*value, hosts, next);
}

// The tensor an argument holds (a Tensor, or a Tensor? with a value); nullptr for other values.
template <class T>
const at::Tensor* tensor_of(const T& value) {
  if constexpr (std::is_same_v<T, at::Tensor>) {
    return &value;
  } else if constexpr (std::is_same_v<T, std::optional<at::Tensor>>) {
    return value.has_value() ? &*value : nullptr;
  } else {
    return nullptr;
  }
}

// `f` on the result, or on each tensor of a tuple of results.
template <class F>
void for_each_result(at::Tensor& result, F&& f) {
  f(result);
}
template <class F, class... Tensors>
void for_each_result(std::tuple<Tensors...>& results, F&& f) {
  std::apply([&](auto&... each) { (f(each), ...); }, results);
}
template <class F>
void for_each_result(std::vector<at::Tensor>& results, F&& f) {
  for (at::Tensor& result : results) f(result);
}

// The results of a CPU kernel run under ResultsOnDevice in `section`, made device tensors: each
// written in a device block alone becomes the device tensor over that block (Note [Results
// written in device memory]); then the section ends, since device_copy runs VM lists, and any
// other result is copied to the device.
template <class Result>
void results_to_device(Result& result, std::optional<vm::HostSection>& section,
                       const c10::Device& device) {
  // adopt_result leaves an undefined result (an output the mask left out) as it is.
  for_each_result(result, [&](at::Tensor& tensor) { adopt_result(tensor, device); });
  section.reset();
  for_each_result(result, [&](at::Tensor& tensor) {
    if (tensor.defined() && tensor.is_cpu()) tensor = device_copy(tensor, device);
  });
}

// Op through the boxed fallback `Fallback` with these arguments: what the dispatcher would have
// called without the unboxed kernel.
template <class Op, c10::BoxedKernel::BoxedKernelFunction* Fallback, class... Args>
decltype(auto) call_boxed(Args&&... args) {
  static const c10::TypedOperatorHandle<typename Op::schema> op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow(Op::name, Op::overload_name)
          .template typed<typename Op::schema>();
  return c10::impl::BoxedKernelWrapper<typename Op::schema>::call(
      c10::BoxedKernel::makeFromFunction<Fallback>(), op, c10::DispatchKeySet(),
      std::forward<Args>(args)...);
}

// The device tensors of an argument: a Tensor's, an optional Tensor's, each of a TensorList's;
// none for other values. `take` gets each defined tensor.
template <class T, class F>
void each_tensor(const T& value, F&& take) {
  if constexpr (std::is_same_v<T, at::TensorList>) {
    for (const at::Tensor& tensor : value) take(tensor);
  } else if (const at::Tensor* tensor = tensor_of(value)) {
    take(*tensor);
  }
}

// The host side of an unboxed kernel's call: its device tensors' aliases, in the order they were
// taken, and the host section they may be used in. The aliases go first (members are destroyed
// in reverse order): the blocks keep them for the next call once nothing else holds them (Note
// [Host aliases kept with their block] in host_view.cc), and that is best seen inside the section.
struct OnHostCall {
  c10::Device device;
  std::optional<vm::HostSection> section;
  std::vector<at::Tensor> hosts;
};

// The device tensors of one call of an unboxed kernel, borrowed as each_tensor walks its
// arguments; enter() then aliases them and takes the section. Shared by HostKernel and
// HostListKernel, and not a template: it is the same code for every operator.
class DeviceOperands {
 public:
  // `cpu_scalars`: whether the operator takes a zero-dimensional CPU tensor beside device tensors
  // (TensorIterator's operators do; those that check every tensor's device refuse it, in the
  // boxed fallback: Note [Device checks as on CUDA] in operator_facts.h).
  explicit DeviceOperands(bool cpu_scalars = true) : cpu_scalars_(cpu_scalars) {}

  // Takes `tensor`. Tensors other than device tensors of one device and CPU scalars (0-dim)
  // make the call go the boxed way: its answer, an error or a result, stays the same.
  void take(const at::Tensor& tensor) {
    if (!tensor.defined()) return;
    if (tensor.is_cpu() && tensor.dim() == 0) {
      if (!cpu_scalars_) unusual_ = true;
      return;
    }
    if (!is_device_tensor(tensor) || tensor.layout() != at::kStrided ||
        !span_is_compact(tensor)) {
      unusual_ = true;
      return;
    }
    devices_.add(tensor);
  }

  // The aliases (carrying requires_grad: Note [Kernels that ask whether an input requires grad]
  // in fallback.cc) and the section, counted as an unboxed call; nullopt when the fast path does
  // not apply (an unusual tensor, none at all, a device without host addresses, no section to be
  // had), and then nothing has happened.
  std::optional<OnHostCall> enter() {
    if (unusual_ || devices_.all().empty()) return std::nullopt;
    const c10::Device device = devices_.all()[0].device();
    if (!host_addressable(device.index())) return std::nullopt;
    std::optional<vm::HostSection> section = host_section(device.index());
    if (!section) return std::nullopt;
    // Empty when they are not all on one device or one has no host address.
    std::vector<at::Tensor> hosts = host_aliases(*section, devices_.all());
    if (hosts.empty()) return std::nullopt;
    g_calls.fetch_add(1, std::memory_order_relaxed);
    return OnHostCall{device, std::move(section), std::move(hosts)};
  }

 private:
  BorrowedTensors devices_;
  const bool cpu_scalars_;
  bool unusual_ = false;
};

template <class Op, class Signature = typename Op::schema>
struct HostKernel;

template <class Op, class Result, class... Args>
struct HostKernel<Op, Result(Args...)> {
  static_assert(std::is_same_v<Result, at::Tensor> ||
                    std::is_same_v<Result, std::tuple<at::Tensor, at::Tensor>> ||
                    std::is_same_v<Result, std::tuple<at::Tensor, at::Tensor, at::Tensor>>,
                "host kernels return new tensors only");

  static Result call(Args... args) {
    if constexpr (NativeKernel<Op>::exists) {
      std::optional<Result> result = NativeKernel<Op>::call(args...);
      if (result) {
        count_native_call();
        return std::move(*result);
      }
    }
    std::optional<Result> result = try_on_host(args...);
    if (result) return std::move(*result);
    return boxed(args...);
  }

 private:
  // The fast path; nullopt when it does not apply (then nothing has happened).
  static std::optional<Result> try_on_host(Args... args) {
    DeviceOperands operands(/*cpu_scalars=*/!exact_same_device);
    (each_tensor(args, [&](const at::Tensor& tensor) { operands.take(tensor); }), ...);
    std::optional<OnHostCall> call = operands.enter();
    if (!call) return std::nullopt;
    counter_of<Op>().count(call->device.index());
    Result result;
    {
      ResultsOnDevice on_device(*call->section, call->device.index());
      size_t next = 0;
      // A braced list evaluates in order, so `next` walks the device tensors as `take` did.
      result = std::apply(
          [](const auto&... host_args) { return Op::redispatch(kCpu, host_args...); },
          std::tuple<const std::decay_t<Args>&...>{on_host(args, call->hosts, next)...});
    }
    call->hosts.clear();  // before the section ends (OnHostCall)
    results_to_device(result, call->section, call->device);
    return result;
  }

  // What the operator was routed to before this kernel: cpu_fallback_on_one_device for those
  // with a composite kernel (Note [Composite kernels the CPU does not use] in ops.cc), else
  // cpu_fallback. A flag rather than a template parameter, so that the kernel is compiled once
  // per operator, not once per fallback.
  static Result boxed(Args... args) {
    if (routed_to_one_device) return call_boxed<Op, &cpu_fallback_on_one_device>(args...);
    return call_boxed<Op, &cpu_fallback>(args...);
  }

 public:
  // Set once by add(), at registration, before any call.
  static inline bool routed_to_one_device = false;
  static inline bool exact_same_device = false;  // DeviceCheck::kExactSame: no CPU scalars
};

// Note [In-place operators without boxing]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The in-place arithmetic a per-tensor optimizer and user code call (x.add_(y), x.mul_(0.9):
// add_, sub_, mul_ and div_ of a tensor, a Python number arriving as a wrapped 0-dim CPU tensor),
// and the in-place scatters (scatter_, scatter_add_: gather's backward; index_add_) took the boxed
// fallback's host-section path, boxing and all (Note [Unboxed host kernels]).
// HostInPlaceKernel runs them as HostKernel runs functional operators: every device tensor
// borrowed and aliased, the CPU kernel run in place on the aliases in one host section, and the
// caller's own device tensor returned. self must be a device tensor (a CPU scalar written in place
// goes the boxed way, whose answer stays the CPU's); these operators never resize or restride
// self, so the device tensor needs nothing after the section. Its version is bumped above, by
// torch's ADInplaceOrView kernel. A call the fast path cannot take goes to the boxed fallback.
template <class Op, class Signature = typename Op::schema>
struct HostInPlaceKernel;

template <class Op, class... Rest>
struct HostInPlaceKernel<Op, at::Tensor&(at::Tensor&, Rest...)> {
  static at::Tensor& call(at::Tensor& self, Rest... rest) {
    if constexpr (NativeKernel<Op>::exists) {
      if (NativeKernel<Op>::call(self, rest...)) {
        count_native_call();
        return self;
      }
    }
    if (try_on_host(self, rest...)) return self;
    return call_boxed<Op, &cpu_fallback>(self, rest...);
  }

 private:
  // The fast path; false when it does not apply (then nothing has happened).
  static bool try_on_host(const at::Tensor& self, Rest... rest) {
    if (!is_device_tensor(self)) return false;
    DeviceOperands operands;
    operands.take(self);
    (each_tensor(rest, [&](const at::Tensor& tensor) { operands.take(tensor); }), ...);
    std::optional<OnHostCall> call = operands.enter();
    if (!call) return false;
    counter_of<Op>().count(call->device.index());
    at::Tensor& host_self = call->hosts[0];
    size_t next = 1;
    // A braced list evaluates in order, so `next` walks the device tensors as `take` did.
    std::apply([&](const auto&... host_rest) { Op::redispatch(kCpu, host_self, host_rest...); },
               std::tuple<const std::decay_t<Rest>&...>{on_host(rest, call->hosts, next)...});
    return true;
  }
};

// An out= operator (its last argument the Tensor(a!) out) with a native kernel: the native
// kernel when it takes the call, else the boxed route the operator had (HostKernel's).
template <class Op, class Signature = typename Op::schema>
struct NativeOutKernel;

template <class Op, class... Args>
struct NativeOutKernel<Op, at::Tensor&(Args...)> {
  static at::Tensor& call(Args... args) {
    at::Tensor& out = std::get<sizeof...(Args) - 1>(std::forward_as_tuple(args...));
    if (NativeKernel<Op>::call(args...)) {
      count_native_call();
      return out;
    }
    if (routed_to_one_device) return call_boxed<Op, &cpu_fallback_on_one_device>(args...);
    return call_boxed<Op, &cpu_fallback>(args...);
  }

  static inline bool routed_to_one_device = false;  // set once by add_out(), at registration
};

// Registers Op's NativeOutKernel, with the boxed route it had (as add()).
template <class Op>
void add_out(torch::Library& m, const std::unordered_set<std::string>& routed) {
  const std::string name = aten_impl_name(Op::name, Op::overload_name);
  NativeOutKernel<Op>::routed_to_one_device = routed.count(name) != 0;
  m.impl(name.c_str(), TORCH_FN((NativeOutKernel<Op>::call)));
}

// A functional operator HostKernel's fast path does not fit: one whose CPU kernel writes an
// argument its schema does not mark (native_batch_norm's running statistics, which the boxed route
// writes back: Note [Mutations the schema does not mark] in operator_facts.cc), or one with a list
// of optional tensors (index.Tensor's indices, which each_tensor does not walk). Its native kernel
// when that takes the call, else the boxed route it had.
template <class Op, class Signature = typename Op::schema>
struct NativeOrBoxedKernel;

template <class Op, class Result, class... Args>
struct NativeOrBoxedKernel<Op, Result(Args...)> {
  static Result call(Args... args) {
    std::optional<Result> result = NativeKernel<Op>::call(args...);
    if (result) {
      count_native_call();
      return std::move(*result);
    }
    if (routed_to_one_device) return call_boxed<Op, &cpu_fallback_on_one_device>(args...);
    return call_boxed<Op, &cpu_fallback>(args...);
  }

  static inline bool routed_to_one_device = false;  // set once by add_native(), at registration
};

// An in-place operator whose native kernel says whether it took the call (the random fills, whose
// CPU kernel needs the boxed route's generator: Note [Random operators on the device] in
// fallback.cc).
template <class Op, class... Rest>
struct NativeOrBoxedKernel<Op, at::Tensor&(at::Tensor&, Rest...)> {
  static at::Tensor& call(at::Tensor& self, Rest... rest) {
    if (NativeKernel<Op>::call(self, rest...)) {
      count_native_call();
      return self;
    }
    if (routed_to_one_device) return call_boxed<Op, &cpu_fallback_on_one_device>(self, rest...);
    return call_boxed<Op, &cpu_fallback>(self, rest...);
  }

  static inline bool routed_to_one_device = false;  // set once by add_native(), at registration
};

// Registers Op's NativeOrBoxedKernel, with the boxed route it had (as add()).
template <class Op>
void add_native(torch::Library& m, const std::unordered_set<std::string>& routed) {
  const std::string name = aten_impl_name(Op::name, Op::overload_name);
  NativeOrBoxedKernel<Op>::routed_to_one_device = routed.count(name) != 0;
  m.impl(name.c_str(), TORCH_FN((NativeOrBoxedKernel<Op>::call)));
}

// Registers Op's HostInPlaceKernel.
template <class Op>
void add_in_place(torch::Library& m) {
  const std::string name = aten_impl_name(Op::name, Op::overload_name);
  m.impl(name.c_str(), TORCH_FN((HostInPlaceKernel<Op>::call)));
}

// Note [Foreach operators without boxing]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The optimizers' _foreach_ operators reach the boxed fallback whole (Note [Foreach operators in
// one host section] in registration.cc), and there the boxing costs more than the work
// (design/performance.md, "Measured choices in the code"): the dispatcher copies each list into
// an IValue list (a reference count, and so a Python incref, per tensor), the fallback rebuilds
// the lists with host aliases, and the CPU kernel's boxed wrapper unpacks them again.
// The operators the standard optimizers call (SGD, Adam, AdamW: their foreach paths) have
// unboxed kernels instead, from one template (HostListKernel): every device tensor of every
// argument is borrowed, the lists are aliased on the host in one host_aliases call (tensors of
// one storage share one CPU storage, so a list that names a tensor twice, or two lists that share
// one, alias as on the CPU), and the CPU kernel runs on the aliases in a host section. An
// in-place operator writes the device's bytes through its aliases: nothing to copy back. A
// functional one (_foreach_sqrt, _foreach_add.List, clip_grad_norm_'s _foreach_norm) returns
// new tensors, written in device memory as HostKernel's are. What the fast path cannot take goes
// to the boxed fallback, as before. The aliases carry requires_grad as HostKernel's do (Note
// [Kernels that ask whether an input requires grad] in fallback.cc).

// What the CPU kernel gets for an argument of type T: the argument itself, or its host aliases
// (the next ones of `hosts`, in the order each_tensor walked them for DeviceOperands).
template <class T>
class OnHost {
 public:
  OnHost(const T& value, const std::vector<at::Tensor>& /*hosts*/, size_t& /*next*/)
      : value_(value) {}
  const T& get() const { return value_; }

 private:
  const T& value_;
};
template <>
class OnHost<at::Tensor> {
 public:
  OnHost(const at::Tensor& value, const std::vector<at::Tensor>& hosts, size_t& next)
      : value_(on_host(value, hosts, next)) {}
  const at::Tensor& get() const { return value_; }

 private:
  const at::Tensor& value_;
};
template <>
class OnHost<std::optional<at::Tensor>> {
 public:
  OnHost(const std::optional<at::Tensor>& value, const std::vector<at::Tensor>& hosts,
         size_t& next)
      : value_(on_host(value, hosts, next)) {}
  const std::optional<at::Tensor>& get() const { return value_; }

 private:
  std::optional<at::Tensor> value_;
};
template <>
class OnHost<at::TensorList> {
 public:
  OnHost(at::TensorList value, const std::vector<at::Tensor>& hosts, size_t& next) {
    items_.reserve(value.size());
    for (const at::Tensor& tensor : value) items_.push_back(on_host(tensor, hosts, next));
  }
  at::TensorList get() const { return items_; }

 private:
  std::vector<at::Tensor> items_;
};

// The device's own loop for Op, where it has one (Note [Fused foreach loops] in
// foreach_loops.cc): false, having done nothing, when it does not take the call.
template <class Op>
struct FusedLoop {
  template <class... Args>
  static bool run(const Args&... /*args*/) {
    return false;
  }
};
template <>
struct FusedLoop<at::_ops::_foreach_add__List> {
  static bool run(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {
    return fused_foreach_add_(self, other, alpha);
  }
};
template <>
struct FusedLoop<at::_ops::_foreach_add__Scalar> {
  static bool run(at::TensorList self, const at::Scalar& scalar) {
    return fused_foreach_add_(self, scalar);
  }
};
template <>
struct FusedLoop<at::_ops::_foreach_mul__Scalar> {
  static bool run(at::TensorList self, const at::Scalar& scalar) {
    return fused_foreach_mul_(self, scalar);
  }
};

template <class Op, class Signature = typename Op::schema>
struct HostListKernel;

// The argument types HostListKernel hands over: the tensors each_tensor and OnHost alias, and
// values passed through as they are. Anything else (a Tensor?[] list, an ITensorListRef) would be
// passed to the CPU kernel unaliased, so it is refused at compile time.
template <class T>
constexpr bool kListKernelArgument =
    std::is_same_v<T, at::Tensor> || std::is_same_v<T, std::optional<at::Tensor>> ||
    std::is_same_v<T, at::TensorList> || std::is_same_v<T, at::Scalar> ||
    std::is_same_v<T, c10::ArrayRef<at::Scalar>> ||
    std::is_same_v<T, std::optional<at::ScalarType>> || std::is_arithmetic_v<T>;

template <class Op, class Result, class... Args>
struct HostListKernel<Op, Result(Args...)> {
  static_assert(std::is_same_v<Result, void> || std::is_same_v<Result, std::vector<at::Tensor>>,
                "list kernels write their arguments in place or return new tensors");
  static_assert((kListKernelArgument<std::decay_t<Args>> && ...),
                "an argument type HostListKernel does not alias: add it to OnHost first");

  static Result call(Args... args) {
    if constexpr (std::is_same_v<Result, void>) {
      // In place: the first argument is the list written (Tensor(a!)[] self).
      const at::TensorList written = std::get<0>(std::forward_as_tuple(args...));
      refuse_inference_writes(written);
      bool native = false;
      if constexpr (NativeKernel<Op>::exists) native = NativeKernel<Op>::call(args...);
      if (native) {
        // counted by the native kernel (native_foreach_)
      } else if (FusedLoop<Op>::run(args...)) {
        g_calls.fetch_add(1, std::memory_order_relaxed);
        counter_of<Op>().count(written.empty() ? -1 : written[0].device().index());
      } else if (!try_on_host(args...)) {
        boxed(args...);
      }
      bump_versions(written);
    } else {
      if constexpr (NativeKernel<Op>::exists) {
        // counted by the native kernel (native_foreach_sqrt)
        if (std::optional<Result> result = NativeKernel<Op>::call(args...)) {
          return std::move(*result);
        }
      }
      std::optional<Result> result = try_on_host(args...);
      if (result) return std::move(*result);
      return boxed(args...);
    }
  }

 private:
  using Outcome = std::conditional_t<std::is_same_v<Result, void>, bool, std::optional<Result>>;

  static Outcome not_taken() {
    if constexpr (std::is_same_v<Result, void>) {
      return false;
    } else {
      return std::nullopt;
    }
  }

  // The fast path (Note [Foreach operators without boxing]); not taken: nothing has happened.
  static Outcome try_on_host(Args... args) {
    DeviceOperands operands;
    (each_tensor(args, [&](const at::Tensor& tensor) { operands.take(tensor); }), ...);
    std::optional<OnHostCall> call = operands.enter();
    if (!call) return not_taken();
    counter_of<Op>().count(call->device.index());
    size_t next = 0;
    // A braced list evaluates in order, so `next` walks the device tensors as `take` did.
    const std::tuple<OnHost<std::decay_t<Args>>...> on_host_args{
        OnHost<std::decay_t<Args>>(args, call->hosts, next)...};
    const auto run = [&] {
      return std::apply(
          [](const auto&... each) { return Op::redispatch(kCpu, each.get()...); }, on_host_args);
    };
    if constexpr (std::is_same_v<Result, void>) {
      run();  // in place: the aliases are the device's bytes
      return true;
    } else {
      Result results;
      {
        ResultsOnDevice on_device(*call->section, call->device.index());
        results = run();
      }
      results_to_device(results, call->section, call->device);
      return results;
    }
  }

  // The boxed fallback the operator is registered to otherwise (registration.cc).
  static Result boxed(Args... args) { return call_boxed<Op, &cpu_fallback>(args...); }
};

// Registers Op's HostKernel, with the boxed route it had (`routed`: the names the composite
// routing takes, cpu_kernels_under_composites).
template <class Op>
void add(torch::Library& m, const std::unordered_set<std::string>& routed) {
  const std::string name = aten_impl_name(Op::name, Op::overload_name);
  HostKernel<Op>::routed_to_one_device = routed.count(name) != 0;
  HostKernel<Op>::exact_same_device =
      device_check_of(c10::Dispatcher::singleton()
                          .findSchemaOrThrow(Op::name, Op::overload_name)
                          .schema()) == DeviceCheck::kExactSame;
  m.impl(name.c_str(), TORCH_FN((HostKernel<Op>::call)));
}

// Registers Op's HostListKernel and adds its name to `registered`.
template <class Op>
void add_list(torch::Library& m, std::unordered_set<std::string>& registered) {
  const std::string name = aten_impl_name(Op::name, Op::overload_name);
  m.impl(name.c_str(), TORCH_FN((HostListKernel<Op>::call)));
  registered.insert(name);
}

}  // namespace

std::unordered_set<std::string> register_host_kernels(torch::Library& m) {
  const std::vector<std::string> names =
      cpu_kernels_under_composites(c10::DispatchKey::CPU, c10::DispatchKey::PrivateUse1);
  const std::unordered_set<std::string> routed(names.begin(), names.end());
  // What an MLP, a transformer block and their backward passes call most (measured by torch's
  // profiler over training steps of the project's example models).
  add<at::_ops::add_Tensor>(m, routed);
  add<at::_ops::sub_Tensor>(m, routed);
  add<at::_ops::mul_Tensor>(m, routed);
  add<at::_ops::div_Tensor>(m, routed);
  // Masks and their arithmetic (attention masks, padding, position buckets).
  add<at::_ops::eq_Tensor>(m, routed);
  add<at::_ops::eq_Scalar>(m, routed);
  add<at::_ops::ne_Tensor>(m, routed);
  add<at::_ops::ne_Scalar>(m, routed);
  add<at::_ops::lt_Tensor>(m, routed);
  add<at::_ops::lt_Scalar>(m, routed);
  add<at::_ops::le_Tensor>(m, routed);
  add<at::_ops::le_Scalar>(m, routed);
  add<at::_ops::gt_Tensor>(m, routed);
  add<at::_ops::gt_Scalar>(m, routed);
  add<at::_ops::ge_Tensor>(m, routed);
  add<at::_ops::ge_Scalar>(m, routed);
  add<at::_ops::bitwise_and_Tensor>(m, routed);
  add<at::_ops::bitwise_or_Tensor>(m, routed);
  add<at::_ops::bitwise_xor_Tensor>(m, routed);
  add<at::_ops::minimum>(m, routed);
  add<at::_ops::maximum>(m, routed);
  add<at::_ops::pow_Tensor_Scalar>(m, routed);
  add<at::_ops::native_dropout_backward>(m, routed);
  add<at::_ops::cat>(m, routed);  // its native kernel only: the host path has no list operands
  add<at::_ops::mm>(m, routed);
  add<at::_ops::addmm>(m, routed);
  add<at::_ops::bmm>(m, routed);
  add_out<at::_ops::mm_out>(m, routed);  // a grouped product's loop (mixtures of experts)
  add<at::_ops::relu>(m, routed);
  add<at::_ops::threshold_backward>(m, routed);
  add<at::_ops::gelu>(m, routed);
  add<at::_ops::gelu_backward>(m, routed);
  add<at::_ops::tanh>(m, routed);
  add<at::_ops::sin>(m, routed);  // rotary position embeddings
  add<at::_ops::cos>(m, routed);
  add<at::_ops::exp>(m, routed);
  add<at::_ops::log>(m, routed);
  add<at::_ops::tanh_backward>(m, routed);
  add<at::_ops::sigmoid>(m, routed);
  add<at::_ops::sqrt>(m, routed);
  add<at::_ops::rsqrt>(m, routed);
  add<at::_ops::silu>(m, routed);
  add<at::_ops::silu_backward>(m, routed);  // routed to the CPU kernel as ops.cc says
  add<at::_ops::neg>(m, routed);
  add<at::_ops::mean_dim>(m, routed);
  add_out<at::_ops::arange_start_out>(m, routed);  // position ids
  add<at::_ops::sigmoid_backward>(m, routed);
  add<at::_ops::_log_softmax>(m, routed);
  add<at::_ops::_log_softmax_backward_data>(m, routed);
  add<at::_ops::_softmax>(m, routed);
  add<at::_ops::_softmax_backward_data>(m, routed);
  add<at::_ops::sum_dim_IntList>(m, routed);
  add_out<at::_ops::abs_out>(m, routed);  // abs reaches it (T5's relative position buckets)
  add<at::_ops::clamp>(m, routed);
  add<at::_ops::clamp_min>(m, routed);
  add<at::_ops::clamp_max>(m, routed);
  add<at::_ops::var_correction>(m, routed);  // statistics, normalisations written by hand
  add<at::_ops::std_correction>(m, routed);
  add<at::_ops::var_mean_correction>(m, routed);
  add<at::_ops::std_mean_correction>(m, routed);
  add<at::_ops::linalg_vector_norm>(m, routed);  // gradient clipping, normalisations
  // Extremes: logits' argmax, max-subtraction, clipping norms.
  add<at::_ops::amax>(m, routed);
  add<at::_ops::amin>(m, routed);
  add<at::_ops::max_dim>(m, routed);
  add<at::_ops::min_dim>(m, routed);
  add<at::_ops::argmax>(m, routed);
  add<at::_ops::argmin>(m, routed);
  add<at::_ops::max>(m, routed);
  add<at::_ops::min>(m, routed);
  // The mask arithmetic of scaled_dot_product_attention's math path (its causal mask, and
  // _safe_softmax's rows of -inf).
  add<at::_ops::tril>(m, routed);
  add<at::_ops::triu>(m, routed);
  add<at::_ops::isneginf>(m, routed);
  add<at::_ops::all_dim>(m, routed);
  add<at::_ops::any_dim>(m, routed);
  add<at::_ops::all>(m, routed);
  add<at::_ops::any>(m, routed);
  add<at::_ops::where_self>(m, routed);
  add_out<at::_ops::where_self_out>(m, routed);  // where with two numbers
  add<at::_ops::index_select>(m, routed);  // embedding's forward
  add<at::_ops::embedding_dense_backward>(m, routed);
  add<at::_ops::gather>(m, routed);
  add<at::_ops::scatter_src>(m, routed);
  add<at::_ops::scatter_value>(m, routed);
  add<at::_ops::scatter_add>(m, routed);
  add<at::_ops::index_add>(m, routed);
  add<at::_ops::nll_loss_forward>(m, routed);
  add<at::_ops::nll_loss_backward>(m, routed);
  add<at::_ops::native_layer_norm>(m, routed);
  add<at::_ops::native_layer_norm_backward>(m, routed);
  add<at::_ops::native_group_norm>(m, routed);  // diffusers' UNets
  add<at::_ops::native_group_norm_backward>(m, routed);
  add_native<at::_ops::native_batch_norm>(m, routed);  // its running statistics are written
  add_native<at::_ops::index_Tensor>(m, routed);  // its indices are a list of optional tensors
  add<at::_ops::native_batch_norm_backward>(m, routed);
  // Pooling (CNNs' max and average pools, and their global average pools).
  add<at::_ops::max_pool2d_with_indices>(m, routed);
  add<at::_ops::max_pool2d_with_indices_backward>(m, routed);
  add<at::_ops::avg_pool2d>(m, routed);
  add<at::_ops::avg_pool2d_backward>(m, routed);
  add<at::_ops::_adaptive_avg_pool2d>(m, routed);
  add<at::_ops::_adaptive_avg_pool2d_backward>(m, routed);
  // The random fills (rand, randn, randint, init's fills, dropout's feature masks).
  add_native<at::_ops::uniform_>(m, routed);
  add_native<at::_ops::normal_>(m, routed);
  add_native<at::_ops::bernoulli__float>(m, routed);
  add_native<at::_ops::random_>(m, routed);
  add_native<at::_ops::random__to>(m, routed);
  add_native<at::_ops::random__from>(m, routed);
  add_in_place<at::_ops::add__Tensor>(m);
  add_in_place<at::_ops::sub__Tensor>(m);
  add_in_place<at::_ops::mul__Tensor>(m);
  add_in_place<at::_ops::div__Tensor>(m);
  add_in_place<at::_ops::scatter__src>(m);  // gather's backward, and index arithmetic
  add_in_place<at::_ops::scatter__value>(m);
  add_in_place<at::_ops::scatter_add_>(m);
  add_in_place<at::_ops::index_add_>(m);  // a mixture of experts' combine
  add_in_place<at::_ops::masked_fill__Scalar>(m);  // attention masks
  // The _foreach_ operators of the foreach paths of SGD, Adam and AdamW (torch/optim), and of
  // clip_grad_norm_'s norms and scaling (Note [Foreach operators without boxing]).
  std::unordered_set<std::string> lists;
  add_list<at::_ops::_foreach_add__List>(m, lists);
  add_list<at::_ops::_foreach_add__Scalar>(m, lists);
  add_list<at::_ops::_foreach_mul__Scalar>(m, lists);
  add_list<at::_ops::_foreach_mul__Tensor>(m, lists);
  add_list<at::_ops::_foreach_mul__List>(m, lists);
  add_list<at::_ops::_foreach_div__Scalar>(m, lists);
  add_list<at::_ops::_foreach_div__ScalarList>(m, lists);
  add_list<at::_ops::_foreach_lerp__Scalar>(m, lists);
  add_list<at::_ops::_foreach_addcmul__Scalar>(m, lists);
  add_list<at::_ops::_foreach_addcdiv__Scalar>(m, lists);
  add_list<at::_ops::_foreach_addcdiv__ScalarList>(m, lists);
  add_list<at::_ops::_foreach_maximum__List>(m, lists);
  add_list<at::_ops::_foreach_sqrt>(m, lists);
  add_list<at::_ops::_foreach_norm_Scalar>(m, lists);
  add_list<at::_ops::_foreach_add_List>(m, lists);
  return lists;
}

uint64_t host_kernel_calls() { return g_calls.load(std::memory_order_relaxed); }

// Note [Versions of lists written in place]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch has no ADInplaceOrView kernel for the _foreach_ operators: on the CPU their composite
// kernel calls the per-tensor in-place operators, and those bump each tensor's version (and
// refuse an inference tensor outside inference mode); a device's own kernel must do both itself,
// as CUDA's do. Without it, autograd did not see a saved tensor changed by an optimizer's
// _foreach_mul_, and computed a wrong gradient where the CPU raises. Every in-place _foreach_
// operator of this device (the unboxed ones, the device's loops, and the boxed fallback's:
// registration.cc) refuses an inference tensor before writing anything, with torch's message,
// where the CPU writes the first tensors and then raises, and bumps the versions of the list it
// wrote once it has written it.
void refuse_inference_writes(at::TensorList written) {
  if (c10::InferenceMode::is_enabled()) return;
  for (const at::Tensor& tensor : written) {
    // Bumping an inference tensor outside inference mode throws torch's error; nothing else is.
    if (tensor.defined() && tensor.is_inference()) tensor.unsafeGetTensorImpl()->bump_version();
  }
}

void bump_versions(at::TensorList written) {
  for (const at::Tensor& tensor : written) {
    if (tensor.defined()) tensor.unsafeGetTensorImpl()->bump_version();
  }
}

}  // namespace oclvm::torch_adapter
