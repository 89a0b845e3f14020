// storage/memory_history.cc — the ring of events and the contexts of live blocks.
#include "oclvm/storage/memory_history.h"

#include <chrono>

#include "oclvm/storage/errors.h"

namespace oclvm {
namespace {

constexpr const char* kActionNames[kMemoryActionCount] = {
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom", "snapshot",
};

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

const char* memory_action_name(MemoryAction action) {
  return kActionNames[static_cast<int>(action)];
}

bool parse_memory_action(const std::string& name, MemoryAction* out) {
  for (int i = 0; i < kMemoryActionCount; ++i) {
    if (name == kActionNames[i]) {
      *out = static_cast<MemoryAction>(i);
      return true;
    }
  }
  return false;
}

void MemoryHistory::configure(const HistoryOptions& options) {
  if (options.max_entries == 0) {
    throw InvalidArgument("Expected max_entries of at least 1 for the memory history, but got 0");
  }
  if (options.clear || options.mode == HistoryMode::kOff ||
      options.max_entries != options_.max_entries) {
    clear();
  }
  options_ = options;
}

void MemoryHistory::clear() {
  ring_.clear();
  ring_.shrink_to_fit();
  next_ = 0;
  live_.clear();
  dropped_ = 0;
}

void MemoryHistory::record(MemoryAction action, uintptr_t address, size_t size, int64_t stream,
                           std::shared_ptr<const MemoryContext> context) noexcept {
  record_event(action, address, size, stream, std::move(context), 0);
}

void MemoryHistory::record_oom(size_t size, int64_t stream, uint64_t device_free,
                               std::shared_ptr<const MemoryContext> context) noexcept {
  record_event(MemoryAction::kOom, 0, size, stream, std::move(context), device_free);
}

void MemoryHistory::record_event(MemoryAction action, uintptr_t address, size_t size,
                                 int64_t stream, std::shared_ptr<const MemoryContext> context,
                                 uint64_t device_free) noexcept {
  if (!on()) return;
  const ContextMode wanted = options_.context;
  try {
    if (action == MemoryAction::kAlloc) {
      if (wanted != ContextMode::kNone && context != nullptr) live_[address] = context;
      if (wanted < ContextMode::kAlloc) context = nullptr;
    } else if (action == MemoryAction::kFreeCompleted) {
      live_.erase(address);
    }
    if (action != MemoryAction::kAlloc && wanted != ContextMode::kAll) context = nullptr;
    if (options_.mode != HistoryMode::kAll) return;
    if ((options_.skip >> static_cast<int>(action)) & 1u) return;
    MemoryEvent event{action, address, size, stream, now_us(), std::move(context), device_free};
    if (ring_.size() < options_.max_entries) {
      ring_.push_back(std::move(event));
    } else {
      ring_[next_] = std::move(event);
      next_ = (next_ + 1) % ring_.size();
    }
  } catch (...) {
    ++dropped_;  // std::bad_alloc: the history is incomplete, and says so through dropped()
  }
}

std::vector<MemoryEvent> MemoryHistory::events() const {
  std::vector<MemoryEvent> ordered;
  ordered.reserve(ring_.size());
  ordered.insert(ordered.end(), ring_.begin() + static_cast<std::ptrdiff_t>(next_), ring_.end());
  ordered.insert(ordered.end(), ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(next_));
  return ordered;
}

std::shared_ptr<const MemoryContext> MemoryHistory::context_of(uintptr_t address) const {
  auto it = live_.find(address);
  return it == live_.end() ? nullptr : it->second;
}

}  // namespace oclvm
