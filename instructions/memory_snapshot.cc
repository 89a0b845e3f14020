// instructions/memory_snapshot.cc — the PyTorch snapshot dictionary, written as a pickle.
#include "oclvm/instructions/memory_snapshot.h"

#include <string_view>
#include <unordered_map>

namespace oclvm {
namespace {

// Writes pickle protocol 2 opcodes for the few types a snapshot needs. Strings are memoized: the
// second occurrence of a string is a reference to the first (LONG_BINGET).
class PickleWriter {
 public:
  PickleWriter() { out_ += "\x80\x02"; }  // PROTO 2

  void none() { out_ += 'N'; }
  void boolean(bool value) { out_ += value ? '\x88' : '\x89'; }  // NEWTRUE / NEWFALSE

  void integer(int64_t value) {
    if (value >= INT32_MIN && value <= INT32_MAX) {
      out_ += 'J';  // BININT: 4 bytes, little-endian, signed
      append_le(static_cast<uint64_t>(value), 4);
    } else {
      long1(static_cast<uint64_t>(value), value < 0);
    }
  }
  void unsigned_integer(uint64_t value) {
    if (value <= INT32_MAX) {
      integer(static_cast<int64_t>(value));
    } else {
      long1(value, false);
    }
  }

  void string(std::string_view text) {
    auto [it, inserted] = memo_.try_emplace(std::string(text), next_memo_);
    if (!inserted) {
      out_ += 'j';  // LONG_BINGET
      append_le(it->second, 4);
      return;
    }
    out_ += 'X';  // BINUNICODE: 4-byte length, UTF-8 bytes
    append_le(text.size(), 4);
    out_ += text;
    out_ += 'r';  // LONG_BINPUT
    append_le(next_memo_++, 4);
  }

  // A dict or list: begin, then its items (key, value pairs for a dict), then end.
  void begin_dict() { out_ += "}("; }  // EMPTY_DICT, MARK
  void end_dict() { out_ += 'u'; }     // SETITEMS
  void begin_list() { out_ += "]("; }  // EMPTY_LIST, MARK
  void end_list() { out_ += 'e'; }     // APPENDS
  void pair_of_zeros() {               // the tuple (0, 0)
    integer(0);
    integer(0);
    out_ += '\x86';  // TUPLE2
  }

  std::string finish() {
    out_ += '.';  // STOP
    return std::move(out_);
  }

 private:
  void append_le(uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((value >> (8 * i)) & 0xff);
  }
  // LONG1: a length byte, then the two's complement little-endian bytes. A positive value whose
  // top bit is set needs a ninth, zero byte.
  void long1(uint64_t value, bool negative) {
    out_ += '\x8a';
    const bool ninth = !negative && (value >> 63) != 0;
    out_ += static_cast<char>(ninth ? 9 : 8);
    append_le(value, 8);
    if (ninth) out_ += '\0';
  }

  std::string out_;
  std::unordered_map<std::string, uint32_t> memo_;
  uint32_t next_memo_ = 0;
};

void write_frames(PickleWriter& w, const std::shared_ptr<const MemoryContext>& context) {
  w.begin_list();
  if (context != nullptr) {
    for (const StackFrame& frame : context->frames) {
      w.begin_dict();
      w.string("filename");
      w.string(frame.filename);
      w.string("line");
      w.integer(frame.line);
      w.string("name");
      w.string(frame.name);
      w.end_dict();
    }
  }
  w.end_list();
}

void write_block(PickleWriter& w, const BlockSnapshot& block) {
  w.begin_dict();
  w.string("address");
  w.unsigned_integer(block.address);
  w.string("size");
  w.unsigned_integer(block.size);
  w.string("requested_size");
  w.unsigned_integer(block.requested);
  w.string("state");
  w.string(block.allocated ? "active_allocated" : "inactive");
  w.string("frames");
  write_frames(w, block.context);
  w.end_dict();
}

void write_segment(PickleWriter& w, DeviceIndex device, const SegmentSnapshot& segment) {
  uint64_t allocated = 0;
  uint64_t requested = 0;
  for (const BlockSnapshot& block : segment.blocks) {
    if (!block.allocated) continue;
    allocated += block.size;
    requested += block.requested;
  }
  w.begin_dict();
  w.string("device");
  w.integer(device);
  w.string("address");
  w.unsigned_integer(segment.address);
  w.string("total_size");
  w.unsigned_integer(segment.size);
  w.string("allocated_size");
  w.unsigned_integer(allocated);
  w.string("active_size");  // no block waits for another stream: active == allocated
  w.unsigned_integer(allocated);
  w.string("requested_size");
  w.unsigned_integer(requested);
  w.string("stream");
  w.integer(0);
  w.string("segment_type");
  w.string(segment.small_pool ? "small" : "large");
  w.string("segment_pool_id");
  w.pair_of_zeros();
  w.string("is_expandable");
  w.boolean(false);
  w.string("frames");
  write_frames(w, nullptr);
  w.string("blocks");
  w.begin_list();
  for (const BlockSnapshot& block : segment.blocks) write_block(w, block);
  w.end_list();
  w.end_dict();
}

void write_event(PickleWriter& w, const MemoryEvent& event) {
  w.begin_dict();
  w.string("action");
  w.string(memory_action_name(event.action));
  w.string("addr");
  w.unsigned_integer(event.address);
  w.string("size");
  w.unsigned_integer(event.size);
  w.string("stream");
  w.integer(event.stream);
  w.string("time_us");
  w.integer(event.time_us);
  w.string("frames");
  write_frames(w, event.context);
  if (event.action == MemoryAction::kOom) {
    w.string("device_free");
    w.unsigned_integer(event.device_free);
  }
  w.end_dict();
}

}  // namespace

std::string to_pickle(const MemorySnapshot& snapshot) {
  int max_index = -1;
  for (const DeviceMemorySnapshot& device : snapshot.devices) {
    max_index = std::max<int>(max_index, device.device.index);
  }
  std::vector<const DeviceMemorySnapshot*> by_index(static_cast<size_t>(max_index + 1), nullptr);
  for (const DeviceMemorySnapshot& device : snapshot.devices) {
    by_index[static_cast<size_t>(device.device.index)] = &device;
  }

  PickleWriter w;
  w.begin_dict();
  w.string("segments");
  w.begin_list();
  for (const DeviceMemorySnapshot& device : snapshot.devices) {
    for (const SegmentSnapshot& segment : device.segments) {
      write_segment(w, device.device.index, segment);
    }
  }
  w.end_list();
  w.string("device_traces");
  w.begin_list();
  for (const DeviceMemorySnapshot* device : by_index) {
    w.begin_list();
    if (device != nullptr) {
      for (const MemoryEvent& event : device->events) write_event(w, event);
    }
    w.end_list();
  }
  w.end_list();
  w.string("allocator_settings");
  w.begin_dict();
  w.end_dict();
  w.end_dict();
  return w.finish();
}

}  // namespace oclvm
