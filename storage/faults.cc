// storage/faults.cc — parsing OCLVM_FAULTS and deciding which calls fail.
#include "oclvm/storage/faults.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "oclvm/storage/errors.h"

namespace oclvm {
namespace {

constexpr std::array<const char*, kNumFaultPoints> kPointNames = {
    "segment", "copy", "fill", "finish", "map", "build", "launch"};

// A well-mixed 64-bit value of `x` (SplitMix64's finaliser): the probability rule draws from it,
// so a decision depends only on (seed, point, call number) and a run replays exactly.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

[[noreturn]] void bad_rule(std::string_view what, std::string_view rule, const std::string& expected) {
  throw InvalidArgument("Expected " + expected + " in " + std::string(what) + ", but got \"" +
                        std::string(rule) + "\" (syntax: POINT:nth=N, POINT:every=N or POINT:p=X "
                        "with POINT segment, copy, fill, finish, map, build or launch, and seed=N; comma-separated)");
}

uint64_t parse_count(std::string_view text, std::string_view what, std::string_view rule) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
    bad_rule(what, rule, "a decimal count");
  }
  return value;
}

}  // namespace

const char* fault_point_name(FaultPoint point) { return kPointNames[static_cast<size_t>(point)]; }

bool FaultOptions::any() const {
  for (const FaultRule& rule : rules) {
    if (rule.mode != FaultRule::Mode::kNever) return true;
  }
  return false;
}

std::string FaultOptions::str() const {
  std::string text;
  for (size_t i = 0; i < kNumFaultPoints; ++i) {
    const FaultRule& r = rules[i];
    if (r.mode == FaultRule::Mode::kNever) continue;
    if (!text.empty()) text += ",";
    text += std::string(kPointNames[i]) + ":";
    if (r.mode == FaultRule::Mode::kNth) text += "nth=" + std::to_string(r.n);
    if (r.mode == FaultRule::Mode::kEvery) text += "every=" + std::to_string(r.n);
    if (r.mode == FaultRule::Mode::kProbability) {
      char number[32];
      std::snprintf(number, sizeof(number), "%g", r.probability);
      text += std::string("p=") + number;
    }
  }
  if (!text.empty() && seed != 0) text += ",seed=" + std::to_string(seed);
  return text;
}

FaultOptions FaultOptions::parse(std::string_view text, std::string_view what) {
  FaultOptions options;
  std::array<bool, kNumFaultPoints> seen{};
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view rule = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (rule.empty() || (comma != std::string_view::npos && text.empty())) {
      bad_rule(what, rule, "a rule on each side of every comma");
    }
    if (rule.substr(0, 5) == "seed=") {
      options.seed = parse_count(rule.substr(5), what, rule);
      continue;
    }
    const size_t colon = rule.find(':');
    const std::string_view point_name = rule.substr(0, colon);
    size_t point = kNumFaultPoints;
    for (size_t i = 0; i < kNumFaultPoints; ++i) {
      if (point_name == kPointNames[i]) point = i;
    }
    if (point == kNumFaultPoints || colon == std::string_view::npos) {
      bad_rule(what, rule, "a fault point segment, copy, fill, finish or map followed by ':'");
    }
    if (seen[point]) bad_rule(what, rule, "one rule per fault point");
    seen[point] = true;
    const std::string_view spec = rule.substr(colon + 1);
    FaultRule& r = options.rules[point];
    if (spec.substr(0, 4) == "nth=") {
      r.mode = FaultRule::Mode::kNth;
      r.n = parse_count(spec.substr(4), what, rule);
    } else if (spec.substr(0, 6) == "every=") {
      r.mode = FaultRule::Mode::kEvery;
      r.n = parse_count(spec.substr(6), what, rule);
    } else if (spec.substr(0, 2) == "p=") {
      const std::string number(spec.substr(2));
      char* end = nullptr;
      r.mode = FaultRule::Mode::kProbability;
      r.probability = number.empty() ? -1.0 : std::strtod(number.c_str(), &end);
      if (number.empty() || end != number.c_str() + number.size() ||
          !std::isfinite(r.probability) || r.probability < 0.0 || r.probability > 1.0) {
        bad_rule(what, rule, "a probability in [0, 1]");
      }
      continue;
    } else {
      bad_rule(what, rule, "nth=N, every=N or p=X after the fault point");
    }
    if (r.n == 0) bad_rule(what, rule, "a count of at least 1");
  }
  return options;
}

void FaultInjector::configure(const FaultOptions& options) {
  MutexLock lock(mutex_);
  options_ = options;
  calls_ = {};
  injected_ = {};
  enabled_.store(options.any(), std::memory_order_relaxed);
}

FaultOptions FaultInjector::options() const {
  MutexLock lock(mutex_);
  return options_;
}

bool FaultInjector::should_fail(FaultPoint point) {
  if (!enabled_.load(std::memory_order_relaxed)) return false;
  const size_t i = static_cast<size_t>(point);
  MutexLock lock(mutex_);
  const uint64_t call = ++calls_[i];
  const FaultRule& rule = options_.rules[i];
  bool fail = false;
  switch (rule.mode) {
    case FaultRule::Mode::kNever:
      break;
    case FaultRule::Mode::kNth:
      fail = call == rule.n;
      break;
    case FaultRule::Mode::kEvery:
      fail = call % rule.n == 0;
      break;
    case FaultRule::Mode::kProbability: {
      const uint64_t draw = mix(options_.seed ^ mix(call * kNumFaultPoints + i));
      fail = static_cast<double>(draw >> 11) * 0x1.0p-53 < rule.probability;
      break;
    }
  }
  if (fail) ++injected_[i];
  return fail;
}

uint64_t FaultInjector::calls(FaultPoint point) const {
  MutexLock lock(mutex_);
  return calls_[static_cast<size_t>(point)];
}

uint64_t FaultInjector::injected(FaultPoint point) const {
  MutexLock lock(mutex_);
  return injected_[static_cast<size_t>(point)];
}

uint64_t FaultInjector::injected_total() const {
  MutexLock lock(mutex_);
  uint64_t total = 0;
  for (uint64_t n : injected_) total += n;
  return total;
}

}  // namespace oclvm
