// adapters/cli/plot.cc — svg_line_chart: axes with round ticks, one polyline per series, a legend.
#include "adapters/cli/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/options.h"

namespace oclvm::cli {
namespace {

// The drawing area inside the picture, in SVG user units.
constexpr double kWidth = 960, kHeight = 540;
constexpr double kLeft = 90, kRight = 24, kTop = 48, kBottom = 64;
constexpr double kPlotWidth = kWidth - kLeft - kRight;
constexpr double kPlotHeight = kHeight - kTop - kBottom;

std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", value);
  return buffer;
}

// A tick step of 1, 2 or 5 times a power of ten that gives about `target` intervals over `span`.
double nice_step(double span, int target) {
  const double raw = span / target;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= factor * power) return factor * power;
  }
  return 10.0 * power;
}

struct ByteUnit {
  double scale;
  const char* name;
};

ByteUnit unit_for(uint64_t max_bytes) {
  if (max_bytes >= (uint64_t{1} << 30)) return {double(uint64_t{1} << 30), "GiB"};
  if (max_bytes >= (uint64_t{1} << 20)) return {double(uint64_t{1} << 20), "MiB"};
  if (max_bytes >= (uint64_t{1} << 10)) return {double(uint64_t{1} << 10), "KiB"};
  return {1.0, "B"};
}

std::string tick_label(double value) {
  char buffer[32];
  if (value == std::floor(value)) {
    std::snprintf(buffer, sizeof buffer, "%.0f", value);
  } else {
    std::snprintf(buffer, sizeof buffer, "%g", value);
  }
  return buffer;
}

// (x index, value) pairs of at most kMaxPlotPoints, each bucket represented by its maximum.
std::vector<std::pair<size_t, uint64_t>> reduced(const std::vector<uint64_t>& values) {
  std::vector<std::pair<size_t, uint64_t>> points;
  const size_t bucket = (values.size() + kMaxPlotPoints - 1) / kMaxPlotPoints;
  for (size_t begin = 0; begin < values.size(); begin += std::max<size_t>(bucket, 1)) {
    const size_t end = std::min(values.size(), begin + std::max<size_t>(bucket, 1));
    const auto top = std::max_element(values.begin() + static_cast<std::ptrdiff_t>(begin),
                                      values.begin() + static_cast<std::ptrdiff_t>(end));
    points.emplace_back(static_cast<size_t>(top - values.begin()), *top);
  }
  return points;
}

// Segment maps: each a title line and one bar, kMapPitch apart.
constexpr double kMapsHeader = 40, kMapPitch = 58, kMapBar = 22, kMapsFooter = 34;
constexpr const char* kAllocatedColor = "#4c72b0";
constexpr const char* kFreeColor = "#d9d9d9";

double segment_maps_height(const std::vector<SegmentMapSpec>& maps) {
  if (maps.empty()) return 0;
  return kMapsHeader + kMapPitch * static_cast<double>(maps.size()) + kMapsFooter;
}

std::string rect(double x, double y, double w, double h, const char* fill) {
  return "<rect x=\"" + number(x) + "\" y=\"" + number(y) + "\" width=\"" +
         (w < 0.05 ? std::string("0.1") : number(w)) + "\" height=\"" + number(h) +
         "\" fill=\"" + fill + "\"/>\n";
}

// One map's bar: blocks as runs of one state (a run thinner than a quarter unit joins the next,
// so a fragmented map stays a bounded number of rectangles), then an outline with a tooltip for
// each segment wide enough to point at.
std::string segment_bar(const SegmentMapSpec& map, double y, double bytes_per_unit) {
  std::string svg;
  double cursor = 0;  // bytes drawn so far
  double run_start = kLeft;
  bool run_allocated = false;
  bool in_run = false;
  auto flush = [&](double end) {
    if (in_run) svg += rect(run_start, y, end - run_start, kMapBar,
                            run_allocated ? kAllocatedColor : kFreeColor);
    in_run = false;
  };
  for (const SegmentSnapshot& segment : map.segments) {
    for (const BlockSnapshot& block : segment.blocks) {
      const double x = kLeft + cursor / bytes_per_unit;
      if (in_run && block.allocated != run_allocated && x - run_start >= 0.25) flush(x);
      if (!in_run) {
        run_start = x;
        in_run = true;
      }
      run_allocated = block.allocated;
      cursor += static_cast<double>(block.size);
    }
  }
  flush(kLeft + cursor / bytes_per_unit);
  cursor = 0;
  for (const SegmentSnapshot& segment : map.segments) {
    const double x = kLeft + cursor / bytes_per_unit;
    const double w = static_cast<double>(segment.size) / bytes_per_unit;
    cursor += static_cast<double>(segment.size);
    if (w < 3) continue;
    uint64_t allocated = 0;
    for (const BlockSnapshot& block : segment.blocks) allocated += block.allocated ? block.size : 0;
    svg += "<rect class=\"segment\" x=\"" + number(x) + "\" y=\"" + number(y) + "\" width=\"" +
           number(w) + "\" height=\"" + number(kMapBar) +
           "\" fill=\"none\" stroke=\"#555555\" stroke-width=\"0.6\"><title>segment of " +
           format_bytes(segment.size) + (segment.small_pool ? " (small pool)" : " (large pool)") +
           ", " + std::to_string(segment.blocks.size()) + " block(s), " +
           format_bytes(allocated) + " allocated</title></rect>\n";
  }
  return svg;
}

