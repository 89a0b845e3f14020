// adapters/torch/native_launches.cc — submit_native and wait_native_launches: the native path's
// device work, submitted without waiting, and its tickets kept per device until a sync point.
#include "adapters/torch/native_launches.h"

#include <deque>
#include <exception>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "oclvm/storage/thread_annotations.h"

namespace oclvm::torch_adapter {
namespace {

// Note [Launches that do not wait]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On a GPU an operator's kernel takes microseconds to launch and its result is wanted only when
// the host reads it: a copy to the host, .item(), synchronize(). So a native operator submits its
// list with Runtime::submit_here and returns once the commands are enqueued (on its own thread
// when the device is idle: no hand-off to the worker, and no wait for the device). Everything
// that reads the result orders after it in the VM: later lists by their blobs' accesses, a host
// section (a CPU kernel's) by finishing the queues the submitted lists left commands on, a copy
// to the host by its queue's order.
//
// What a ticket adds is the failure. One found as the list is dispatched is in the ticket when
// submit_here returns, so it is thrown by the operator that caused it, as before. One found later
// (a list queued behind another thread's work, or a device command that failed) is thrown by the
// next sync point of the device, which is where CUDA reports an asynchronous error too; its
// message names the failed instruction and its kernel. OCLVM_LAUNCH_BLOCKING=1 runs every list
// synchronously, so that each failure is thrown by the operator that caused it.
//
// The tickets are kept per device, at most kMaxKept; one more first waits for the oldest, whose
// commands the device has long finished in the usual case (the VM's own worker waits for its
// oldest batch's marker beyond 64 batches in flight). Waiting takes the tickets out of the list
// under the lock and waits with the lock released, so launches from other threads go on.
constexpr size_t kMaxKept = 256;

struct Kept {
  Mutex mutex;
  std::vector<std::deque<vm::Ticket>> per_device OCLVM_GUARDED_BY(mutex);
};

// Never destroyed: a ticket's markers are driver events, which must not be released after the
// driver's own exit handlers ran.
Kept& kept() {
  static Kept* const instance = new Kept();
  return *instance;
}

// Waits for each ticket and throws the first failure after all were waited for.
void wait_all(std::deque<vm::Ticket>& tickets) {
  std::exception_ptr first;
  for (vm::Ticket& ticket : tickets) {
    try {
      ticket.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  tickets.clear();
  if (first) translate_errors([&] { std::rethrow_exception(first); });
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
  std::deque<vm::Ticket> oldest;
  {
    Kept& k = kept();
    MutexLock lock(k.mutex);
    const auto d = static_cast<size_t>(index);
    if (k.per_device.size() <= d) k.per_device.resize(d + 1);
    std::deque<vm::Ticket>& tickets = k.per_device[d];
    tickets.push_back(std::move(ticket));
    if (tickets.size() > kMaxKept) {
      oldest.push_back(std::move(tickets.front()));
      tickets.pop_front();
    }
  }
  wait_all(oldest);
}

void wait_native_launches(c10::DeviceIndex index) {
  std::deque<vm::Ticket> taken;
  {
    Kept& k = kept();
    MutexLock lock(k.mutex);
    for (size_t d = 0; d < k.per_device.size(); ++d) {
      if (index >= 0 && d != static_cast<size_t>(index)) continue;
      std::deque<vm::Ticket>& tickets = k.per_device[d];
      while (!tickets.empty()) {
        taken.push_back(std::move(tickets.front()));
        tickets.pop_front();
      }
    }
  }
  wait_all(taken);
}

size_t pending_native_launches() {
  Kept& k = kept();
  MutexLock lock(k.mutex);
  size_t count = 0;
  for (const std::deque<vm::Ticket>& tickets : k.per_device) count += tickets.size();
  return count;
}

}  // namespace oclvm::torch_adapter
