// tests/cli/plot_test.cc — svg_line_chart (adapters/cli/plot.h) and the series a replay records
// for it, checked by parsing the SVG: well-formed XML with one root <svg>, one polyline per
// series with its points inside the drawing area, the legend, axis titles and tick labels.
#include "adapters/cli/plot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "adapters/cli/replay.h"
#include "adapters/cli/trace.h"
#include "oclvm/storage/caching_allocator.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"

namespace oclvm::cli {
namespace {

struct Element {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::string text;  // the character data right after the start tag
};

// A small XML reader for what svg_line_chart writes: elements, double-quoted attributes, text.
// Fails the test (and returns what it read so far) on anything not well formed.
std::vector<Element> parse_xml(const std::string& xml) {
  std::vector<Element> elements;
  std::vector<std::string> open;
  size_t at = 0;
  while ((at = xml.find('<', at)) != std::string::npos) {
    const size_t end = xml.find('>', at);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated tag at " << at;
      break;
    }
    std::string tag = xml.substr(at + 1, end - at - 1);
    at = end + 1;
    if (tag.starts_with("?")) continue;  // the XML declaration
    if (tag.starts_with("/")) {
      if (open.empty() || open.back() != tag.substr(1)) {
        ADD_FAILURE() << "closing </" << tag.substr(1) << "> does not match <"
                      << (open.empty() ? "" : open.back()) << ">";
        break;
      }
      open.pop_back();
      continue;
    }
    const bool self_closing = tag.ends_with("/");
    if (self_closing) tag.pop_back();
    Element element;
    size_t i = tag.find_first_of(" \n");
    element.name = tag.substr(0, i);
    while (i != std::string::npos && i < tag.size()) {
      const size_t key_start = tag.find_first_not_of(" \n", i);
      if (key_start == std::string::npos) break;
      const size_t equals = tag.find("=\"", key_start);
      const size_t close = equals == std::string::npos ? equals : tag.find('"', equals + 2);
      if (close == std::string::npos) {
        ADD_FAILURE() << "malformed attribute in <" << tag << ">";
        break;
      }
      element.attributes[tag.substr(key_start, equals - key_start)] =
          tag.substr(equals + 2, close - equals - 2);
      i = close + 1;
    }
    const size_t next = xml.find('<', at);
    element.text = xml.substr(at, next == std::string::npos ? 0 : next - at);
    EXPECT_EQ(element.text.find('&') == std::string::npos ||
                  element.text.find(';') != std::string::npos,
              true)
        << "a bare & in text: " << element.text;
    if (elements.empty()) {
      EXPECT_EQ(element.name, "svg") << "the root element";
    }
    if (!self_closing) open.push_back(element.name);
    elements.push_back(std::move(element));
  }
  EXPECT_TRUE(open.empty()) << "unclosed <" << (open.empty() ? "" : open.back()) << ">";
  return elements;
}

std::vector<const Element*> named(const std::vector<Element>& elements, const std::string& name) {
  std::vector<const Element*> out;
  for (const Element& e : elements) {
    if (e.name == name) out.push_back(&e);
  }
  return out;
}

// The (x, y) pairs of a polyline's points attribute.
std::vector<std::pair<double, double>> points_of(const Element& polyline) {
  std::vector<std::pair<double, double>> points;
  const std::string& text = polyline.attributes.at("points");
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = text.find(',', at);
    const size_t space = text.find(' ', comma);
    if (comma == std::string::npos) break;
    points.emplace_back(std::stod(text.substr(at, comma - at)),
                        std::stod(text.substr(comma + 1, space - comma - 1)));
    at = space == std::string::npos ? text.size() : space + 1;
  }
  return points;
}

bool has_text(const std::vector<Element>& elements, const std::string& text) {
  for (const Element& e : elements) {
    if (e.name == "text" && e.text == text) return true;
  }
  return false;
}