std::string svg_segment_maps(const std::vector<SegmentMapSpec>& maps, double top) {
  uint64_t widest = 1;
  for (const SegmentMapSpec& map : maps) {
    uint64_t reserved = 0;
    for (const SegmentSnapshot& segment : map.segments) reserved += segment.size;
    widest = std::max(widest, reserved);
  }
  const double bytes_per_unit = static_cast<double>(widest) / kPlotWidth;
  std::string svg = "<g class=\"segment-maps\">\n";
  svg += "<text x=\"" + number(kWidth / 2) + "\" y=\"" + number(top + 24) +
         "\" text-anchor=\"middle\" font-size=\"14\">Segments held at the reserved peak, side by "
         "side on one scale (" + format_bytes(widest) + " across)</text>\n";
  double y = top + kMapsHeader;
  for (const SegmentMapSpec& map : maps) {
    uint64_t reserved = 0, allocated = 0;
    for (const SegmentSnapshot& segment : map.segments) {
      reserved += segment.size;
      for (const BlockSnapshot& block : segment.blocks) allocated += block.allocated ? block.size : 0;
    }
    const double percent = reserved == 0 ? 0 : 100.0 * static_cast<double>(allocated) /
                                                   static_cast<double>(reserved);
    svg += "<g class=\"segment-map\" data-name=\"" + xml_escape(map.name) + "\">\n";
    svg += "<line x1=\"" + number(kLeft) + "\" y1=\"" + number(y + 10) + "\" x2=\"" +
           number(kLeft + 20) + "\" y2=\"" + number(y + 10) + "\" stroke=\"" +
           xml_escape(map.color) + "\" stroke-width=\"3\"/>\n";
    svg += "<text x=\"" + number(kLeft + 26) + "\" y=\"" + number(y + 14) + "\">" +
           xml_escape(map.name) + ": " + std::to_string(map.segments.size()) + " segment(s), " +
           format_bytes(reserved) + " reserved, " + format_bytes(allocated) + " allocated (" +
           number(percent) + "%)</text>\n";
    svg += segment_bar(map, y + 22, bytes_per_unit);
    svg += "</g>\n";
    y += kMapPitch;
  }
  svg += "<g class=\"segment-legend\">\n" + rect(kLeft, y + 4, 14, 12, kAllocatedColor) +
         "<text x=\"" + number(kLeft + 20) + "\" y=\"" + number(y + 14) +
         "\">allocated block</text>\n" + rect(kLeft + 150, y + 4, 14, 12, kFreeColor) +
         "<text x=\"" + number(kLeft + 170) + "\" y=\"" + number(y + 14) +
         "\">free, cached (reusable)</text>\n</g>\n</g>\n";
  return svg;
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string svg_line_chart(const PlotSpec& spec) {
  size_t length = 0;
  uint64_t max_value = 0;
  for (const PlotSeries& series : spec.series) {
    length = std::max(length, series.values.size());
    for (uint64_t v : series.values) max_value = std::max(max_value, v);
  }
  if (length == 0) {
    throw InvalidArgument("Expected at least one series with values to plot, but got none");
  }
  const ByteUnit unit = unit_for(max_value);
  const double y_max_units = std::max(static_cast<double>(max_value) / unit.scale, 1e-9);
  const double y_step = nice_step(y_max_units, 6);
  const double y_top = std::ceil(y_max_units / y_step) * y_step;
  const double x_span = static_cast<double>(std::max<size_t>(length - 1, 1));
  const double x_step = nice_step(x_span, 8);

  auto x_of = [&](double index) { return kLeft + index / x_span * kPlotWidth; };
  auto y_of = [&](double units) { return kTop + kPlotHeight - units / y_top * kPlotHeight; };

  const double height = kHeight + segment_maps_height(spec.segment_maps);
  std::string svg;
  svg += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(kWidth) + "\" height=\"" +
         number(height) + "\" viewBox=\"0 0 " + number(kWidth) + " " + number(height) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<title>" + xml_escape(spec.title) + "</title>\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"" + number(kWidth) + "\" height=\"" + number(height) +
         "\" fill=\"white\"/>\n";
  svg += "<text x=\"" + number(kWidth / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" +
         xml_escape(spec.title) + "</text>\n";

  // Grid and tick labels.
  svg += "<g class=\"y-axis\" stroke=\"#dddddd\">\n";
  for (double v = 0; v <= y_top + y_step / 2; v += y_step) {
    const std::string y = number(y_of(v));
    svg += "<line x1=\"" + number(kLeft) + "\" y1=\"" + y + "\" x2=\"" +
           number(kLeft + kPlotWidth) + "\" y2=\"" + y + "\"/>\n";
    svg += "<text class=\"tick\" x=\"" + number(kLeft - 8) + "\" y=\"" + number(y_of(v) + 4) +
           "\" text-anchor=\"end\" stroke=\"none\" fill=\"#333333\">" + tick_label(v) +
           "</text>\n";
  }
  svg += "</g>\n<g class=\"x-axis\" stroke=\"#dddddd\">\n";
  for (double v = 0; v <= x_span + 1e-9; v += x_step) {  // ticks inside the area only
    const std::string x = number(x_of(v));
    svg += "<line x1=\"" + x + "\" y1=\"" + number(kTop) + "\" x2=\"" + x + "\" y2=\"" +
           number(kTop + kPlotHeight) + "\"/>\n";
    svg += "<text class=\"tick\" x=\"" + x + "\" y=\"" + number(kTop + kPlotHeight + 18) +
           "\" text-anchor=\"middle\" stroke=\"none\" fill=\"#333333\">" + tick_label(v) +
           "</text>\n";
  }
  svg += "</g>\n";
  svg += "<rect x=\"" + number(kLeft) + "\" y=\"" + number(kTop) + "\" width=\"" +
         number(kPlotWidth) + "\" height=\"" + number(kPlotHeight) +
         "\" fill=\"none\" stroke=\"#333333\"/>\n";
  svg += "<text class=\"x-label\" x=\"" + number(kLeft + kPlotWidth / 2) + "\" y=\"" +
         number(kHeight - 18) + "\" text-anchor=\"middle\">" + xml_escape(spec.x_label) +
         "</text>\n";
  svg += "<text class=\"y-label\" x=\"20\" y=\"" + number(kTop + kPlotHeight / 2) +
         "\" text-anchor=\"middle\" transform=\"rotate(-90 20 " +
         number(kTop + kPlotHeight / 2) + ")\">" + xml_escape(spec.y_label) + " (" + unit.name +
         ")</text>\n";

  // The series, then the legend over them.
  for (const PlotSeries& series : spec.series) {
    if (series.values.empty()) continue;
    svg += "<polyline class=\"series\" data-name=\"" + xml_escape(series.name) +
           "\" fill=\"none\" stroke=\"" + xml_escape(series.color) + "\" stroke-width=\"1.5\"" +
           (series.dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"";
    for (const auto& [index, value] : reduced(series.values)) {
      svg += number(x_of(static_cast<double>(index))) + "," +
             number(y_of(static_cast<double>(value) / unit.scale)) + " ";
    }
    svg += "\"/>\n";
  }
  size_t longest_name = 0;
  for (const PlotSeries& series : spec.series) {
    longest_name = std::max(longest_name, series.name.size());
  }
  svg += "<g class=\"legend\">\n";
  // A backing box (7 units per character is ample for 12-unit sans-serif), so that lines under
  // the legend do not cross its text.
  svg += "<rect x=\"" + number(kLeft + 6) + "\" y=\"" + number(kTop + 4) + "\" width=\"" +
         number(50 + 7.0 * static_cast<double>(longest_name)) + "\" height=\"" +
         number(18.0 * static_cast<double>(spec.series.size()) + 6) +
         "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#cccccc\"/>\n";
  double y = kTop + 20;
  for (const PlotSeries& series : spec.series) {
    svg += "<line x1=\"" + number(kLeft + 12) + "\" y1=\"" + number(y - 4) + "\" x2=\"" +
           number(kLeft + 40) + "\" y2=\"" + number(y - 4) + "\" stroke=\"" +
           xml_escape(series.color) + "\" stroke-width=\"2\"" +
           (series.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
    svg += "<text x=\"" + number(kLeft + 48) + "\" y=\"" + number(y) + "\">" +
           xml_escape(series.name) + "</text>\n";
    y += 18;
  }
  svg += "</g>\n";
  if (!spec.segment_maps.empty()) svg += svg_segment_maps(spec.segment_maps, kHeight);
  svg += "</svg>\n";
  return svg;
}

}  // namespace oclvm::cli
