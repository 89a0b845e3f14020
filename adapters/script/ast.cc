// adapters/script/ast.cc — names and small functions of the parsed form: the statistic names of
// `expect STAT` (short names and PyTorch-style keys), error kinds, comparisons, and counting the
// expectations of a Script. See adapters/script/ast.h.
#include "adapters/script/ast.h"

#include <type_traits>

namespace oclvm::script {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOutOfMemory: return "out_of_memory";
    case ErrorKind::kInvalidArgument: return "invalid_argument";
    case ErrorKind::kBackend: return "backend";
    case ErrorKind::kAny: return "error";
  }
  return "error";
}

const char* comparison_text(Comparison comparison) {
  switch (comparison) {
    case Comparison::kEqual: return "=";
    case Comparison::kNotEqual: return "!=";
    case Comparison::kLess: return "<";
    case Comparison::kLessEqual: return "<=";
    case Comparison::kGreater: return ">";
    case Comparison::kGreaterEqual: return ">=";
  }
  return "?";
}

bool compare(int64_t seen, Comparison comparison, int64_t expected) {
  switch (comparison) {
    case Comparison::kEqual: return seen == expected;
    case Comparison::kNotEqual: return seen != expected;
    case Comparison::kLess: return seen < expected;
    case Comparison::kLessEqual: return seen <= expected;
    case Comparison::kGreater: return seen > expected;
    case Comparison::kGreaterEqual: return seen >= expected;
  }
  return false;
}

int64_t StatKey::read(const DeviceStats& stats) const {
  if (scalar != nullptr) return stats.*scalar;
  return (stats.*array)[pool].*field;
}

namespace {

struct PoolName {
  const char* name;
  StatType pool;
};
constexpr PoolName kPools[] = {
    {"all", StatType::kAggregate},
    {"small_pool", StatType::kSmallPool},
    {"large_pool", StatType::kLargePool},
};

struct FieldName {
  const char* name;
  int64_t Stat::*field;
};
constexpr FieldName kFields[] = {
    {"current", &Stat::current},
    {"peak", &Stat::peak},
    {"allocated", &Stat::allocated},
    {"freed", &Stat::freed},
};

// Short names: what people write most. Each stands for a PyTorch-style key of the aggregate pool.
struct ShortName {
  const char* name;
  const char* canonical;
};
constexpr ShortName kShortNames[] = {
    {"allocated", "allocated_bytes.all.current"},
    {"reserved", "reserved_bytes.all.current"},
    {"requested", "requested_bytes.all.current"},
    {"active", "active_bytes.all.current"},
    {"inactive_split_bytes", "inactive_split_bytes.all.current"},
    {"peak_allocated", "allocated_bytes.all.peak"},
    {"peak_reserved", "reserved_bytes.all.peak"},
    {"peak_requested", "requested_bytes.all.peak"},
    {"peak_active", "active_bytes.all.peak"},
    {"allocations", "allocation.all.current"},
    {"peak_allocations", "allocation.all.peak"},
    {"segments", "segment.all.current"},
    {"peak_segments", "segment.all.peak"},
    {"active_blocks", "active.all.current"},
    {"inactive_splits", "inactive_split.all.current"},
    {"num_allocs", "allocation.all.allocated"},
    {"num_frees", "allocation.all.freed"},
    {"num_segment_allocs", "segment.all.allocated"},
    {"num_segment_frees", "segment.all.freed"},
    {"total_allocated", "allocated_bytes.all.allocated"},
    {"total_freed", "allocated_bytes.all.freed"},
};

std::optional<StatKey> find_canonical(std::string_view name) {
  for (const StatCounterField& s : kStatCounterFields) {
    if (name == s.name) {
      StatKey key;
      key.canonical = s.name;
      key.scalar = s.member;
      return key;
    }
  }
  size_t first = name.find('.');
  if (first == std::string_view::npos) return std::nullopt;
  size_t second = name.find('.', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  std::string_view array_name = name.substr(0, first);
  std::string_view pool_name = name.substr(first + 1, second - first - 1);
  std::string_view field_name = name.substr(second + 1);
  StatKey key;
  key.canonical = std::string(name);
  for (const StatArrayField& a : kStatArrayFields) {
    if (array_name == a.name) key.array = a.member;
  }
  bool pool_found = false;
  for (const PoolName& p : kPools) {
    if (pool_name == p.name) {
      key.pool = p.pool;
      pool_found = true;
    }
  }
  for (const FieldName& f : kFields) {
    if (field_name == f.name) key.field = f.field;
  }
  if (key.array == nullptr || !pool_found || key.field == nullptr) return std::nullopt;
  return key;
}

}  // namespace

std::optional<StatKey> find_stat(std::string_view name) {
  std::string_view canonical = name;
  for (const ShortName& s : kShortNames) {
    if (name == s.name) canonical = s.canonical;
  }
  std::optional<StatKey> key = find_canonical(canonical);
  if (key) key->name = std::string(name);
  return key;
}

bool is_expectation(const Operation& op) {
  return std::visit(
      [](const auto& o) { return std::is_base_of_v<op::Expectation, std::decay_t<decltype(o)>>; },
      op);
}

size_t Script::expectation_count() const {
  size_t count = 0;
  for (const Statement& statement : statements) {
    if (is_expectation(statement.op)) ++count;
  }
  return count;
}

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace oclvm::script