TEST(PlotTest, TwoSeriesMakeAWellFormedChartWithLegendAxesAndTicks) {
  PlotSpec spec;
  spec.title = "a <replay> & more";
  spec.series.push_back(PlotSeries{"live", "#000000", false, {0, 1 << 20, 3 << 20, 1 << 20}});
  spec.series.push_back(PlotSeries{"reserved: caching", "#1f77b4", true,
                                   {0, 2 << 20, 4 << 20, 4 << 20}});
  const std::vector<Element> svg = parse_xml(svg_line_chart(spec));
  ASSERT_FALSE(svg.empty());
  EXPECT_EQ(svg[0].attributes.at("xmlns"), "http://www.w3.org/2000/svg");
  for (const Element& e : svg) {
    EXPECT_EQ(e.attributes.count("href"), 0u) << "no external reference";
    EXPECT_NE(e.name, "script");
  }
  const auto lines = named(svg, "polyline");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]->attributes.at("data-name"), "live");
  EXPECT_EQ(lines[1]->attributes.at("stroke-dasharray"), "6 4");
  // Every point inside the drawing area; the peak (4 MiB, the top tick) at the top of it.
  double top = 1e9;
  for (const Element* line : lines) {
    const auto points = points_of(*line);
    EXPECT_EQ(points.size(), 4u);
    for (const auto& [x, y] : points) {
      EXPECT_GE(x, 90.0);
      EXPECT_LE(x, 960.0 - 24.0);
      EXPECT_GE(y, 48.0);
      EXPECT_LE(y, 540.0 - 64.0);
      top = std::min(top, y);
    }
  }
  EXPECT_DOUBLE_EQ(top, 48.0);
  EXPECT_TRUE(has_text(svg, "a &lt;replay&gt; &amp; more")) << "the title, escaped";
  EXPECT_TRUE(has_text(svg, "live"));
  EXPECT_TRUE(has_text(svg, "reserved: caching"));
  EXPECT_TRUE(has_text(svg, "event"));
  EXPECT_TRUE(has_text(svg, "bytes (MiB)"));
  EXPECT_TRUE(has_text(svg, "4")) << "a tick at the 4 MiB peak";
  EXPECT_TRUE(has_text(svg, "0"));
}

TEST(PlotTest, LongSeriesAreReducedKeepingEveryPeak) {
  std::vector<uint64_t> values(100000, 1024);
  values[54321] = 8 << 20;  // one spike among 100000 events, on the top tick (8 MiB)
  PlotSpec spec;
  spec.series.push_back(PlotSeries{"spiky", "#d62728", false, values});
  const std::vector<Element> svg = parse_xml(svg_line_chart(spec));
  const auto lines = named(svg, "polyline");
  ASSERT_EQ(lines.size(), 1u);
  const auto points = points_of(*lines[0]);
  EXPECT_LE(points.size(), kMaxPlotPoints);
  double top = 1e9;
  for (const auto& [x, y] : points) top = std::min(top, y);
  EXPECT_DOUBLE_EQ(top, 48.0) << "the spike is the top of the picture";
}

TEST(PlotTest, NothingToDrawIsAnError) {
  EXPECT_THROW(svg_line_chart(PlotSpec{}), InvalidArgument);
  PlotSpec empty;
  empty.series.push_back(PlotSeries{"none", "#000000", false, {}});
  EXPECT_THROW(svg_line_chart(empty), InvalidArgument);
}

TEST(PlotTest, AReplayRecordsLiveAndReservedBytesAfterEveryEvent) {
  const Trace trace = parse_trace(
      "# oclvm-trace v1\na 1 1000\na 2 3000000\nf 1\na 3 500\nf 2\nf 3\n", "inline.trace");
  CachingAllocator allocator(DeviceManager::instance().backend(Device{DeviceType::kOpenCL, 0}));
  ReplayOptions options;
  options.record_series = true;
  options.repeat = 2;
  const ReplayReport report = replay(trace, allocator, options);
  const std::vector<uint64_t> live = {1000, 3001000, 3000000, 3000500, 500, 0};
  std::vector<uint64_t> both = live;
  both.insert(both.end(), live.begin(), live.end());
  EXPECT_EQ(report.live_series, both);
  ASSERT_EQ(report.reserved_series.size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_GE(report.reserved_series[i], report.live_series[i]) << i;
  }
  EXPECT_EQ(*std::max_element(report.reserved_series.begin(), report.reserved_series.end()),
            report.reserved_peak_bytes);
  // The segment map at the reserved peak: the first event that reached it, and what was held.
  const auto first_peak = std::find(report.reserved_series.begin(), report.reserved_series.end(),
                                    report.reserved_peak_bytes);
  EXPECT_EQ(report.peak_event,
            static_cast<uint64_t>(first_peak - report.reserved_series.begin()));
  uint64_t reserved = 0, allocated = 0;
  for (const SegmentSnapshot& segment : report.peak_segments) {
    reserved += segment.size;
    for (const BlockSnapshot& block : segment.blocks) allocated += block.allocated ? block.size : 0;
  }
  EXPECT_EQ(reserved, report.reserved_peak_bytes);
  EXPECT_GE(allocated, report.live_series[report.peak_event]);
  const ReplayReport plain = replay(trace, allocator, {});
  EXPECT_TRUE(plain.live_series.empty()) << "recorded only when asked";
  EXPECT_TRUE(plain.peak_segments.empty());
}

