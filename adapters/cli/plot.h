// adapters/cli/plot.h — self-contained SVG line charts of bytes over events (`oclvm replay
// --plot`).
//
// A person would rather look at a replay than read its counters: svg_line_chart draws one line
// per series (bytes after each event) on shared axes, with tick labels in binary units (KiB, MiB,
// GiB), axis titles and a legend. The SVG has no script, no stylesheet and no external reference,
// so any browser opens it offline.
//
// Series longer than kMaxPlotPoints are reduced to that many points by keeping each bucket's
// largest value, so a peak never disappears from the picture.
//
// Below the chart, optional segment maps: for each, one bar of the device memory an allocator
// held at a moment (its reserved peak), every segment side by side in address order, its blocks
// coloured allocated or free, on one byte scale shared by all maps, so the allocators' cached and
// fragmented bytes compare at a glance. Segments too thin to see merge into runs of one state;
// wide ones carry a tooltip.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oclvm/storage/allocator.h"

namespace oclvm::cli {

inline constexpr size_t kMaxPlotPoints = 1500;

struct PlotSeries {
  std::string name;               // the legend's text
  std::string color;              // an SVG colour, e.g. "#1f77b4"
  bool dashed = false;
  std::vector<uint64_t> values;   // bytes after event i
};

// One allocator's segments at one moment, drawn under the chart.
struct SegmentMapSpec {
  std::string name;                       // e.g. "caching at its reserved peak (event 812)"
  std::string color;                      // its series' colour, for the map's marker
  std::vector<SegmentSnapshot> segments;  // by address
};

struct PlotSpec {
  std::string title;
  std::string x_label = "event";
  std::string y_label = "bytes";
  std::vector<PlotSeries> series;  // drawn in order; all share the x axis (the longest one's)
  std::vector<SegmentMapSpec> segment_maps;  // drawn below the chart, in order
};

// The chart as an SVG document. Throws InvalidArgument when there is no series or every series is
// empty (nothing to draw).
std::string svg_line_chart(const PlotSpec& spec);

// `text` with &, <, >, " and ' replaced by XML entities.
std::string xml_escape(const std::string& text);

}  // namespace oclvm::cli
