// tests/storage/options_test.cc — parse_byte_size, format_bytes and Options::from_environment
// (storage/options.h).
//
// The environment tests set and unset OCLVM_MEMORY_LIMIT, OCLVM_ALLOCATOR and OCLVM_PLATFORM and
// restore their previous values afterwards (the fixture saves them at SetUp), so the rest of the
// suite and the DeviceManager see the environment they started with.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/log.h"
#include "oclvm/storage/options.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// Expects parse_byte_size(text) to throw InvalidArgument naming `what`, the text and `why`.
void expect_rejected(const std::string& text, const std::string& why) {
  try {
    const uint64_t value = parse_byte_size(text, "the test size");
    ADD_FAILURE() << "parse_byte_size accepted '" << text << "' as " << value;
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("Expected the test size to be a byte count"), std::string::npos)
        << message;
    EXPECT_NE(message.find("but got '" + text + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(why), std::string::npos) << message;
  }
}

TEST(ParseByteSizeTest, PlainNumbers) {
  EXPECT_EQ(parse_byte_size("0", "x"), 0u);
  EXPECT_EQ(parse_byte_size("1", "x"), 1u);
  EXPECT_EQ(parse_byte_size("1048576", "x"), 1048576u);
  EXPECT_EQ(parse_byte_size("7B", "x"), 7u);
  EXPECT_EQ(parse_byte_size("18446744073709551615", "x"), UINT64_MAX);
}

TEST(ParseByteSizeTest, SuffixesArePowersOf1024) {
  EXPECT_EQ(parse_byte_size("512K", "x"), 512 * kKiB);
  EXPECT_EQ(parse_byte_size("64M", "x"), 64 * kMiB);
  EXPECT_EQ(parse_byte_size("2G", "x"), 2 * kGiB);
  EXPECT_EQ(parse_byte_size("1KiB", "x"), kKiB);
  EXPECT_EQ(parse_byte_size("3MiB", "x"), 3 * kMiB);
  EXPECT_EQ(parse_byte_size("2GiB", "x"), 2 * kGiB);
  EXPECT_EQ(parse_byte_size("0G", "x"), 0u);
  // The largest count that still fits once shifted.
  EXPECT_EQ(parse_byte_size("17179869183G", "x"), (UINT64_MAX >> 30) << 30);
  EXPECT_EQ(parse_byte_size("17592186044415M", "x"), (UINT64_MAX >> 20) << 20);
}

TEST(ParseByteSizeTest, RejectsOverflow) {
  expect_rejected("99999999999G", "too large");
  expect_rejected("17179869184G", "too large");  // (UINT64_MAX >> 30) + 1
  expect_rejected("18014398509481984K", "too large");
  expect_rejected("18446744073709551616", "too large");  // UINT64_MAX + 1
  expect_rejected("99999999999999999999999", "too large");
}

TEST(ParseByteSizeTest, RejectsMalformedText) {
  expect_rejected("", "no digits");
  expect_rejected("-1", "no digits");
  expect_rejected("K", "no digits");
  expect_rejected(" 12", "no digits");
  expect_rejected("12Q", "unknown suffix");
  expect_rejected("12 K", "unknown suffix");
  expect_rejected("1.5G", "unknown suffix");
  expect_rejected("0x10", "unknown suffix");
  expect_rejected("12KB", "unknown suffix");
  expect_rejected("12GG", "unknown suffix");
}

// Regression: a lone lower-case "k" was accepted while "m" and "g" were not.
TEST(ParseByteSizeTest, SuffixesAreUpperCaseOnly) {
  for (const char* text : {"1k", "1m", "1g"}) {
    EXPECT_THROW(parse_byte_size(text, "X"), InvalidArgument) << text;
  }
}

// Regression: the unit was chosen before rounding, so 1048575 printed as "1024.00 KiB".
TEST(FormatBytesTest, UnitIsChosenAfterRounding) {
  EXPECT_EQ(format_bytes(1048575), "1.00 MiB");
  EXPECT_EQ(format_bytes(1073741823), "1.00 GiB");
  EXPECT_EQ(format_bytes(1023), "1023 B");
}