// Segments of `count` blocks of `block` bytes, alternating allocated and free.
SegmentSnapshot striped_segment(uintptr_t address, size_t count, size_t block) {
  SegmentSnapshot segment{address, count * block, false, {}};
  for (size_t i = 0; i < count; ++i) {
    segment.blocks.push_back({address + i * block, block, i % 2 == 0 ? block : 0, i % 2 == 0,
                              nullptr});
  }
  return segment;
}

TEST(PlotTest, SegmentMapsShareOneScaleAndSummariseWhatWasHeld) {
  PlotSpec spec;
  spec.series.push_back(PlotSeries{"live", "#000000", false, {0, 4 << 20}});
  // A: two 2 MiB segments, half allocated; B: one 8 MiB segment, a quarter allocated.
  SegmentMapSpec a{"a at event 1", "#1f77b4",
                   {striped_segment(1 << 30, 2, 1 << 20), striped_segment(2u << 30, 2, 1 << 20)}};
  SegmentMapSpec b{"b at event 1", "#d62728", {striped_segment(3u << 30, 4, 2 << 20)}};
  b.segments[0].blocks[2].allocated = false;
  b.segments[0].blocks[2].requested = 0;
  spec.segment_maps = {a, b};
  const std::vector<Element> svg = parse_xml(svg_line_chart(spec));
  ASSERT_FALSE(svg.empty());
  EXPECT_GT(std::stod(svg[0].attributes.at("height")), 540.0) << "the maps are below the chart";
  size_t maps = 0;
  for (const Element& e : svg) maps += e.name == "g" && e.attributes.count("data-name");
  EXPECT_EQ(maps, 2u);
  EXPECT_TRUE(has_text(svg, "a at event 1: 2 segment(s), 4.00 MiB reserved, 2.00 MiB allocated "
                            "(50.0%)"));
  EXPECT_TRUE(has_text(svg, "b at event 1: 1 segment(s), 8.00 MiB reserved, 2.00 MiB allocated "
                            "(25.0%)"));
  EXPECT_TRUE(has_text(svg, "allocated block"));
  // One scale: B's 8 MiB spans the drawing width, A's 4 MiB half of it.
  std::vector<double> outline_widths;
  for (size_t i = 0; i + 1 < svg.size(); ++i) {
    const Element& e = svg[i];
    if (e.name == "rect" && e.attributes.count("class") && e.attributes.at("class") == "segment") {
      outline_widths.push_back(std::stod(e.attributes.at("width")));
      EXPECT_EQ(svg[i + 1].name, "title");
      EXPECT_NE(svg[i + 1].text.find("segment of"), std::string::npos) << "a tooltip";
    }
  }
  ASSERT_EQ(outline_widths.size(), 3u);
  EXPECT_NEAR(outline_widths[0] + outline_widths[1], 423.0, 0.2);
  EXPECT_NEAR(outline_widths[2], 846.0, 0.2);
}

TEST(PlotTest, AFragmentedSegmentMapStaysBoundedInSize) {
  PlotSpec spec;
  spec.series.push_back(PlotSeries{"live", "#000000", false, {0, 1}});
  // 100 000 blocks of 512 bytes, alternating: far thinner than a unit each.
  spec.segment_maps.push_back(
      SegmentMapSpec{"fragmented", "#1f77b4", {striped_segment(1 << 30, 100000, 512)}});
  const std::vector<Element> svg = parse_xml(svg_line_chart(spec));
  EXPECT_LE(named(svg, "rect").size(), 4000u) << "thin runs merge";
}

}  // namespace
}  // namespace oclvm::cli
