// adapters/torch/native_launches.cc — submit_native and wait_native_launches: the native path's
// device work, submitted without waiting, and its tickets kept per device until a sync point.
#include "adapters/torch/native_launches.h"

#include <deque>
#include <exception>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
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

struct Kept {
  Mutex mutex;
  std::vector<std::deque<vm::Ticket>> per_device OCLVM_GUARDED_BY(mutex);
  // The first failure found outside a sync point (an evicted ticket's), per device.
  std::vector<std::exception_ptr> failed OCLVM_GUARDED_BY(mutex);

  void grow(size_t device) OCLVM_REQUIRES(mutex) {
    if (per_device.size() <= device) {
      per_device.resize(device + 1);
      failed.resize(device + 1);
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

}  // namespace

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
  Kept& k = kept();
  {
    MutexLock lock(k.mutex);
    for (size_t d = 0; d < k.per_device.size(); ++d) {
      if (index >= 0 && d != static_cast<size_t>(index)) continue;
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
  if (error) translate_errors([&] { std::rethrow_exception(error); });
}

size_t pending_native_launches() {
  Kept& k = kept();
  MutexLock lock(k.mutex);
  size_t count = 0;
  for (const std::deque<vm::Ticket>& tickets : k.per_device) count += tickets.size();
  return count;
}

}  // namespace oclvm::torch_adapter
