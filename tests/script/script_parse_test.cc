// tests/script/script_parse_test.cc — the instruction script language's parser.
//
// No device: every construct parses into the statement it stands for, and every malformed input
// is refused with its exact "FILE:LINE:COL: error: message" (and nothing is returned, so nothing
// can run). tests/script/script_run_test.cc runs scripts on devices.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "adapters/script/script.h"

namespace oclvm::script {
namespace {

constexpr Device kOpenCL0{DeviceType::kOpenCL, 0};
constexpr Device kOpenCL1{DeviceType::kOpenCL, 1};
constexpr Device kCpu{DeviceType::kCpu, 0};

Script parse(const std::string& text, size_t devices = 1) {
  return parse_script(text, "t.oclvm", ParseOptions{devices});
}

// The what() of the ScriptError that parsing `text` throws ("" and a test failure if none).
std::string parse_error(const std::string& text, size_t devices = 1) {
  try {
    parse(text, devices);
  } catch (const ScriptError& e) {
    return e.what();
  }
  ADD_FAILURE() << "parsed without an error:\n" << text;
  return "";
}

template <typename Op>
const Op& op_at(const Script& script, size_t i) {
  EXPECT_LT(i, script.statements.size());
  const Op* op = std::get_if<Op>(&script.statements.at(i).op);
  if (op == nullptr) {
    throw std::runtime_error("statement " + std::to_string(i) + " has another kind");
  }
  return *op;
}

// ---------------------------------------------------------------------------------------------
// Parsing: what each construct becomes.

TEST(ScriptParse, EmptyScriptAndCommentsOnly) {
  Script script = parse("# nothing\n\n   # indented comment\n\t\n");
  EXPECT_TRUE(script.statements.empty());
  EXPECT_EQ(script.file, "t.oclvm");
  EXPECT_EQ(script.expectation_count(), 0u);
  EXPECT_TRUE(parse("").statements.empty());
}

TEST(ScriptParse, Options) {
  Script script = parse(
      "require devices 2\n"
      "allocator buddy\n"
      "limit 8M\n"
      "caller_runs off\n");
  EXPECT_EQ(script.options.required_devices, 2u);
  EXPECT_EQ(script.options.allocator, "buddy");
  EXPECT_EQ(script.options.memory_limit, uint64_t{8} << 20);
  EXPECT_FALSE(script.options.caller_runs);

  Script defaults = parse("run\n");
  EXPECT_EQ(defaults.options.required_devices, 0u);
  EXPECT_EQ(defaults.options.allocator, "");
  EXPECT_EQ(defaults.options.memory_limit, 0u);
  EXPECT_TRUE(defaults.options.caller_runs);
}

TEST(ScriptParse, StreamsOfEveryRole) {
  Script script = parse(
      "stream c = opencl:0 compute\n"
      "stream up = opencl:0 h2d\n"
      "stream down = opencl:0 d2h\n"
      "stream u7 = opencl:1 user 7\n"
      "stream host_side = cpu compute\n",
      2);
  ASSERT_EQ(script.streams.size(), 5u);
  EXPECT_EQ(script.streams[0].name, "c");
  EXPECT_EQ(script.streams[0].device, kOpenCL0);
  EXPECT_EQ(script.streams[0].role, vm::StreamRole::kCompute);
  EXPECT_EQ(script.streams[1].role, vm::StreamRole::kHostToDevice);
  EXPECT_EQ(script.streams[2].role, vm::StreamRole::kDeviceToHost);
  EXPECT_EQ(script.streams[3].role, vm::StreamRole::kUser);
  EXPECT_EQ(script.streams[3].user_index, 7);
  EXPECT_EQ(script.streams[3].device, kOpenCL1);
  EXPECT_EQ(script.streams[3].line, 4);
  EXPECT_EQ(script.streams[4].device, kCpu);
  EXPECT_TRUE(script.statements.empty());  // declarations are not statements
}

TEST(ScriptParse, HostBuffers) {
  Script script = parse("host zeros 4K\nhost data = 01 ff ab*3 00*2\n");
  ASSERT_EQ(script.hosts.size(), 2u);
  EXPECT_EQ(script.hosts[0].name, "zeros");
  EXPECT_EQ(script.hosts[0].size, 4096u);
  EXPECT_TRUE(script.hosts[0].initial.empty());
  EXPECT_EQ(script.hosts[1].size, 7u);
  EXPECT_EQ(script.hosts[1].initial, (std::vector<uint8_t>{0x01, 0xff, 0xab, 0xab, 0xab, 0, 0}));
  EXPECT_EQ(script.hosts[1].line, 2);
}

TEST(ScriptParse, AllocOnDevicesAndStreamsBytesAndTyped) {
  Script script = parse(
      "stream s = opencl:0 user 1\n"
      "alloc a = opencl:0 4096\n"
      "alloc b = s 1M\n"
      "alloc t = cpu f32[2,3]\n"
      "alloc e = opencl:0 i64[0]\n"
      "alloc scalar = opencl:0 bf16[]\n"
      "run\n");
  ASSERT_EQ(script.blobs.size(), 5u);
  EXPECT_EQ(script.blobs[1].name, "b");
  EXPECT_EQ(script.blobs[1].line, 3);

  const auto& a = op_at<op::Alloc>(script, 0);
  EXPECT_EQ(a.blob, 0);
  EXPECT_EQ(a.stream, (StreamRef{-1, kOpenCL0}));
  EXPECT_EQ(a.bytes, 4096u);
  EXPECT_FALSE(a.dtype.has_value());

  const auto& b = op_at<op::Alloc>(script, 1);
  EXPECT_EQ(b.stream, (StreamRef{0, kOpenCL0}));
  EXPECT_EQ(b.bytes, uint64_t{1} << 20);

  const auto& t = op_at<op::Alloc>(script, 2);
  EXPECT_EQ(t.stream, (StreamRef{-1, kCpu}));
  EXPECT_EQ(t.dtype, DType::kF32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.bytes, 0u);

  EXPECT_EQ(op_at<op::Alloc>(script, 3).shape, (std::vector<int64_t>{0}));
  EXPECT_EQ(op_at<op::Alloc>(script, 4).dtype, DType::kBF16);
  EXPECT_TRUE(op_at<op::Alloc>(script, 4).shape.empty());

  EXPECT_EQ(script.statements[1].line, 3);
  EXPECT_EQ(script.statements[1].column, 1);
  EXPECT_TRUE(std::holds_alternative<op::Run>(script.statements.back().op));
}

TEST(ScriptParse, EveryInstruction) {
  Script script = parse(
      "stream s1 = opencl:0 user 1\n"
      "stream s2 = opencl:0 user 2\n"
      "host h 64\n"
      "alloc a = opencl:0 1K\n"           // 0
      "alloc b = opencl:0 1K\n"           // 1
      "write a[16] on s1 = de ad be ef\n" // 2
      "write b = 00*3\n"                  // 3
      "copy h[8] -> a[1K] 16 on s2\n"     // 4: host to device
      "copy a -> h[4] 60\n"               // 5: device to host
      "copy a[1] -> b[2] 3\n"             // 6: device to device
      "fill a[0] 1K 0xab\n"               // 7
      "fill a[8] 16 0x1234 on s1\n"       // 8
      "fill b[0] 8 0xdeadbeef\n"          // 9
      "fill b[0] 16 0x0102030405060708\n" // 10
      "soft_sync s1 -> s2\n"              // 11
      "soft_sync opencl:0 -> s1\n"        // 12
      "barrier s2\n"                      // 13
      "access read a[4] 8 -> h[56] on s1\n"  // 14
      "access write b[2] = 11 22\n"       // 15
      "empty_cache opencl:0\n"            // 16
      "reset_stats cpu peak\n"            // 17
      "reset_stats opencl:0 accumulated\n"// 18
      "query opencl:0\n"                  // 19
      "release a\n"                       // 20
      "run\n");                           // 21
  ASSERT_EQ(script.statements.size(), 22u);

  const auto& w = op_at<op::Write>(script, 2);
  EXPECT_EQ(w.dst.kind, Place::Kind::kBlob);
  EXPECT_EQ(w.dst.index, 0);
  EXPECT_EQ(w.dst.offset, 16u);
  EXPECT_EQ(w.data, (std::vector<uint8_t>{0xde, 0xad, 0xbe, 0xef}));
  ASSERT_TRUE(w.stream.has_value());
  EXPECT_EQ(*w.stream, (StreamRef{0, kOpenCL0}));
  EXPECT_FALSE(op_at<op::Write>(script, 3).stream.has_value());
  EXPECT_EQ(op_at<op::Write>(script, 3).data, (std::vector<uint8_t>{0, 0, 0}));

  const auto& h2d = op_at<op::Copy>(script, 4);
  EXPECT_EQ(h2d.src.kind, Place::Kind::kHost);
  EXPECT_EQ(h2d.src.offset, 8u);
  EXPECT_EQ(h2d.dst.kind, Place::Kind::kBlob);
  EXPECT_EQ(h2d.dst.offset, 1024u);
  EXPECT_EQ(h2d.bytes, 16u);
  EXPECT_EQ(*h2d.stream, (StreamRef{1, kOpenCL0}));
  const auto& d2h = op_at<op::Copy>(script, 5);
  EXPECT_EQ(d2h.src.kind, Place::Kind::kBlob);
  EXPECT_EQ(d2h.dst.kind, Place::Kind::kHost);
  EXPECT_EQ(d2h.dst.offset, 4u);
  const auto& d2d = op_at<op::Copy>(script, 6);
  EXPECT_EQ(d2d.src.index, 0);
  EXPECT_EQ(d2d.dst.index, 1);
  EXPECT_EQ(d2d.bytes, 3u);

  EXPECT_EQ(op_at<op::Fill>(script, 7).pattern, 0xabu);
  EXPECT_EQ(op_at<op::Fill>(script, 7).pattern_size, 1u);
  EXPECT_EQ(op_at<op::Fill>(script, 8).pattern, 0x1234u);
  EXPECT_EQ(op_at<op::Fill>(script, 8).pattern_size, 2u);
  EXPECT_EQ(op_at<op::Fill>(script, 8).dst.offset, 8u);
  EXPECT_TRUE(op_at<op::Fill>(script, 8).stream.has_value());
  EXPECT_EQ(op_at<op::Fill>(script, 9).pattern_size, 4u);
  EXPECT_EQ(op_at<op::Fill>(script, 10).pattern, 0x0102030405060708u);
  EXPECT_EQ(op_at<op::Fill>(script, 10).pattern_size, 8u);

  EXPECT_EQ(op_at<op::SoftSync>(script, 11).from, (StreamRef{0, kOpenCL0}));
  EXPECT_EQ(op_at<op::SoftSync>(script, 11).to, (StreamRef{1, kOpenCL0}));
  EXPECT_EQ(op_at<op::SoftSync>(script, 12).from, (StreamRef{-1, kOpenCL0}));
  EXPECT_EQ(op_at<op::Barrier>(script, 13).stream, (StreamRef{1, kOpenCL0}));

  const auto& read = op_at<op::AccessRead>(script, 14);
  EXPECT_EQ(read.src.offset, 4u);
  EXPECT_EQ(read.bytes, 8u);
  EXPECT_EQ(read.dst.kind, Place::Kind::kHost);
  EXPECT_EQ(read.dst.offset, 56u);
  EXPECT_TRUE(read.stream.has_value());
  const auto& write = op_at<op::AccessWrite>(script, 15);
  EXPECT_EQ(write.dst.index, 1);
  EXPECT_EQ(write.dst.offset, 2u);
  EXPECT_EQ(write.data, (std::vector<uint8_t>{0x11, 0x22}));

  EXPECT_EQ(op_at<op::EmptyCache>(script, 16).device, kOpenCL0);
  EXPECT_EQ(op_at<op::ResetStats>(script, 17).device, kCpu);
  EXPECT_EQ(op_at<op::ResetStats>(script, 17).kind, ResetKind::kPeak);
  EXPECT_EQ(op_at<op::ResetStats>(script, 18).kind, ResetKind::kAccumulated);
  EXPECT_EQ(op_at<op::Query>(script, 19).device, kOpenCL0);
  EXPECT_EQ(op_at<op::Release>(script, 20).blob, 0);
}

TEST(ScriptParse, EventsBlobUsesAndMemoryLimits) {
  Script script = parse(
      "stream s1 = opencl:0 user 1\n"
      "event e\n"
      "event f\n"
      "alloc b = opencl:1 1K\n"          // 0
      "record_event f on s1\n"           // 1
      "wait_event f on opencl:1\n"       // 2
      "record_event e on cpu\n"          // 3
      "record_blob_use b on opencl:1\n"  // 4
      "set_memory_limit opencl:0 8M\n"   // 5
      "set_memory_limit cpu 0\n"         // 6
      "release b\n"
      "run\n",
      2);
  ASSERT_EQ(script.events.size(), 2u);
  EXPECT_EQ(script.events[0].name, "e");
  EXPECT_EQ(script.events[1].name, "f");
  EXPECT_EQ(script.events[1].line, 3);

  const auto& record = op_at<op::RecordEvent>(script, 1);
  EXPECT_EQ(record.event, 1);
  EXPECT_EQ(record.stream, (StreamRef{0, kOpenCL0}));
  const auto& wait = op_at<op::WaitEvent>(script, 2);
  EXPECT_EQ(wait.event, 1);
  EXPECT_EQ(wait.stream, (StreamRef{-1, kOpenCL1}));
  EXPECT_EQ(op_at<op::RecordEvent>(script, 3).event, 0);
  EXPECT_EQ(op_at<op::RecordEvent>(script, 3).stream, (StreamRef{-1, kCpu}));

  const auto& use = op_at<op::RecordBlobUse>(script, 4);
  EXPECT_EQ(use.blob, 0);
  EXPECT_EQ(use.stream, (StreamRef{-1, kOpenCL1}));

  EXPECT_EQ(op_at<op::SetMemoryLimit>(script, 5).device, kOpenCL0);
  EXPECT_EQ(op_at<op::SetMemoryLimit>(script, 5).bytes, uint64_t{8} << 20);
  EXPECT_EQ(op_at<op::SetMemoryLimit>(script, 6).device, kCpu);
  EXPECT_EQ(op_at<op::SetMemoryLimit>(script, 6).bytes, 0u);
  EXPECT_EQ(script.expectation_count(), 0u);
}

TEST(ScriptParse, Expectations) {
  Script script = parse(
      "host h = 01 02\n"
      "alloc b = opencl:0 64\n"
      "run\n"
      "expect error out_of_memory\n"                           // 2
      "run\n"
      "expect error invalid_argument \"say \\\"hi\\\" \\\\ # not a comment\"\n"  // 4
      "run\n"
      "expect error backend\n"                                 // 6
      "run\n"
      "expect error error \"\"\n"                              // 8
      "expect allocated opencl:0 = 4K\n"                       // 9
      "expect reserved_bytes.large_pool.peak opencl:0 >= 2M\n" // 10
      "expect num_ooms opencl:0 != 1\n"                        // 11
      "expect segments opencl:0 < 3\n"                         // 12
      "expect peak_reserved opencl:0 <= 9223372036854775807\n" // 13
      "expect requested opencl:0 > 0\n"                        // 14
      "expect bytes b[4] = 00 ff*2\n"                          // 15
      "expect bytes h = 01 02\n"                               // 16
      "expect fill b[8] 16 0x00ff\n"                           // 17
      "expect fill h 2 0x0201\n"                               // 18
      "expect barriers = 3\n"                                  // 19
      "release b\n"
      "run\n");
  EXPECT_EQ(script.expectation_count(), 15u);
  EXPECT_EQ(op_at<op::ExpectError>(script, 2).kind, ErrorKind::kOutOfMemory);
  EXPECT_EQ(op_at<op::ExpectError>(script, 2).substring, "");
  EXPECT_EQ(op_at<op::ExpectError>(script, 4).kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(op_at<op::ExpectError>(script, 4).substring, "say \"hi\" \\ # not a comment");
  EXPECT_EQ(op_at<op::ExpectError>(script, 6).kind, ErrorKind::kBackend);
  EXPECT_EQ(op_at<op::ExpectError>(script, 8).kind, ErrorKind::kAny);

  const auto& allocated = op_at<op::ExpectStat>(script, 9);
  EXPECT_EQ(allocated.key.name, "allocated");
  EXPECT_EQ(allocated.key.canonical, "allocated_bytes.all.current");
  EXPECT_EQ(allocated.device, kOpenCL0);
  EXPECT_EQ(allocated.comparison, Comparison::kEqual);
  EXPECT_EQ(allocated.value, 4096);
  const auto& peak = op_at<op::ExpectStat>(script, 10);
  EXPECT_EQ(peak.key.canonical, "reserved_bytes.large_pool.peak");
  EXPECT_EQ(peak.comparison, Comparison::kGreaterEqual);
  EXPECT_EQ(peak.value, 2 << 20);
  EXPECT_EQ(op_at<op::ExpectStat>(script, 11).comparison, Comparison::kNotEqual);
  EXPECT_EQ(op_at<op::ExpectStat>(script, 12).comparison, Comparison::kLess);
  EXPECT_EQ(op_at<op::ExpectStat>(script, 13).comparison, Comparison::kLessEqual);
  EXPECT_EQ(op_at<op::ExpectStat>(script, 13).value, INT64_MAX);
  EXPECT_EQ(op_at<op::ExpectStat>(script, 14).comparison, Comparison::kGreater);

  const auto& bytes = op_at<op::ExpectBytes>(script, 15);
  EXPECT_EQ(bytes.place.kind, Place::Kind::kBlob);
  EXPECT_EQ(bytes.place.offset, 4u);
  EXPECT_EQ(bytes.bytes, (std::vector<uint8_t>{0x00, 0xff, 0xff}));
  EXPECT_EQ(op_at<op::ExpectBytes>(script, 16).place.kind, Place::Kind::kHost);
  const auto& fill = op_at<op::ExpectFill>(script, 17);
  EXPECT_EQ(fill.place.offset, 8u);
  EXPECT_EQ(fill.bytes, 16u);
  EXPECT_EQ(fill.pattern, 0x00ffu);
  EXPECT_EQ(fill.pattern_size, 2u);
  EXPECT_EQ(op_at<op::ExpectBarriers>(script, 19).value, 3);
}

TEST(ScriptParse, WindowsLineEndingsAndTabs) {
  Script script = parse("alloc\tb = opencl:0 16\r\nrun\r\nrelease b\r\nrun");
  EXPECT_EQ(script.statements.size(), 4u);
  EXPECT_EQ(op_at<op::Alloc>(script, 0).bytes, 16u);
}

TEST(ScriptParse, RequiredDevicesWidenTheDeviceRange) {
  // One device present, but the script requires two: opencl:1 is accepted (the script will be
  // skipped when run); opencl:2 still is not.
  Script script = parse("require devices 2\nalloc b = opencl:1 16\nrun\n", 1);
  EXPECT_EQ(op_at<op::Alloc>(script, 0).stream.device, kOpenCL1);
  EXPECT_EQ(parse_error("require devices 2\nalloc b = opencl:2 16\nrun\n", 1),
            "t.oclvm:2:11: error: Expected a device that exists (opencl:0 to opencl:1, or cpu), but "
            "got 'opencl:2' (1 OpenCL device present)");
  // Two present: opencl:1 needs no `require`.
  EXPECT_EQ(op_at<op::Alloc>(parse("alloc b = opencl:1 16\nrun\n", 2), 0).stream.device, kOpenCL1);
}

TEST(ScriptParse, FindStat) {
  DeviceStats stats;
  stats.allocated_bytes.aggregate().current = 11;
  stats.reserved_bytes.aggregate().peak = 22;
  stats.allocation.aggregate().allocated = 33;
  stats.requested_bytes[StatType::kLargePool].freed = 44;
  stats.num_ooms = 55;
  stats.num_device_alloc = 66;
  EXPECT_EQ(find_stat("allocated")->read(stats), 11);
  EXPECT_EQ(find_stat("peak_reserved")->read(stats), 22);
  EXPECT_EQ(find_stat("num_allocs")->read(stats), 33);
  EXPECT_EQ(find_stat("requested_bytes.large_pool.freed")->read(stats), 44);
  EXPECT_EQ(find_stat("num_ooms")->read(stats), 55);
  EXPECT_EQ(find_stat("num_device_alloc")->read(stats), 66);
  EXPECT_EQ(find_stat("segments")->canonical, "segment.all.current");
  EXPECT_EQ(find_stat("num_alloc_retries")->canonical, "num_alloc_retries");
  EXPECT_FALSE(find_stat("allocated_bytes.all").has_value());
  EXPECT_FALSE(find_stat("allocated_bytes.every.current").has_value());
  EXPECT_FALSE(find_stat("bytes.all.current").has_value());
  EXPECT_FALSE(find_stat("allocated_bytes.all.current.x").has_value());
  EXPECT_FALSE(find_stat("").has_value());
}

TEST(ScriptParse, CompareAndNames) {
  EXPECT_TRUE(compare(3, Comparison::kEqual, 3));
  EXPECT_FALSE(compare(3, Comparison::kNotEqual, 3));
  EXPECT_TRUE(compare(2, Comparison::kLess, 3));
  EXPECT_TRUE(compare(3, Comparison::kLessEqual, 3));
  EXPECT_FALSE(compare(3, Comparison::kGreater, 3));
  EXPECT_TRUE(compare(3, Comparison::kGreaterEqual, 3));
  EXPECT_STREQ(comparison_text(Comparison::kLessEqual), "<=");
  EXPECT_STREQ(error_kind_name(ErrorKind::kOutOfMemory), "out_of_memory");
  EXPECT_STREQ(error_kind_name(ErrorKind::kAny), "error");
}

// ---------------------------------------------------------------------------------------------
// Parsing: malformed scripts, each with its exact message.

struct Malformed {
  const char* name;
  const char* text;
  const char* error;
};

const Malformed kMalformed[] = {
    {"unknown keyword", "allocate b = opencl:0 16\n",
     "t.oclvm:1:1: error: Expected a statement (alloc, release, write, copy, fill, soft_sync, "
     "barrier, launch, record_event, wait_event, record_blob_use, access, empty_cache, "
     "reset_stats, set_memory_limit, query, run, expect, stream, host, event, kernel, require, "
     "allocator, limit or caller_runs), but got 'allocate'"},
    {"punctuation first", "= 3\n",
     "t.oclvm:1:1: error: Expected a statement (alloc, release, write, copy, fill, soft_sync, "
     "barrier, launch, record_event, wait_event, record_blob_use, access, empty_cache, "
     "reset_stats, set_memory_limit, query, run, expect, stream, host, event, kernel, require, "
     "allocator, limit or caller_runs), but got '='"},
    {"missing size", "alloc b = opencl:0\n",
     "t.oclvm:1:19: error: Expected a size in bytes or a typed shape such as f32[2,3], but the "
     "line ends after 'alloc b = opencl:0'"},
    {"missing '='", "alloc b opencl:0 16\n",
     "t.oclvm:1:9: error: Expected '=' after the blob name, but got 'opencl:0'"},
    {"missing copy size", "alloc a = opencl:0 16\nalloc b = opencl:0 16\ncopy a[0] -> b[2]\nrun\n",
     "t.oclvm:3:18: error: Expected a size in bytes, but the line ends after 'copy a[0] -> b[2]'"},
    {"missing arrow", "alloc a = opencl:0 16\ncopy a b 16\nrun\n",
     "t.oclvm:2:8: error: Expected '->' after the source, but got 'b'"},
    {"missing ']'", "alloc a = opencl:0 16\nfill a[4 8 0x00\nrun\n",
     "t.oclvm:2:10: error: Expected ']' after the offset, but got '8'"},
    {"missing stream role", "stream s = opencl:0\n",
     "t.oclvm:1:20: error: Expected a stream role (compute, h2d, d2h or user N), but the line "
     "ends after 'stream s = opencl:0'"},
    {"unknown stream role", "stream s = opencl:0 copy\n",
     "t.oclvm:1:21: error: Expected a stream role (compute, h2d, d2h or user N), but got 'copy'"},
    {"missing user number", "stream s = opencl:0 user\n",
     "t.oclvm:1:25: error: Expected a user stream number, but the line ends after 'stream s = "
     "opencl:0 user'"},
    {"unknown device", "alloc b = gpu:0 16\nrun\n",
     "t.oclvm:1:11: error: Expected a device of the form opencl, opencl:N or cpu, but got 'gpu:0'"},
    {"device index out of range", "alloc b = opencl:1 16\nrun\n",
     "t.oclvm:1:11: error: Expected a device that exists (opencl:0 or cpu), but got 'opencl:1' (1 "
     "OpenCL device present; a script that needs more says `require devices 2`)"},
    {"device index overflows", "empty_cache opencl:99999\nrun\n",
     "t.oclvm:1:13: error: Expected a device of the form opencl, opencl:N or cpu, but got "
     "'opencl:99999'"},
    {"cpu index", "query cpu:1\nrun\n",
     "t.oclvm:1:7: error: Expected a device of the form opencl, opencl:N or cpu, but got 'cpu:1'"},
    {"name where a device is expected", "empty_cache b\nrun\n",
     "t.oclvm:1:13: error: Expected a device (opencl:N or cpu), but got 'b'"},
    {"unknown stream", "alloc b = s1 16\nrun\n",
     "t.oclvm:1:11: error: Expected a stream (a name declared by `stream`, or a device such as "
     "opencl:0), but got 's1'"},
    {"blob as a stream", "alloc a = opencl:0 16\nbarrier a\nrun\n",
     "t.oclvm:2:9: error: Expected a stream, but 'a' is a blob (declared at line 1)"},
    {"unknown blob", "fill b[0] 16 0x00\nrun\n",
     "t.oclvm:1:6: error: Expected a blob to fill, but got 'b' (nothing of that name is declared "
     "before this line)"},
    {"blob used before its alloc", "release b\nrun\nalloc b = opencl:0 16\nrun\n",
     "t.oclvm:1:9: error: Expected a blob to release, but got 'b' (nothing of that name is "
     "declared before this line)"},
    {"host buffer as a blob", "host h 4\nfill h 4 0x00\nrun\n",
     "t.oclvm:2:6: error: Expected a blob to fill, but got 'h' (a host buffer, declared at line 1)"},
    {"blob as a host buffer", "alloc a = opencl:0 8\nalloc b = opencl:0 8\naccess read a 8 -> b\nrun\n",
     "t.oclvm:3:20: error: Expected a host buffer to read into, but got 'b' (a blob, declared at "
     "line 2)"},
    {"host to host copy", "host a 8\nhost b 8\ncopy a -> b 8\nrun\n",
     "t.oclvm:3:11: error: Expected a blob on at least one side of a copy, but both 'a' and 'b' "
     "are host buffers"},
    {"size 0 blob", "alloc b = opencl:0 0\nrun\n",
     "t.oclvm:1:20: error: Expected a blob size greater than 0, but got '0'"},
    {"size 0 host buffer", "host h 0\n",
     "t.oclvm:1:8: error: Expected a host buffer size greater than 0, but got '0'"},
    {"size 0 fill", "alloc b = opencl:0 8\nfill b 0K 0x00\nrun\n",
     "t.oclvm:2:8: error: Expected a fill size greater than 0, but got '0K'"},
    {"size 0 copy", "alloc a = opencl:0 8\nalloc b = opencl:0 8\ncopy a -> b 0\nrun\n",
     "t.oclvm:3:13: error: Expected a copy size greater than 0, but got '0'"},
    {"repeat count 0", "alloc b = opencl:0 8\nwrite b = ab*0\nrun\n",
     "t.oclvm:2:14: error: Expected a repeat count greater than 0, but got '0'"},
    {"number overflows", "alloc b = opencl:0 18446744073709551616\nrun\n",
     "t.oclvm:1:20: error: Expected a blob size to be a byte count such as 1048576, 512K, 64M or "
     "2G, but got '18446744073709551616' (too large)"},
    {"number overflows with its suffix", "limit 17179869184G\n",
     "t.oclvm:1:7: error: Expected a memory limit to be a byte count such as 1048576, 512K, 64M "
     "or 2G, but got '17179869184G' (too large)"},
    {"offset overflows", "alloc b = opencl:0 8\nfill b[99999999999999999999] 1 0x00\nrun\n",
     "t.oclvm:2:8: error: Expected an offset in bytes to be a byte count such as 1048576, 512K, "
     "64M or 2G, but got '99999999999999999999' (too large)"},
    {"statistic value past int64", "run\nexpect allocated opencl:0 = 9223372036854775808\n",
     "t.oclvm:2:29: error: Expected a statistic value of at most 2^63-1 (statistics are int64_t), "
     "but got '9223372036854775808'"},
    {"user stream number overflows", "stream s = opencl:0 user 4294967296\n",
     "t.oclvm:1:26: error: Expected a user stream number as a whole number from 0 to 1000000, but "
     "got '4294967296' (too large)"},
    {"negative number", "alloc b = opencl:0 -16\nrun\n",
     "t.oclvm:1:20: error: Expected a blob size to be a byte count such as 1048576, 512K, 64M or "
     "2G, but got '-16' (no digits)"},
    {"unknown suffix", "alloc b = opencl:0 16Q\nrun\n",
     "t.oclvm:1:20: error: Expected a blob size to be a byte count such as 1048576, 512K, 64M or "
     "2G, but got '16Q' (unknown suffix)"},
    {"require 0 devices", "require devices 0\n",
     "t.oclvm:1:17: error: Expected a number of OpenCL devices greater than 0, but got '0'"},
    {"require what", "require memory 2\n",
     "t.oclvm:1:9: error: Expected 'devices', but got 'memory'"},
    {"duplicate blob", "alloc b = opencl:0 8\nalloc b = opencl:0 8\nrun\n",
     "t.oclvm:2:7: error: Expected a new name, but 'b' is already a blob (declared at line 1)"},
    {"duplicate across kinds", "stream x = opencl:0 h2d\nhost x 8\n",
     "t.oclvm:2:6: error: Expected a new name, but 'x' is already a stream (declared at line 1)"},
    {"reserved name", "host cpu 8\n",
     "t.oclvm:1:6: error: Expected a host buffer name, but got the reserved word 'cpu'"},
    {"name that is not an identifier", "host 9lives 8\n",
     "t.oclvm:1:6: error: Expected a host buffer name (a letter or _ followed by letters, digits "
     "or _), but got '9lives'"},
    {"duplicate option", "limit 1M\nlimit 2M\n",
     "t.oclvm:2:1: error: Expected one `limit` line, but got a second one (the first is at line 1)"},
    {"option after a statement", "host h 8\nallocator system\n",
     "t.oclvm:2:1: error: Expected `allocator` among the options before the first statement "
     "(line 1), but got it after"},
    {"unknown allocator", "allocator bfc\n",
     "t.oclvm:1:11: error: Expected an allocator (caching, buddy or system), but got 'bfc'"},
    {"caller_runs value", "caller_runs maybe\n",
     "t.oclvm:1:13: error: Expected on or off, but got 'maybe'"},
    {"expect error first", "expect error out_of_memory\n",
     "t.oclvm:1:1: error: Expected `expect error` right after a `run`, but no statement comes "
     "before it"},
    {"expect error after another statement", "run\nbarrier opencl:0\nexpect error error\nrun\n",
     "t.oclvm:3:1: error: Expected `expect error` right after a `run`, but it follows line 2, "
     "which is not a `run`"},
    {"expect error twice", "run\nexpect error error\nexpect error error\n",
     "t.oclvm:3:1: error: Expected `expect error` right after a `run`, but it follows another "
     "`expect error` (line 2); one per run"},
    {"expect error kind", "run\nexpect error oom\n",
     "t.oclvm:2:14: error: Expected an error kind (out_of_memory, invalid_argument, backend or "
     "error), but got 'oom'"},
    {"expect error text without quotes", "run\nexpect error error Out\n",
     "t.oclvm:2:20: error: Expected a message substring in double quotes, but got 'Out'"},
    {"unterminated string", "run\nexpect error error \"Out of\n",
     "t.oclvm:2:20: error: Expected a closing \" for this string, but the line ends"},
    {"bad escape", "run\nexpect error error \"a\\tb\"\n",
     "t.oclvm:2:22: error: Expected \\\" or \\\\ after a backslash in a string, but got '\\t'"},
    {"expectation before run", "alloc b = opencl:0 8\nexpect allocated opencl:0 = 8\nrun\n",
     "t.oclvm:2:1: error: Expected a `run` before this expectation, but the instructions from "
     "line 1 on have not been run"},
    {"instructions after the last run", "run\nalloc b = opencl:0 8\nbarrier opencl:0\n",
     "t.oclvm:2:1: error: Expected a `run` after this instruction, but the script ends before one"},
    {"unknown statistic", "run\nexpect allocated_bytez opencl:0 = 1\n",
     "t.oclvm:2:8: error: Expected error, bytes, fill, barriers or a statistic (allocated, "
     "reserved, requested, active, peak_allocated, peak_reserved, allocations, segments, "
     "num_allocs, num_frees, num_ooms, num_alloc_retries, num_device_alloc, num_device_free, ... or "
     "ARRAY.POOL.FIELD such as reserved_bytes.all.peak), but got 'allocated_bytez'"},
    {"missing comparison", "run\nexpect allocated opencl:0 16\n",
     "t.oclvm:2:27: error: Expected a comparison (=, !=, <, <=, >, >=), but got '16'"},
    {"bad byte", "alloc b = opencl:0 8\nwrite b = ab cd e\nrun\n",
     "t.oclvm:2:17: error: Expected a byte as two hex digits (such as 0f or ab, or ab*16 for 16 of "
     "them), but got 'e'"},
    {"no bytes", "alloc b = opencl:0 8\nwrite b =\nrun\n",
     "t.oclvm:2:10: error: Expected the bytes to write, but the line ends after 'write b ='"},
    {"bad pattern width", "alloc b = opencl:0 8\nfill b 8 0xabc\nrun\n",
     "t.oclvm:2:10: error: Expected a fill pattern of 0x and 2, 4, 8 or 16 hex digits (a 1, 2, 4 "
     "or 8-byte pattern), but got '0xabc'"},
    {"pattern without 0x", "alloc b = opencl:0 8\nfill b 8 ab\nrun\n",
     "t.oclvm:2:10: error: Expected a fill pattern of 0x and 2, 4, 8 or 16 hex digits (a 1, 2, 4 "
     "or 8-byte pattern), but got 'ab'"},
    {"copy past a host buffer (mismatched sizes)",
     "host h 8\nalloc b = opencl:0 16\ncopy b -> h 16\nrun\n",
     "t.oclvm:3:13: error: Expected h[0..16) to lie within host buffer h (8 bytes, line 1), but "
     "it ends at 16"},
    {"expect bytes past a host buffer", "host h 2\nrun\nexpect bytes h[1] = 00 00\n",
     "t.oclvm:3:14: error: Expected h[1..3) to lie within host buffer h (2 bytes, line 1), but it "
     "ends at 3"},
    {"host range that wraps around",
     "host h 8\nalloc b = opencl:0 8\ncopy b -> h[18446744073709551615] 2\nrun\n",
     "t.oclvm:3:35: error: Expected h[18446744073709551615..past 2^64) to lie within host buffer h "
     "(8 bytes, line 1), but it ends at past 2^64"},
    {"host buffer too large", "host h 1G\n",
     "t.oclvm:1:8: error: Expected a host buffer of at most 268435456 bytes, but got 1073741824"},
    {"host buffers too large together",
     "host a 256M\nhost b 256M\nhost c 256M\nhost d 256M\nhost e 1\n",
     "t.oclvm:5:8: error: Expected at most 1073741824 bytes of host buffers in one script, but got "
     "more"},
    {"inline bytes too many together",
     "host a = 00*64M\nhost b = 00*64M\nhost c = 00*64M\nhost d = 00*64M\nhost e = 00\n",
     "t.oclvm:5:10: error: Expected at most 268435456 inline bytes in one script, but got more"},
    {"access mode", "alloc b = opencl:0 8\naccess peek b 8\nrun\n",
     "t.oclvm:2:8: error: Expected read or write, but got 'peek'"},
    {"reset kind", "reset_stats opencl:0 all\nrun\n",
     "t.oclvm:1:22: error: Expected peak or accumulated, but got 'all'"},
    {"extra operand", "alloc b = opencl:0 16 32\nrun\n",
     "t.oclvm:1:23: error: Expected the end of the line after 'alloc b = opencl:0 16', but got '32'"},
    {"extra operand after run", "run now\n",
     "t.oclvm:1:5: error: Expected the end of the line after 'run', but got 'now'"},
    {"release with an offset", "alloc b = opencl:0 16\nrelease b[4]\nrun\n",
     "t.oclvm:2:1: error: Expected a blob name without an offset after release"},
    {"typed shape without ']'", "alloc t = opencl:0 f32[2,3\nrun\n",
     "t.oclvm:1:27: error: Expected ',' or ']', but the line ends after 'alloc t = opencl:0 "
     "f32[2,3'"},
    {"soft_sync without arrow", "soft_sync opencl:0 cpu\nrun\n",
     "t.oclvm:1:20: error: Expected '->' after the first stream, but got 'cpu'"},
    {"lone '!'", "run\nexpect barriers ! 1\n",
     "t.oclvm:2:17: error: Expected != or a word, but got '!'"},
    {"event name missing", "event\n",
     "t.oclvm:1:6: error: Expected an event name, but the line ends after 'event'"},
    {"event name taken", "host e 8\nevent e\n",
     "t.oclvm:2:7: error: Expected a new name, but 'e' is already a host buffer (declared at line "
     "1)"},
    {"event as a stream", "event e\nbarrier e\nrun\n",
     "t.oclvm:2:9: error: Expected a stream, but 'e' is an event (declared at line 1)"},
    {"record_event of an undeclared event", "record_event e on opencl:0\nrun\n",
     "t.oclvm:1:14: error: Expected an event (a name declared by `event`), but got 'e'"},
    {"record_event without on", "event e\nrecord_event e opencl:0\nrun\n",
     "t.oclvm:2:16: error: Expected 'on', but got 'opencl:0'"},
    {"record_event without a stream", "event e\nrecord_event e on\nrun\n",
     "t.oclvm:2:18: error: Expected a stream or device after 'on', but the line ends after "
     "'record_event e on'"},
    {"wait_event of a stream", "stream s = opencl:0 user 1\nwait_event s on opencl:0\nrun\n",
     "t.oclvm:2:12: error: Expected an event, but 's' is a stream (declared at line 1)"},
    {"wait_event on a blob", "event e\nalloc b = opencl:0 8\nwait_event e on b\nrun\n",
     "t.oclvm:3:17: error: Expected a stream, but 'b' is a blob (declared at line 2)"},
    {"record_blob_use of a host buffer", "host h 8\nrecord_blob_use h on opencl:0\nrun\n",
     "t.oclvm:2:17: error: Expected a blob whose use to record, but got 'h' (a host buffer, "
     "declared at line 1)"},
    {"record_blob_use with an offset", "alloc b = opencl:0 16\nrecord_blob_use b[4] on cpu\nrun\n",
     "t.oclvm:2:1: error: Expected a blob name without an offset after record_blob_use"},
    {"record_blob_use without on", "alloc b = opencl:0 16\nrecord_blob_use b\nrun\n",
     "t.oclvm:2:18: error: Expected 'on', but the line ends after 'record_blob_use b'"},
    {"set_memory_limit without bytes", "set_memory_limit opencl:0\nrun\n",
     "t.oclvm:1:26: error: Expected a memory limit in bytes (0: none), but the line ends after "
     "'set_memory_limit opencl:0'"},
    {"set_memory_limit of a stream", "stream s = opencl:0 user 1\nset_memory_limit s 1M\nrun\n",
     "t.oclvm:2:18: error: Expected a device (opencl:N or cpu), but got 's'"},
    {"set_memory_limit overflows", "set_memory_limit cpu 17179869184G\nrun\n",
     "t.oclvm:1:22: error: Expected a memory limit in bytes (0: none) to be a byte count such as "
     "1048576, 512K, 64M or 2G, but got '17179869184G' (too large)"},
    {"set_memory_limit after the last run", "run\nset_memory_limit cpu 1M\n",
     "t.oclvm:2:1: error: Expected a `run` after this instruction, but the script ends before one"},
};

TEST(ScriptParse, MalformedScriptsGiveTheirExactMessage) {
  for (const Malformed& m : kMalformed) {
    SCOPED_TRACE(m.name);
    EXPECT_EQ(parse_error(m.text), m.error);
  }
}

TEST(ScriptParse, ScriptErrorCarriesItsLocation) {
  try {
    parse("run\n\n  frob\n");
    FAIL() << "parsed";
  } catch (const ScriptError& e) {
    EXPECT_EQ(e.file(), "t.oclvm");
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.column(), 3);
    EXPECT_EQ(e.message().rfind("Expected a statement", 0), 0u) << e.message();
    EXPECT_TRUE(dynamic_cast<const InvalidArgument*>(&e) != nullptr);
  }
}

TEST(ScriptParse, LoadScriptReadsAFileAndReportsAMissingOne) {
  const std::string path = ::testing::TempDir() + "oclvm_script_test.oclvm";
  {
    std::ofstream out(path);
    out << "alloc b = opencl:0 16\nrun\nrelease b\nrun\n";
  }
  Script script = load_script(path, ParseOptions{1});
  EXPECT_EQ(script.file, path);
  EXPECT_EQ(script.statements.size(), 4u);
  std::remove(path.c_str());
  try {
    load_script(path, ParseOptions{1});
    FAIL() << "loaded a missing file";
  } catch (const ScriptError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": error: Expected a readable script file, but opening "
                                            "it failed (No such file or directory)");
    EXPECT_EQ(e.line(), 0);
  }
}

}  // namespace
}  // namespace oclvm::script