TEST(FormatBytesTest, BytesBelowOneKiB) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
}

TEST(FormatBytesTest, LargerCountsUseTwoDecimals) {
  EXPECT_EQ(format_bytes(kKiB), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(2 * kMiB), "2.00 MiB");
  EXPECT_EQ(format_bytes(3 * kGiB / 2), "1.50 GiB");
  EXPECT_EQ(format_bytes(1024 * kGiB), "1.00 TiB");
  EXPECT_EQ(format_bytes(2048 * 1024 * kGiB), "2048.00 TiB");  // TiB is the largest unit
}

// Saves the variables at SetUp and restores them (set or unset) at TearDown.
class OptionsEnvironmentTest : public ::testing::Test {
 protected:
  static constexpr const char* kVariables[] = {"OCLVM_MEMORY_LIMIT", "OCLVM_ALLOCATOR",
                                               "OCLVM_PLATFORM", "OCLVM_FAULTS",
                                               "OCLVM_RELEASE", "OCLVM_KERNELS",
                                               "OCLVM_LAUNCH_BLOCKING", "PYTORCH_ALLOC_CONF"};

  void SetUp() override {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      saved_.push_back(value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }

  void TearDown() override {
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (saved_[i]) {
        setenv(kVariables[i], saved_[i]->c_str(), 1);
      } else {
        unsetenv(kVariables[i]);
      }
    }
  }

 private:
  std::vector<std::optional<std::string>> saved_;
};

TEST_F(OptionsEnvironmentTest, DefaultsWhenNothingIsSet) {
  const Options options = Options::from_environment();
  EXPECT_EQ(options.platform, "");
  EXPECT_EQ(options.allocator, "");
  EXPECT_EQ(options.memory_limit, 0u);
  EXPECT_FALSE(options.faults.any());
  EXPECT_EQ(options.pocl_default_devices, "basic");
}

TEST_F(OptionsEnvironmentTest, ReadsFaultRules) {
  setenv("OCLVM_FAULTS", "segment:nth=3,copy:p=0.25,seed=9", 1);
  const Options options = Options::from_environment();
  EXPECT_EQ(options.faults.str(), "segment:nth=3,copy:p=0.25,seed=9");
  setenv("OCLVM_FAULTS", "copy:often", 1);
  try {
    Options::from_environment();
    ADD_FAILURE() << "a malformed OCLVM_FAULTS was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "OCLVM_FAULTS");
  }
}

TEST_F(OptionsEnvironmentTest, ReadsTheReleaseMode) {
  EXPECT_EQ(Options::from_environment().release, ReleaseMode::kStreamOrdered);
  setenv("OCLVM_RELEASE", "finish", 1);
  EXPECT_EQ(Options::from_environment().release, ReleaseMode::kFinish);
  setenv("OCLVM_RELEASE", "stream", 1);
  EXPECT_EQ(Options::from_environment().release, ReleaseMode::kStreamOrdered);
  setenv("OCLVM_RELEASE", "later", 1);
  try {
    Options::from_environment();
    ADD_FAILURE() << "OCLVM_RELEASE=later was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "'stream' or 'finish'");
  }
}

TEST_F(OptionsEnvironmentTest, ReadsTheKernelPath) {
  EXPECT_EQ(Options::from_environment().kernels, KernelPath::kAuto);
  setenv("OCLVM_KERNELS", "native", 1);
  EXPECT_EQ(Options::from_environment().kernels, KernelPath::kNative);
  setenv("OCLVM_KERNELS", "host", 1);
  EXPECT_EQ(Options::from_environment().kernels, KernelPath::kHost);
  setenv("OCLVM_KERNELS", "gpu", 1);
  try {
    Options::from_environment();
    ADD_FAILURE() << "OCLVM_KERNELS=gpu was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "'native' or 'host', but got 'gpu'");
  }
}

