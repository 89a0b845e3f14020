// adapters/torch/native_launches.cc — submit_native and wait_native_launches: the native path's
// device work, submitted without waiting, and its tickets kept per device until a sync point.
#include "adapters/torch/native_launches.h"

#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstring>
#include <deque>
#include <exception>
#include <optional>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/host_view.h"
#include "adapters/torch/native_kernel_table.h"
#include "oclvm/instructions/builder.h"
#include "oclvm/storage/log.h"
#include "oclvm/storage/thread_annotations.h"
#include "oclvm/vm/device_worker.h"

namespace oclvm::torch_adapter {
namespace {

// Note [Launches that do not wait]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On a GPU an operator's kernel takes microseconds to launch and its result is wanted only when
// the host reads it: a copy to the host, .item(), synchronize(). So a native operator submits its
// list with Runtime::submit_here and returns: on its own thread when the device is idle, with the
// commands enqueued and flushed to the driver (no hand-off to the worker, and no wait for the
// device); queued for the device's worker otherwise. Everything that reads the result orders
// after it in the VM: later lists by their blobs' accesses (across streams too), a host section
// (a CPU kernel's) by finishing the queues the submitted lists left commands on.
//
// What a ticket adds is the failure. One found as the list is dispatched on this thread is in
// the ticket when submit_here returns, so it is thrown by the operator that caused it, as before.
// One found later (a list queued behind another thread's work, or a device command that failed)
// is sticky for its device: it is thrown by the device's next sync point, which is where CUDA
// reports an asynchronous error too. The sync points are wait_native_launches' callers:
// synchronize (the device's or a stream's), every copy to the host and .item(), and every host
// section the adapter enters (a CPU kernel's, a storage operator's), so that no host code reads
// the output of a failed launch without an error. A failure of a dispatch is named after its
// instruction and kernel; a failed device command is the driver's error for the device. When one
// sync point finds several failures it throws the first and writes each other one to the log.
// OCLVM_LAUNCH_BLOCKING=1 runs every list synchronously instead, so that each failure is thrown
// by the operator that caused it.
//
// The tickets are kept per device, at most kMaxKept; one more first waits for the oldest, whose
// commands the device has long finished in the usual case (the VM's own worker waits for its
// oldest batch's marker beyond 64 batches in flight), and keeps its failure for the next sync
// point. Waiting takes the tickets out of the list under the lock and waits with the lock
// released, so launches from other threads go on.
constexpr size_t kMaxKept = 256;

// Note [Errors found on the device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A CPU kernel checks each index as it reads it and throws; a device kernel cannot throw, and
// checking the indices on the host first would wait for the device at every call. So a kernel
// that reads indices checks each one on the device: an index out of range reads nothing (its
// element of the result is zero) and is recorded in the device's error word, a small buffer each
// device gets on its first such kernel (device_error_arg). Every sync point that waits for the
// device's launches then reads the word when a kernel that may have written it was submitted since
// the last read (the device is marked once the kernel is submitted: device_errors_submitted), and
// throws the error with the CPU's words, naming the value and the bound, as CUDA's device-side
// assertions surface at the next synchronisation. The word is
// cleared when read, so each error is thrown once. OCLVM_LAUNCH_BLOCKING=1 reads it after each
// such kernel, so that the operator itself throws, as on the CPU.
//
// The word is an argument the kernels read and write, so the VM orders those kernels among
// themselves across streams, and its read after all of them; a kernel of another kind never
// waits for it. A failed ticket is thrown first; the word stays marked for the next sync point.
// The word is device memory like any other: memory_allocated() counts its block from the first
// such kernel on, as torch counts a CUDA library's workspace that stays allocated.
constexpr size_t kErrorWordLongs = 4;  // the code (low int of element 0), the value, the bound

struct Kept {
  Mutex mutex;
  std::vector<std::deque<vm::Ticket>> per_device OCLVM_GUARDED_BY(mutex);
  // The first failure found outside a sync point (an evicted ticket's), per device.
  std::vector<std::exception_ptr> failed OCLVM_GUARDED_BY(mutex);
  // Each device's error word (Note [Errors found on the device]), once made, and whether a kernel
  // given it was submitted since the word was last read.
  std::vector<std::optional<at::Tensor>> error_word OCLVM_GUARDED_BY(mutex);
  std::vector<bool> error_word_marked OCLVM_GUARDED_BY(mutex);

