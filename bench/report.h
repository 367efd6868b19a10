// The one place that formats `loom bench` results, for every suite: per row the medians over rounds
// of loom and its anchor, their ratio, the spread across rounds, the target and a verdict; a
// warning where the rounds disagree by more than the difference reported; a legend of the units;
// the "targets: N met, M missed" line; and the JSON results (null, never NaN). See Note [bench
// verdicts]. Plain C++ with no loom headers, so that its tests link nothing else.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace loom::bench::report {

// Note [bench verdicts]
// A row compares loom with its anchor: ratio = median(loom rounds) / median(anchor rounds), or, for
// a paired design (prof: both sides measured in the same round), the median of the per-round
// ratios. A target bounds either that ratio ("<=0.50x": loom takes at most half the anchor's time)
// or loom's own figure ("<=1.1": a bare number, for rows with nothing to compare against). The
// verdict is `ok` or `MISS` against the target, `no target` when the row has none, and `not judged`
// when the ratio it bounds does not exist (no anchor figure). A row without an anchor figure says
// why ("no anchor (reason)") and has ratio "-".
// Spread: the interquartile range over rounds divided by the median (quartiles interpolated as
// numpy's default; with 2 or 3 rounds that is half the range), the larger of loom's and the
// anchor's (or the paired ratios' own); unknown with one round. When it exceeds |ratio - 1| the
// difference the row reports is within the noise of this machine, and the row says so: "spread
// across rounds (x%) is larger than the difference reported (y%): treat this row as a tie".

struct Target {
  enum class Kind { kNone, kRatio, kValue };
  Kind kind = Kind::kNone;
  double bound = 0;
  static Target none() { return {}; }
  static Target ratio(double bound) { return {Kind::kRatio, bound}; }
  static Target value(double bound) { return {Kind::kValue, bound}; }
};

enum class Verdict { kOk, kMiss, kNoTarget, kNotJudged };

struct Row {
  std::string name;
  std::string unit;
  bool lower_is_better = true;  // for the figure; the ratio's target reads the same way
  Target target;
  std::vector<double> loom_rounds;    // loom's figure in each round (NaN entries are ignored)
  std::vector<double> anchor_rounds;  // the anchor's
  std::vector<double> paired_ratios;  // optional: per-round loom/anchor ratios (see the Note)
  std::string anchor_missing;         // why the anchor has no figure ("" when it has one)
};

// What a row comes to; NaN where a figure does not exist.
struct Summary {
  double loom = 0, anchor = 0, ratio = 0;
  double spread = 0;      // relative; NaN with fewer than two rounds
  double difference = 0;  // |ratio - 1|
  Verdict verdict = Verdict::kNoTarget;
  bool tie = false;  // spread > difference
};

double median(std::vector<double> v);  // NaN entries dropped; NaN when none is left
double relative_spread(std::vector<double> v);
Summary summarize(const Row& row);

const char* verdict_text(Verdict v);
std::string target_text(const Target& t, bool lower_is_better);  // "<=0.50x", ">=5x", "<=1.1", ""
std::string number_text(double v);                               // "%.4g", "-" for NaN
std::string percent_text(double fraction);                       // "12.3%", "-" for NaN
// "" or "spread across rounds (x%) is larger than the difference reported (y%): treat this row as a
// tie".
std::string tie_warning(const Summary& s);

struct Tally {
  int met = 0, missed = 0, not_judged = 0;
  void add(Verdict v);
};
// "targets: N met, M missed" (+ ", K not judged (no anchor figure)"); `detail` goes in parentheses
// after "targets" when given.
std::string targets_line(const Tally& t, const std::string& detail = "");

// One line per unit: what it measures and which way is better. Known units get a description;
// others are named as they are.
std::string legend(const std::vector<std::pair<std::string, bool>>& units_lower_is_better);
std::string legend_for(const std::vector<Row>& rows);
// The lines every table ends with: what ratio, spread and target mean.
std::string ratio_note();

// The generic table: benchmark, unit, loom, anchor, ratio, spread, target, verdict, then a note
// ("(reason)" for a missing anchor); a tie warning under each noisy row; then the legend, the
// notes and the targets line. `loom_title`/`anchor_title` head the two value columns.
std::string render_table(const std::vector<Row>& rows, const std::string& loom_title = "loom",
                         const std::string& anchor_title = "anchor");

// JSON pieces: numbers as %.9g or null; strings escaped.
std::string json_number(double v);
std::string json_string(const std::string& s);
// One entry of "results": name, unit, loom, anchor (the label, or null), anchor_value, ratio,
// better, then target, verdict, spread, loom_rounds, anchor_rounds and anchor_missing. `extra`:
// more `"key": value` pairs, comma-separated, appended as they are.
std::string json_row(const Row& row, const std::string& anchor_label,
                     const std::string& extra = "");

}  // namespace loom::bench::report