TEST_F(OptionsEnvironmentTest, ReadsLaunchBlocking) {
  EXPECT_FALSE(Options::from_environment().launch_blocking);
  setenv("OCLVM_LAUNCH_BLOCKING", "1", 1);
  EXPECT_TRUE(Options::from_environment().launch_blocking);
  setenv("OCLVM_LAUNCH_BLOCKING", "0", 1);
  EXPECT_FALSE(Options::from_environment().launch_blocking);
  setenv("OCLVM_LAUNCH_BLOCKING", "yes", 1);
  try {
    Options::from_environment();
    ADD_FAILURE() << "OCLVM_LAUNCH_BLOCKING=yes was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "'1' or '0', but got 'yes'");
  }
}

// Which path each device takes: PoCL's devices are CPU devices, so the host path unless forced.
TEST_F(OptionsEnvironmentTest, EachDeviceTakesItsKernelPath) {
  const Device host_device{DeviceType::kCpu, 0};
  Options options;
  options.kernels = KernelPath::kAuto;
  DeviceManager automatic(options);
  if (automatic.opencl_device_count() == 0) GTEST_SKIP() << automatic.why_no_device();
  const Device opencl0{DeviceType::kOpenCL, 0};
  EXPECT_EQ(automatic.native_kernels(opencl0),
            !automatic.backend(opencl0).properties().cpu_device);
  EXPECT_FALSE(automatic.native_kernels(host_device));
  EXPECT_TRUE(automatic.backend(host_device).properties().cpu_device);
  options.kernels = KernelPath::kNative;
  DeviceManager native(options);
  EXPECT_TRUE(native.native_kernels(opencl0));
  EXPECT_FALSE(native.native_kernels(host_device));  // the host device has no kernels
  options.kernels = KernelPath::kHost;
  DeviceManager host(options);
  EXPECT_FALSE(host.native_kernels(opencl0));
  EXPECT_THROW(host.native_kernels(Device{DeviceType::kOpenCL, 99}), InvalidArgument);
}

TEST_F(OptionsEnvironmentTest, ReadsEveryVariable) {
  setenv("OCLVM_MEMORY_LIMIT", "64M", 1);
  setenv("OCLVM_ALLOCATOR", "buddy", 1);
  setenv("OCLVM_PLATFORM", "Portable", 1);
  const Options options = Options::from_environment();
  EXPECT_EQ(options.memory_limit, 64 * kMiB);
  EXPECT_EQ(options.allocator, "buddy");
  EXPECT_EQ(options.platform, "Portable");
  EXPECT_EQ(options.pocl_default_devices, "basic");
}

TEST_F(OptionsEnvironmentTest, PlainByteLimit) {
  setenv("OCLVM_MEMORY_LIMIT", "1048576", 1);
  EXPECT_EQ(Options::from_environment().memory_limit, kMiB);
}

