// tests/storage/device_test.cc — Device printing and parse_device (storage/device.h).
//
// Covers every accepted spelling of a device name, the round trip str() -> parse_device, and every
// malformed form we know of (unknown kinds, a missing or signed index, trailing text, an index that
// overflows DeviceIndex, a cpu index other than 0). Parsing needs no device, so no fixture.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "oclvm/storage/device.h"
#include "oclvm/storage/errors.h"

namespace oclvm {
namespace {

TEST(DeviceTest, StrNamesTypeAndIndex) {
  EXPECT_EQ((Device{DeviceType::kOpenCL, 0}).str(), "opencl:0");
  EXPECT_EQ((Device{DeviceType::kOpenCL, 1}).str(), "opencl:1");
  EXPECT_EQ((Device{DeviceType::kOpenCL, 32767}).str(), "opencl:32767");
  EXPECT_EQ((Device{DeviceType::kCpu, 0}).str(), "cpu");
  EXPECT_EQ((Device{DeviceType::kCpu, 1}).str(), "cpu:1") << "a cpu that does not exist keeps its index";
  EXPECT_EQ(Device{}.str(), "opencl:0");  // the default device
}

TEST(DeviceTest, EqualityComparesTypeAndIndex) {
  EXPECT_EQ((Device{DeviceType::kOpenCL, 2}), (Device{DeviceType::kOpenCL, 2}));
  EXPECT_NE((Device{DeviceType::kOpenCL, 0}), (Device{DeviceType::kOpenCL, 1}));
  EXPECT_NE((Device{DeviceType::kOpenCL, 0}), (Device{DeviceType::kCpu, 0}));
  std::hash<Device> hash;
  EXPECT_EQ(hash(Device{DeviceType::kOpenCL, 3}), hash(Device{DeviceType::kOpenCL, 3}));
  EXPECT_NE(hash(Device{DeviceType::kOpenCL, 0}), hash(Device{DeviceType::kCpu, 0}));
}

TEST(DeviceTest, ParsesAcceptedForms) {
  EXPECT_EQ(parse_device("opencl"), (Device{DeviceType::kOpenCL, 0}));
  EXPECT_EQ(parse_device("opencl:0"), (Device{DeviceType::kOpenCL, 0}));
  EXPECT_EQ(parse_device("opencl:1"), (Device{DeviceType::kOpenCL, 1}));
  EXPECT_EQ(parse_device("opencl:15"), (Device{DeviceType::kOpenCL, 15}));
  EXPECT_EQ(parse_device("opencl:32767"), (Device{DeviceType::kOpenCL, 32767}));  // INT16_MAX
  EXPECT_EQ(parse_device("cpu"), (Device{DeviceType::kCpu, 0}));
  EXPECT_EQ(parse_device("cpu:0"), (Device{DeviceType::kCpu, 0}));
}

TEST(DeviceTest, StrRoundTripsThroughParse) {
  for (Device d : {Device{DeviceType::kOpenCL, 0}, Device{DeviceType::kOpenCL, 7},
                   Device{DeviceType::kOpenCL, 32767}, Device{DeviceType::kCpu, 0}}) {
    EXPECT_EQ(parse_device(d.str()), d) << d.str();
  }
}

TEST(DeviceTest, RejectsEveryMalformedForm) {
  const std::vector<std::string> malformed = {
      "",               // nothing
      "gpu",            // unknown kind
      "cuda:0",         // unknown kind with an index
      "OpenCL:0",       // kinds are lower case
      "opencl:",        // colon without an index
      "cpu:",           // colon without an index
      ":0",             // index without a kind
      "opencl:-1",      // negative index
      "opencl:+1",      // signed index
      "opencl:99999",   // overflows DeviceIndex (int16_t)
      "opencl:32768",   // INT16_MAX + 1
      "opencl:1x",      // trailing text
      "opencl:0:1",     // two colons
      "opencl: 1",      // space before the index
      " opencl",        // leading space
      "opencl ",        // trailing space
      "opencl:0x1",     // hexadecimal
      "cpu:1",          // the host device has only index 0
      "cpu:-1",         // negative host index
  };
  for (const std::string& text : malformed) {
    try {
      parse_device(text);
      ADD_FAILURE() << "parse_device accepted '" << text << "'";
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("Expected a device of the form opencl, opencl:N or cpu"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("but got '" + text + "'"), std::string::npos) << message;
    }
  }
}

// Regression: from_chars into a signed index accepted "-0", and leading zeros passed too.
TEST(DeviceTest, RejectsSignedAndZeroPaddedIndices) {
  for (const char* text : {"opencl:-0", "cpu:-0", "opencl:007", "cpu:00", "opencl:+0"}) {
    EXPECT_THROW(parse_device(text), InvalidArgument) << text;
  }
  EXPECT_EQ(parse_device("opencl:0"), (Device{DeviceType::kOpenCL, 0}));
  EXPECT_EQ(parse_device("opencl:10"), (Device{DeviceType::kOpenCL, 10}));
}

}  // namespace
}  // namespace oclvm
