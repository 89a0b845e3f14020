// storage/memory_history.h — MemoryHistory: what one device's memory went through, for snapshots.
//
// While recording is on, a device keeps a bounded history of what its allocator did — blocks
// handed out and given back, segments taken from and returned to the driver, requests that ran
// out of memory, snapshots taken — and, for every live block, where it was allocated. A memory
// snapshot (instructions/memory_snapshot.h) joins it with the allocator's segment map; its format
// is PyTorch's, so PyTorch's memory viewer reads oclvm's history too.
//
//   MemoryAction    what one event records; the names are PyTorch's trace actions.
//   StackFrame      one frame of the code that asked (file, line, function).
//   MemoryContext   the frames of one request, innermost first; shared, immutable.
//   MemoryEvent     one entry of the history.
//   HistoryOptions  what to record (PyTorch's _record_memory_history arguments).
//   MemoryHistory   the history itself.
//
// Who records what: the backend records segment_alloc / segment_free (it is the one door to the
// driver); whoever hands a block to a user records alloc / free_requested / free_completed / oom
// (the AllocateBlob and ReleaseTensor instructions, the trace replayer), passing the stream and
// the request's context. Contexts are captured by the caller that builds the request (on its own
// thread: a Python stack is only readable there) and travel with the instruction.
//
// Promises:
//   - off (the default) costs one branch per allocation and keeps nothing;
//   - at most max_entries events are kept: when full, each new event replaces the oldest;
//   - recording never throws: an event that cannot be stored (no memory) is dropped and counted;
//   - a live block's context is kept while it lives (mode kState or kAll) and forgotten at its
//     free, so what is kept is bounded by max_entries plus the live blocks.
//
// Thread-safety: thread-compatible. A device's history belongs to the thread that owns its
// allocator (the device worker, or a caller holding its execution right); Runtime and the
// instructions reach it only from there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace oclvm {

enum class MemoryAction : uint8_t {
  kAlloc,          // a block was handed out (address, allocated size)
  kFreeRequested,  // its owner gave it back
  kFreeCompleted,  // the allocator may reuse it
  kSegmentAlloc,   // a segment was taken from the driver
  kSegmentFree,    // a segment was given back to the driver
  kOom,            // a request ran out of memory (size: what was asked; address 0)
  kSnapshot,       // a snapshot was taken here
};
inline constexpr int kMemoryActionCount = 7;

// PyTorch's name of an action ("alloc", "free_requested", ..., "snapshot").
const char* memory_action_name(MemoryAction action);
// The action of that name; false for a name that is not one.
bool parse_memory_action(const std::string& name, MemoryAction* out);

struct StackFrame {
  std::string filename;
  int line = 0;
  std::string name;  // the function
};

struct MemoryContext {
  std::vector<StackFrame> frames;  // innermost first
};

struct MemoryEvent {
  MemoryAction action = MemoryAction::kAlloc;
  uintptr_t address = 0;  // device address of the block or segment; 0 for kOom and kSnapshot
  size_t size = 0;        // bytes of the block (allocated size) or segment; asked bytes for kOom
  int64_t stream = 0;     // the stream the request ran on (vm::StreamId), 0 when none
  int64_t time_us = 0;    // microseconds since the Unix epoch
  std::shared_ptr<const MemoryContext> context;  // null when no context was captured
  uint64_t device_free = 0;  // kOom only: bytes the device could still have given then
};

enum class HistoryMode : uint8_t {
  kOff,    // nothing recorded
  kState,  // contexts of live blocks only
  kAll,    // and the events
};

// When to capture a context (PyTorch's `context` argument).
enum class ContextMode : uint8_t {
  kNone,   // never
  kState,  // at allocation, kept while the block lives
  kAlloc,  // at allocation, also kept in the alloc event
  kAll,    // at allocation and at free
};

struct HistoryOptions {
  HistoryMode mode = HistoryMode::kOff;
  ContextMode context = ContextMode::kAll;
  size_t max_entries = SIZE_MAX;  // events kept (> 0)
  bool clear = false;             // drop what was recorded before
  uint32_t skip = 0;              // bit (1 << action) set: that action is not recorded
};

class MemoryHistory {
 public:
  // Starts, changes or stops recording. Stopping (kOff) drops the events and contexts, as does
  // `clear`. Throws InvalidArgument, changing nothing, for max_entries == 0.
  void configure(const HistoryOptions& options);
  const HistoryOptions& options() const { return options_; }

  // Whether anything is recorded; the one branch callers take when recording is off.
  bool on() const { return options_.mode != HistoryMode::kOff; }

  // The stream segment events are tagged with: whoever records a block request sets it first.
  void set_stream(int64_t stream) { stream_ = stream; }

  // Records one event (nothing when off or skipped). kAlloc keeps `context` for the block until
  // its kFreeCompleted; kFreeCompleted forgets it. Never throws.
  void record(MemoryAction action, uintptr_t address, size_t size, int64_t stream,
              std::shared_ptr<const MemoryContext> context = nullptr) noexcept;
  // A request of `size` bytes that ran out of memory, when `device_free` bytes were left (what
  // device_free_bytes() in storage/allocator.h says). Never throws.
  void record_oom(size_t size, int64_t stream, uint64_t device_free,
                  std::shared_ptr<const MemoryContext> context = nullptr) noexcept;
  // A segment event at the current stream (set_stream), without context.
  void record_segment(MemoryAction action, uintptr_t address, size_t size) noexcept {
    if (on()) record(action, address, size, stream_);
  }

  // The events kept, oldest first.
  std::vector<MemoryEvent> events() const;
  // The context of the live block at `address`, or null.
  std::shared_ptr<const MemoryContext> context_of(uintptr_t address) const;
  // Events that could not be stored (no memory).
  uint64_t dropped() const { return dropped_; }

 private:
  void clear();
  void record_event(MemoryAction action, uintptr_t address, size_t size, int64_t stream,
                    std::shared_ptr<const MemoryContext> context, uint64_t device_free) noexcept;

  HistoryOptions options_;
  int64_t stream_ = 0;
  std::vector<MemoryEvent> ring_;  // events; once full (max_entries), next_ is the oldest
  size_t next_ = 0;
  std::unordered_map<uintptr_t, std::shared_ptr<const MemoryContext>> live_;  // block -> context
  uint64_t dropped_ = 0;
};

}  // namespace oclvm