TEST_F(OptionsEnvironmentTest, MalformedLimitNamesTheVariable) {
  for (const char* text : {"12Q", "99999999999G", "-1"}) {
    setenv("OCLVM_MEMORY_LIMIT", text, 1);
    try {
      Options::from_environment();
      ADD_FAILURE() << "OCLVM_MEMORY_LIMIT=" << text << " was accepted";
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("Expected OCLVM_MEMORY_LIMIT to be a byte count"), std::string::npos)
          << message;
      EXPECT_NE(message.find(std::string("'") + text + "'"), std::string::npos) << message;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// PYTORCH_ALLOC_CONF (AllocConf::parse).

// Expects AllocConf::parse(text) to throw InvalidArgument naming the variable, the pair and `why`.
void expect_conf_rejected(const std::string& text, const std::string& pair, const std::string& why) {
  try {
    AllocConf::parse(text, "PYTORCH_ALLOC_CONF");
    ADD_FAILURE() << "'" << text << "' was accepted";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("Expected PYTORCH_ALLOC_CONF"), std::string::npos) << message;
    EXPECT_NE(message.find("max_split_size_mb, roundup_power2_divisions and "
                           "garbage_collection_threshold"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("'" + pair + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(why), std::string::npos) << message;
  }
}

TEST(AllocConfTest, ReadsEveryKeyTheCachingAllocatorHas) {
  const AllocConf conf = AllocConf::parse(
      " max_split_size_mb:64 , roundup_power2_divisions:4,garbage_collection_threshold:0.75",
      "PYTORCH_ALLOC_CONF");
  EXPECT_EQ(conf.max_split_bytes, 64 * kMiB);
  EXPECT_EQ(conf.roundup_power2_divisions, 4u);
  EXPECT_DOUBLE_EQ(conf.garbage_collection_threshold, 0.75);
  const AllocConf none = AllocConf::parse("", "PYTORCH_ALLOC_CONF");
  EXPECT_EQ(none.max_split_bytes, 0u);
  EXPECT_EQ(none.roundup_power2_divisions, 0u);
  EXPECT_EQ(none.garbage_collection_threshold, 0.0);
}

TEST(AllocConfTest, RejectsUnknownKeysAndBadValuesNamingThePair) {
  expect_conf_rejected("max_split_size_mb:64,max_split_mb:3", "max_split_mb:3",
                       "unknown key 'max_split_mb'");
  expect_conf_rejected("max_split_size_mb", "max_split_size_mb", "no ':'");
  expect_conf_rejected("max_split_size_mb:20", "max_split_size_mb:20", "more than 20");
  expect_conf_rejected("max_split_size_mb:1.5", "max_split_size_mb:1.5", "whole number");
  expect_conf_rejected("max_split_size_mb:-64", "max_split_size_mb:-64", "whole number");
  expect_conf_rejected("roundup_power2_divisions:3", "roundup_power2_divisions:3", "power of two");
  expect_conf_rejected("roundup_power2_divisions:0", "roundup_power2_divisions:0", "power of two");
  expect_conf_rejected("roundup_power2_divisions:[256:1,512:2,>:4]",
                       "roundup_power2_divisions:[256:1,512:2,>:4]", "per-size list form");
  expect_conf_rejected("garbage_collection_threshold:1", "garbage_collection_threshold:1",
                       "between 0 and 1");
  expect_conf_rejected("garbage_collection_threshold:0", "garbage_collection_threshold:0",
                       "between 0 and 1");
  expect_conf_rejected("garbage_collection_threshold:x", "garbage_collection_threshold:x",
                       "not a number");
}

struct CapturedLog {
  std::vector<std::string> lines;
  static void handle(LogLevel, const char* message, void* context) {
    static_cast<CapturedLog*>(context)->lines.emplace_back(message);
  }
};

TEST(AllocConfTest, CudaOnlyKeysAreAcceptedUnusedWithOneWarning) {
  CapturedLog log;
  set_log_handler(&CapturedLog::handle, &log);
  const AllocConf conf = AllocConf::parse(
      "expandable_segments:True,max_split_size_mb:128,pinned_use_cuda_host_register:True",
      "PYTORCH_ALLOC_CONF");
  set_log_handler(nullptr);
  EXPECT_EQ(conf.max_split_bytes, 128 * kMiB);
  ASSERT_EQ(log.lines.size(), 1u);
  EXPECT_NE(log.lines[0].find("expandable_segments, pinned_use_cuda_host_register"),
            std::string::npos)
      << log.lines[0];
  EXPECT_NE(log.lines[0].find("oclvm ignores them"), std::string::npos) << log.lines[0];
}

TEST_F(OptionsEnvironmentTest, ReadsPytorchAllocConf) {
  setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:256,roundup_power2_divisions:2", 1);
  const Options options = Options::from_environment();
  EXPECT_EQ(options.alloc_conf.max_split_bytes, 256 * kMiB);
  EXPECT_EQ(options.alloc_conf.roundup_power2_divisions, 2u);
  setenv("PYTORCH_ALLOC_CONF", "no_such_key:1", 1);
  EXPECT_THROW(Options::from_environment(), InvalidArgument);
}

}  // namespace
}  // namespace oclvm
