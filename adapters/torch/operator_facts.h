// adapters/torch/operator_facts.h — what the fallback (fallback.cc) needs to know about an
// operator, learnt once per operator and thread from its schema: which arguments are generators,
// which arguments its CPU kernel writes although the schema does not mark them, whether the
// direct path takes it, which device check CUDA's kernel makes, and which dtypes it widens.
//
// Thread-safety: facts_of keeps its cache per thread; the rest are pure functions.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "adapters/torch/fallback_counts.h"

namespace oclvm::torch_adapter {

// Note [Device checks as on CUDA]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch's code generation gives each CUDA kernel the device check its entry in
// native_functions.yaml asks for; the CPU kernels the fallback runs check nothing (everything
// they see is on the CPU), so `torch.cat([device, cpu])` returned a device tensor where CUDA
// raises, and code that passed here failed there. So the fallback makes the check the CUDA
// kernel would have made, before anything moves, from the lists adapters/torch/device_checks.py
// writes at configure time from the yaml of the torch built against:
//   - kExactSameDevice (the yaml's default): every defined tensor argument, in lists too, on one
//     device, with torch's own check and words ("Expected all tensors to be on the same device,
//     but found at least two devices, ...");
//   - kTensorIteratorDevice: the same, a zero-dimensional CPU tensor aside, which TensorIterator
//     takes as a scalar (check_one_device).
// Operators in neither list (copies and conversions, indexing with CPU indices) take tensors of
// several devices on purpose and are not checked; composite operators never reach the fallback,
// and their parts are checked as they run. The unboxed kernels (host_kernels.cc), which run the
// CPU kernel without the fallback, send a kExactSame operator's call with a zero-dimensional CPU
// tensor to the fallback, which refuses it (`F.nll_loss(device_input, torch.tensor(1))`).
enum class DeviceCheck : uint8_t { kNone, kExactSame, kTensorIterator };

// Note [Dtypes the CPU kernels lack]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A few operators have CUDA kernels for dtypes their CPU kernels refuse ("histogram_cpu" not
// implemented for 'Int'), and libraries call them with those dtypes on every device but the CPU:
// transformers' mixture-of-experts routers count tokens per expert with torch.histc of an
// integer tensor. For those operators the fallback first runs the CPU kernel as it is (a dtype
// it has keeps the CPU's own numbers: polygamma has float16 for n = 0, bfloat16 for every n);
// when the kernel refuses the dtype (NotImplementedError), the fallback answers as CUDA does: the
// arguments of that dtype are converted on the device to a wider one the CPU kernel takes, the
// kernel runs, and the results of the wider dtype are converted back (out= arguments are written
// through a wider stand-in). The wider dtype holds every value exactly (integers up to 2^53 in
// float64; float16 and bfloat16 in float32), so only the kernel's own arithmetic differs from a
// kernel of the narrow dtype, as CUDA's kernels also compute these in float32 or wider. The
// table holds the pairs where torch 2.13's OpInfo database lists a dtype for CUDA and not for the
// CPU (tests/torch/test_cuda_parity.py walks them); complex32 stays refused, and so does what only
// CUDA's libraries give (cuFFT's half-precision FFTs and stft, power-of-two sizes only; cuSPARSE's
// half-precision sampled_addmm; the fused attention kernels). One pair is no widening: nansum of
// a complex tensor, which the CPU refuses outright; CUDA counts an element with a NaN part as
// zero, so the device sums where(isnan(x), 0, x) with the same arguments (nanmean, a composite,
// divides it).
enum class Widen : uint8_t {
  kNone,
  kIntegralToDouble,  // uint8, int8, int16, int32, int64 -> float64
  kHalfToFloat,       // float16, bfloat16 -> float32
  kBoolToByte,        // bool -> uint8 (abs; trace sums into int64 either way)
  kComplexNanSum,     // complex nansum: a sum with NaN elements as zero (run_complex_nansum)
};

// What the fallback needs to know about an operator, from its schema.
struct OperatorFacts {
  std::vector<size_t> generators;       // arguments of type Generator or Generator?
  std::vector<size_t> unmarked_writes;  // arguments the CPU kernel writes unannounced
  bool direct = false;                  // Note [The direct path of the fallback] may take it
  // No argument written, marked or not: the results are new tensors (Note [Results written in
  // device memory] in host_results.cc).
  bool functional = false;
  DeviceCheck device_check = DeviceCheck::kNone;  // Note [Device checks as on CUDA]
  Widen widen = Widen::kNone;                     // Note [Dtypes the CPU kernels lack]
  FallbackCounter* fallback = nullptr;            // the operator's count (fallback_counts.h)
};

// The device check torch's CUDA kernel of the operator with `schema` makes (kNone for operators
// outside aten and those that check nothing).
DeviceCheck device_check_of(const c10::FunctionSchema& schema);

// The facts of `op`, learnt on this thread's first call of it.
OperatorFacts& facts_of(const c10::OperatorHandle& op);

// The dtype `widen` takes `type` to; nullopt when it leaves `type` alone.
std::optional<c10::ScalarType> widened(Widen widen, c10::ScalarType type);

// kExactSame: every defined tensor argument of `op` on `stack` (from `begin`), in lists too, on
// one device; torch's own check and error otherwise.
void check_exact_same_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                             size_t begin);

}  // namespace oclvm::torch_adapter
