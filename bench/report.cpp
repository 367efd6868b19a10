// Verdicts, spreads, legends and JSON for `loom bench` (see Note [bench verdicts] in report.h).
#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace loom::bench::report {
namespace {

std::vector<double> finite_only(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  return v;
}

// Linear interpolation between order statistics, as numpy.quantile's default.
double quantile_sorted(const std::vector<double>& v, double q) {
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double finite_or_nan(double v) {
  return std::isfinite(v) ? v : NAN;
}

// The larger of the defined values; NaN when neither is.
double max_defined(double a, double b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  return std::max(a, b);
}

struct UnitInfo {
  const char* unit;
  const char* meaning;
};
constexpr UnitInfo kUnits[] = {
    {"ns/op", "nanoseconds per operator call"},
    {"ns/pair", "nanoseconds per allocate + free pair"},
    {"ns/event", "nanoseconds of allocator time per replayed event"},
    {"GB/s", "gigabytes per second of memory traffic (bytes read + written / time)"},
    {"GFLOP/s", "10^9 floating-point operations per second (2*M*N*K per matrix product)"},
    {"TFLOP/s", "10^12 floating-point operations per second (2*M*N*K per matrix product)"},
    {"us/op", "microseconds of host time per operator call, launch included"},
    {"ms", "milliseconds of device time per call (CUDA events)"},
    {"of copy", "fraction of the same side's copy_256m bandwidth in the same round"},
    {"of pinned", "fraction of the same side's h2d_pinned_copy bandwidth in the same round"},
    {"ms/step", "milliseconds per training step (zero_grad, forward, backward, optimizer step)"},
    {"samples/s", "samples per second delivered by the loader"},
    {"us/batch", "microseconds per batch"},
    {"rsv/alloc", "peak bytes reserved from the device / peak bytes allocated"},
    {"us/call", "microseconds of host time per call of a (compiled or eager) function"},
    {"of eager", "the compiled row's figure / the eager row's, same run"},
    {"graphs", "graphs a compiled function captured"},
    {"ms wall", "milliseconds of wall time of one call (a first call: capture and compiling)"},
    {"s wall", "seconds of wall time of the calls the row describes, compiling included"},
    {"us", "microseconds per collective call (the slowest rank's)"},
    {"GB/s algbw", "algorithm bandwidth: message bytes / time"},
    {"GB/s busbw",
     "bus bandwidth: message bytes / time x the collective's factor (nccl-tests' busbw)"},
};

}  // namespace

double median(std::vector<double> v) {
  v = finite_only(std::move(v));
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double relative_spread(std::vector<double> v) {
  v = finite_only(std::move(v));
  if (v.size() < 2) return NAN;
  std::sort(v.begin(), v.end());
  const double m = median(v);
  if (m == 0) return NAN;
  return (quantile_sorted(v, 0.75) - quantile_sorted(v, 0.25)) / std::fabs(m);
}

Summary summarize(const Row& row) {
  Summary s;
  s.loom = median(row.loom_rounds);
  s.anchor = row.anchor_missing.empty() ? median(row.anchor_rounds) : NAN;
  if (!row.paired_ratios.empty() && row.anchor_missing.empty()) {
    s.ratio = median(row.paired_ratios);
    s.spread = relative_spread(row.paired_ratios);
  } else {
    s.ratio = finite_or_nan(s.loom / s.anchor);
    s.spread = max_defined(relative_spread(row.loom_rounds),
                           std::isnan(s.anchor) ? NAN : relative_spread(row.anchor_rounds));
  }
  s.difference = std::fabs(s.ratio - 1.0);
  s.tie = !std::isnan(s.ratio) && !std::isnan(s.spread) && s.spread > s.difference;
  switch (row.target.kind) {
    case Target::Kind::kNone:
      s.verdict = Verdict::kNoTarget;
      break;
    case Target::Kind::kRatio:
    case Target::Kind::kValue: {
      const double x = row.target.kind == Target::Kind::kRatio ? s.ratio : s.loom;
      if (std::isnan(x)) {
        s.verdict = Verdict::kNotJudged;
      } else {
        const bool ok = row.lower_is_better ? x <= row.target.bound : x >= row.target.bound;
        s.verdict = ok ? Verdict::kOk : Verdict::kMiss;
      }
      break;
    }
  }
  return s;
}

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kMiss:
      return "MISS";
    case Verdict::kNoTarget:
      return "no target";
    case Verdict::kNotJudged:
      return "not judged";
  }
  return "?";
}

std::string target_text(const Target& t, bool lower_is_better) {
  if (t.kind == Target::Kind::kNone) return "";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s%.3g%s", lower_is_better ? "<=" : ">=", t.bound,
                t.kind == Target::Kind::kRatio ? "x" : "");
  return buf;
}

