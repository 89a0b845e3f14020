// instructions/memory_snapshot.h — a memory snapshot of devices, and its PyTorch pickle form.
//
//   DeviceMemorySnapshot  one device: its allocator's segments and blocks (with the contexts the
//                         history kept for live blocks) and the history's events.
//   MemorySnapshot        several devices.
//   to_pickle             the snapshot as PyTorch's memory snapshot (the dictionary that
//                         torch.cuda.memory._snapshot() returns), pickled, so that PyTorch's
//                         memory viewer and torch.cuda._memory_viz read it.
//
// Snapshots are taken by the TakeMemorySnapshot instruction (Runtime::memory_snapshot), on the
// device's worker, so segments, blocks and events are one consistent moment of the device.
//
// The pickle (protocol 2) holds only dicts, lists, strings, integers, None and tuples; repeated
// strings (file and function names) are stored once and referenced. Every opcode it writes (PROTO,
// EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS, BINUNICODE, LONG_BINPUT, LONG_BINGET, BININT,
// LONG1, NEWTRUE, NEWFALSE, TUPLE2, STOP) is one that the unpickler of PyTorch's web viewer
// (pytorch.org/memory_viz, MemoryViz.js) reads, so the file loads there as it is. Its structure, PyTorch's:
//   {"segments": [{"device", "address", "total_size", "allocated_size", "active_size",
//                  "requested_size", "stream", "segment_type": "small" | "large",
//                  "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
//                  "blocks": [{"address", "size", "requested_size",
//                              "state": "active_allocated" | "inactive", "frames"}]}],
//    "device_traces": [[{"action", "addr", "size", "stream", "time_us", "frames",
//                        "device_free" (oom only)}] per device
//                      index 0 .. max index],
//    "allocator_settings": {}}
// Frames are {"filename", "line", "name"}, innermost first. A device index without a snapshot
// gets an empty trace.
//
// Thread-safety: plain values; to_pickle is a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oclvm/storage/allocator.h"
#include "oclvm/storage/device.h"
#include "oclvm/storage/memory_history.h"

namespace oclvm {

struct DeviceMemorySnapshot {
  Device device;
  std::vector<SegmentSnapshot> segments;  // by address
  std::vector<MemoryEvent> events;        // oldest first; empty unless the history keeps events
  uint64_t dropped_events = 0;            // events the history could not store
};

struct MemorySnapshot {
  std::vector<DeviceMemorySnapshot> devices;
};

// PyTorch's snapshot dictionary, pickled (protocol 2). A device's place in device_traces is
// Device::index.
std::string to_pickle(const MemorySnapshot& snapshot);

}  // namespace oclvm