  void grow(size_t device) OCLVM_REQUIRES(mutex) {
    if (per_device.size() <= device) {
      per_device.resize(device + 1);
      failed.resize(device + 1);
      error_word.resize(device + 1);
      error_word_marked.resize(device + 1);
    }
  }
};

// Never destroyed: a ticket's markers are driver events, which must not be released after the
// driver's own exit handlers ran.
Kept& kept() {
  static Kept* const instance = new Kept();
  return *instance;
}

void log_dropped(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    log_message(LogLevel::kError, "another native launch failed too: %s", e.what());
  }
}

// Waits for each ticket; returns the first failure among them and logs the others.
std::exception_ptr wait_all(std::deque<vm::Ticket>& tickets) {
  std::exception_ptr first;
  for (vm::Ticket& ticket : tickets) {
    try {
      ticket.wait();
    } catch (...) {
      if (!first) {
        first = std::current_exception();
      } else {
        log_dropped(std::current_exception());
      }
    }
  }
  tickets.clear();
  return first;
}

bool launch_blocking() {
  static const bool blocking = runtime().options().launch_blocking;
  return blocking;
}

using ErrorWord = std::array<int64_t, kErrorWordLongs>;

// Reads and clears `word`, device `index`'s error word, in one list (so that no kernel's error
// falls between the read and the clear), and returns what it held. The list waits, in the VM's
// order, for every kernel that was given the word.
ErrorWord read_and_clear(const at::Tensor& word) {
  ErrorWord host{};
  const BlobRef ref = element0(word);
  translate_errors([&] {
    InstructionsBuilder builder = runtime().builder();
    builder.copy_device_to_host(ref.blob, ref.offset, host.data(), sizeof(host));
    builder.fill(ref.blob, ref.offset, sizeof(host), 0, sizeof(int64_t));
    runtime().run(builder.take());
  });
  return host;
}

// Throws the error that device `index`'s word held, with the CPU's words; returns when it held
// none.
void throw_device_error(c10::DeviceIndex index, const ErrorWord& word) {
  int32_t code = 0;
  std::memcpy(&code, word.data(), sizeof(code));  // the first int, in the device's byte order
  if (code == static_cast<int32_t>(DeviceError::kNone)) return;
  const int device = static_cast<int>(index);
  constexpr const char* kWhere =
      ": a sync point throws what the device finds; OCLVM_LAUNCH_BLOCKING=1 has the operator "
      "throw it)";
  TORCH_CHECK(code != static_cast<int32_t>(DeviceError::kIndexOutOfDataBounds),
              "INDICES element is out of DATA bounds, id=", word[1], " axis_dim=", word[2],
              " (found by a kernel on opencl:", device, kWhere);
  TORCH_CHECK_INDEX(code != static_cast<int32_t>(DeviceError::kIndexOutOfRange),
                    "index out of range in self: index ", word[1], " of a dimension of size ",
                    word[2], " (found by a kernel on opencl:", device, kWhere);
  TORCH_CHECK_INDEX(code != static_cast<int32_t>(DeviceError::kTargetOutOfBounds), "Target ",
                    word[1], " is out of bounds. (", word[2], " classes; found by a kernel on "
                    "opencl:", device, kWhere);
  TORCH_CHECK((code & 0xff) != static_cast<int32_t>(DeviceError::kIndexOutOfBoundsOfDim), "index ",
              word[1], " is out of bounds for dimension ", code >> 8, " with size ", word[2],
              " (found by a kernel on opencl:", device, kWhere);
  constexpr int32_t kIndexing = static_cast<int32_t>(DeviceError::kIndexOutOfBoundsForIndexing);
  TORCH_CHECK_INDEX((code & 0xff) != kIndexing, "index ", word[1],
                    " is out of bounds for dimension ", code >> 8, " with size ", word[2],
                    " (found by a kernel on opencl:", device, kWhere);
  TORCH_CHECK(false, "opencl:", device, " reported device error ", code);
}

// The marked error words of device d, taken: each with its device's number.
using MarkedWords = std::vector<std::pair<size_t, at::Tensor>>;

// Takes device d's mark, if its word is marked, into `marked`.
void take_mark(Kept& k, size_t d, MarkedWords& marked) OCLVM_REQUIRES(k.mutex) {
  if (d >= k.error_word.size() || !k.error_word_marked[d] || !k.error_word[d]) return;
  k.error_word_marked[d] = false;
  marked.emplace_back(d, *k.error_word[d]);
}

// Marks again the words of `marked` from `first` on, for the next sync point.
void mark_again(Kept& k, const MarkedWords& marked, size_t first) {
  MutexLock lock(k.mutex);
  for (size_t j = first; j < marked.size(); ++j) k.error_word_marked[marked[j].first] = true;
}

// Reads each word taken, and throws the first error one held; the words not read by then, and
// one whose read failed, are marked again.
void check_device_errors(Kept& k, const MarkedWords& marked) {
  for (size_t i = 0; i < marked.size(); ++i) {
    std::optional<ErrorWord> word;
    try {
      word = read_and_clear(marked[i].second);
      throw_device_error(static_cast<c10::DeviceIndex>(marked[i].first), *word);
    } catch (...) {
      mark_again(k, marked, word ? i + 1 : i);
      throw;
    }
  }
}

}  // namespace

