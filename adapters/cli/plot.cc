// adapters/cli/plot.cc — svg_line_chart: axes with round ticks, one polyline per series, a legend.
#include "adapters/cli/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "oclvm/storage/errors.h"

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

  std::string svg;
  svg += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(kWidth) + "\" height=\"" +
         number(kHeight) + "\" viewBox=\"0 0 " + number(kWidth) + " " + number(kHeight) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<title>" + xml_escape(spec.title) + "</title>\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"" + number(kWidth) + "\" height=\"" + number(kHeight) +
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
  svg += "</g>\n</svg>\n";
  return svg;
}

}  // namespace oclvm::cli
