// tests/vm/probe.h — a test-only instruction for exercising the VM without the instruction set.
//
// A Probe appends its id to a shared log when it runs (on whichever thread dispatches it), then
// runs an optional body with the execution context. Operands are declared like any instruction's,
// so the VM computes dependencies for it.
#pragma once

#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "oclvm/vm/instruction.h"

namespace oclvm::vm::testing {

struct ProbeLog {
  std::mutex mutex;
  std::vector<int> ids;
  std::vector<std::thread::id> threads;
  std::vector<std::vector<StreamWait>> waits;  // the waits each probe was dispatched with
  void add(int id, const std::vector<StreamWait>& seen) {
    std::lock_guard<std::mutex> lock(mutex);
    ids.push_back(id);
    threads.push_back(std::this_thread::get_id());
    waits.push_back(seen);
  }
};

class Probe : public Instruction {
 public:
  using Body = std::function<void(ExecutionContext&)>;
  Probe(Stream& stream, ProbeLog* log, int id, Body body = {}, bool after_shutdown = false)
      : Instruction(stream), log_(log), id_(id), body_(std::move(body)),
        after_shutdown_(after_shutdown) {}
  Probe& reads(std::shared_ptr<BlobObject> blob) {
    add_operand(std::move(blob), Access::kRead);
    return *this;
  }
  Probe& writes(std::shared_ptr<BlobObject> blob) {
    add_operand(std::move(blob), Access::kWrite);
    return *this;
  }
  const char* name() const override { return "Probe"; }
  std::string describe() const override { return "#" + std::to_string(id_); }
  bool runs_after_shutdown() const override { return after_shutdown_; }
  void execute(ExecutionContext& context) override {
    if (log_ != nullptr) log_->add(id_, waits());
    if (body_) body_(context);
  }

 private:
  ProbeLog* log_;
  int id_;
  Body body_;
  bool after_shutdown_;
};

inline std::unique_ptr<Probe> probe(Stream& stream, ProbeLog* log, int id, Probe::Body body = {}) {
  return std::make_unique<Probe>(stream, log, id, std::move(body));
}

}  // namespace oclvm::vm::testing