const char* const kDeviceErrorSource =
    "void oclvm_report(__global long* err_base, ulong err_offset, int code, long value,\n"
    "                  long bound) {\n"
    "  __global long* err = (__global long*)((__global char*)err_base + err_offset);\n"
    "  if (atomic_cmpxchg((volatile __global int*)err, 0, code) == 0) {\n"
    "    err[1] = value;\n"
    "    err[2] = bound;\n"
    "  }\n"
    "}\n";

LaunchArg device_error_arg(c10::DeviceIndex index) {
  const auto d = static_cast<size_t>(index);
  Kept& k = kept();
  {
    MutexLock lock(k.mutex);
    k.grow(d);
    if (k.error_word[d]) return blob_arg(*k.error_word[d], KernelAccess::kReadWrite);
  }
  // Made outside the lock: zeros() runs device work, whose sync points take it.
  at::Tensor word = at::zeros({static_cast<int64_t>(kErrorWordLongs)},
                              at::TensorOptions().dtype(at::kLong).device(
                                  c10::Device(c10::DeviceType::PrivateUse1, index)));
  MutexLock lock(k.mutex);
  if (!k.error_word[d]) k.error_word[d] = std::move(word);  // else another thread's is kept
  return blob_arg(*k.error_word[d], KernelAccess::kReadWrite);
}

void device_errors_submitted(c10::DeviceIndex index) {
  const auto d = static_cast<size_t>(index);
  Kept& k = kept();
  MarkedWords marked;
  {
    MutexLock lock(k.mutex);
    k.grow(d);
    k.error_word_marked[d] = true;
    if (launch_blocking()) take_mark(k, d, marked);
  }
  check_device_errors(k, marked);
}

void submit_native(c10::DeviceIndex index, vm::InstructionList&& list) {
  if (launch_blocking()) {
    translate_errors([&] { runtime().run(std::move(list)); });
    return;
  }
  vm::Ticket ticket = translate_errors([&] { return runtime().submit_here(std::move(list)); });
  translate_errors([&] { ticket.rethrow_if_failed(); });
  const auto d = static_cast<size_t>(index);
  std::deque<vm::Ticket> oldest;
  Kept& k = kept();
  {
    MutexLock lock(k.mutex);
    k.grow(d);
    std::deque<vm::Ticket>& tickets = k.per_device[d];
    tickets.push_back(std::move(ticket));
    if (tickets.size() > kMaxKept) {
      oldest.push_back(std::move(tickets.front()));
      tickets.pop_front();
    }
  }
  if (oldest.empty()) return;
  if (std::exception_ptr error = wait_all(oldest)) {
    MutexLock lock(k.mutex);
    if (k.failed[d]) {
      log_dropped(error);
    } else {
      k.failed[d] = error;
    }
  }
}

void wait_native_launches(c10::DeviceIndex index) {
  // A thread that dispatches (inside a host section or an instruction's callback) must not wait
  // for tickets; its own section's entry already drained them.
  if (vm::DeviceWorker::holds_execution_right_on_this_thread()) return;
  std::deque<vm::Ticket> taken;
  std::exception_ptr sticky;
  MarkedWords marked;  // Note [Errors found on the device]
  Kept& k = kept();
  {
    MutexLock lock(k.mutex);
    for (size_t d = 0; d < k.per_device.size(); ++d) {
      if (index >= 0 && d != static_cast<size_t>(index)) continue;
      take_mark(k, d, marked);
      std::deque<vm::Ticket>& tickets = k.per_device[d];
      while (!tickets.empty()) {
        taken.push_back(std::move(tickets.front()));
        tickets.pop_front();
      }
      if (k.failed[d]) {
        if (sticky) {
          log_dropped(k.failed[d]);
        } else {
          sticky = k.failed[d];
        }
        k.failed[d] = nullptr;
      }
    }
  }
  std::exception_ptr error = wait_all(taken);
  if (sticky && error) log_dropped(error);
  if (sticky) error = sticky;  // the older one first
  if (error) {
    mark_again(k, marked, 0);  // the words wait for the next sync point
    translate_errors([&] { std::rethrow_exception(error); });
  }
  check_device_errors(k, marked);
}

size_t pending_native_launches() {
  Kept& k = kept();
  MutexLock lock(k.mutex);
  size_t count = 0;
  for (const std::deque<vm::Ticket>& tickets : k.per_device) count += tickets.size();
  return count;
}

}  // namespace oclvm::torch_adapter