std::string number_text(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

std::string percent_text(double fraction) {
  if (!std::isfinite(fraction)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * fraction);
  return buf;
}

std::string tie_warning(const Summary& s) {
  if (!s.tie) return "";
  return "spread across rounds (" + percent_text(s.spread) +
         ") is larger than the difference reported (" + percent_text(s.difference) +
         "): treat this row as a tie";
}

void Tally::add(Verdict v) {
  if (v == Verdict::kOk) ++met;
  if (v == Verdict::kMiss) ++missed;
  if (v == Verdict::kNotJudged) ++not_judged;
}

std::string targets_line(const Tally& t, const std::string& detail) {
  std::ostringstream o;
  o << "targets" << (detail.empty() ? "" : " (" + detail + ")") << ": " << t.met << " met, "
    << t.missed << " missed";
  if (t.not_judged > 0) o << ", " << t.not_judged << " not judged (no figure to compare)";
  if (t.met + t.missed + t.not_judged == 0) o << " (no row has a target)";
  return o.str();
}

std::string legend(const std::vector<std::pair<std::string, bool>>& units) {
  // Each unit once, in order of appearance; a unit used both ways says both.
  std::vector<std::string> order;
  std::map<std::string, std::pair<bool, bool>> seen;  // unit -> (lower seen, higher seen)
  for (const auto& [unit, lower] : units) {
    if (!seen.count(unit)) order.push_back(unit);
    auto& s = seen[unit];
    (lower ? s.first : s.second) = true;
  }
  size_t width = 0;
  for (const auto& u : order) width = std::max(width, u.size());
  std::ostringstream o;
  o << "units:\n";
  for (const auto& u : order) {
    const char* meaning = nullptr;
    for (const UnitInfo& k : kUnits) {
      if (u == k.unit) meaning = k.meaning;
    }
    const auto [lower, higher] = seen[u];
    const char* better = lower && higher ? "lower or higher is better as the row says"
                         : lower         ? "lower is better"
                                         : "higher is better";
    o << "  " << u << std::string(width - u.size(), ' ') << "  "
      << (meaning ? std::string(meaning) + "; " : std::string()) << better << "\n";
  }
  return o.str();
}

std::string legend_for(const std::vector<Row>& rows) {
  std::vector<std::pair<std::string, bool>> units;
  for (const Row& r : rows) units.emplace_back(r.unit, r.lower_is_better);
  return legend(units);
}

std::string ratio_note() {
  return "ratio = loom / anchor (medians over rounds, or the median of paired per-round ratios); a "
         "target ending in x bounds\nthe ratio, a bare number bounds loom's own figure. spread = "
         "interquartile range / median over rounds, the\nlarger of loom's and the anchor's (\"-\": "
         "one round); where it exceeds |ratio - 1| the row is a tie on this machine.\n";
}

std::string render_table(const std::vector<Row>& rows, const std::string& loom_title,
                         const std::string& anchor_title) {
  int name_w = 26, unit_w = 9;
  for (const Row& r : rows) {
    name_w = std::max(name_w, static_cast<int>(r.name.size()));
    unit_w = std::max(unit_w, static_cast<int>(r.unit.size()));
  }
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof(line), "%-*s %-*s %12s %12s %8s %7s %8s  %-10s", name_w, "benchmark",
                unit_w, "unit", loom_title.c_str(), anchor_title.c_str(), "ratio", "spread",
                "target", "verdict");
  o << line << "\n";
  Tally tally;
  for (const Row& r : rows) {
    const Summary s = summarize(r);
    tally.add(s.verdict);
    const bool missing = !r.anchor_missing.empty() || std::isnan(s.anchor);
    std::string note;
    if (missing) {
      note = "(" + (r.anchor_missing.empty() ? std::string("no figure") : r.anchor_missing) + ")";
    }
    std::snprintf(line, sizeof(line), "%-*s %-*s %12s %12s %8s %7s %8s  %-10s", name_w,
                  r.name.c_str(), unit_w, r.unit.c_str(), number_text(s.loom).c_str(),
                  missing ? "no anchor" : number_text(s.anchor).c_str(),
                  std::isnan(s.ratio) ? "-" : number_text(s.ratio).c_str(),
                  percent_text(s.spread).c_str(), target_text(r.target, r.lower_is_better).c_str(),
                  verdict_text(s.verdict));
    std::string text = line;
    if (!note.empty()) text += " " + note;
    while (!text.empty() && text.back() == ' ') text.pop_back();
    o << text << "\n";
    if (s.tie) o << "    warning: " << tie_warning(s) << "\n";
  }
  o << "\n" << legend_for(rows) << ratio_note() << targets_line(tally) << "\n";
  return o.str();
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (c == '\n') {
      o += "\\n";
    } else if (c == '\t') {
      o += "\\t";
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      o += buf;
    } else {
      o += c;
    }
  }
  return o + "\"";
}

std::string json_row(const Row& r, const std::string& anchor_label, const std::string& extra) {
  const Summary s = summarize(r);
  auto array = [](const std::vector<double>& v) {
    std::string a = "[";
    for (size_t i = 0; i < v.size(); ++i) a += (i ? ", " : "") + json_number(v[i]);
    return a + "]";
  };
  const std::string target = target_text(r.target, r.lower_is_better);
  std::ostringstream o;
  o << "{\"name\": " << json_string(r.name) << ", \"unit\": " << json_string(r.unit)
    << ", \"loom\": " << json_number(s.loom)
    << ", \"anchor\": " << (anchor_label.empty() ? "null" : json_string(anchor_label))
    << ", \"anchor_value\": " << json_number(s.anchor) << ", \"ratio\": " << json_number(s.ratio)
    << ", \"better\": \"" << (r.lower_is_better ? "lower" : "higher") << "\""
    << ", \"target\": " << (target.empty() ? "null" : json_string(target))
    << ", \"verdict\": " << json_string(verdict_text(s.verdict))
    << ", \"spread\": " << json_number(s.spread) << ", \"loom_rounds\": " << array(r.loom_rounds)
    << ", \"anchor_rounds\": "
    << array(r.anchor_missing.empty() ? r.anchor_rounds : std::vector<double>{})
    << ", \"anchor_missing\": "
    << (r.anchor_missing.empty() && !std::isnan(s.anchor) ? "null"
        : r.anchor_missing.empty()                        ? json_string("no figure")
                                                          : json_string(r.anchor_missing));
  if (!extra.empty()) o << ", " << extra;
  o << "}";
  return o.str();
}

}  // namespace loom::bench::report
