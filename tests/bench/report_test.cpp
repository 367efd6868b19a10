// The verdicts, spreads, legends and JSON of `loom bench` (bench/report.h).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <sstream>
#include <string>

#include "loom/json.h"
#include "report.h"

namespace loom::bench::report {
namespace {

Row make_row(std::vector<double> loom, std::vector<double> anchor, Target t = Target::none(),
             bool lower = true) {
  Row r;
  r.name = "row";
  r.unit = "ns/op";
  r.lower_is_better = lower;
  r.target = t;
  r.loom_rounds = std::move(loom);
  r.anchor_rounds = std::move(anchor);
  return r;
}

// Whether any whitespace-separated word of text is a printed NaN ("nan", "-nan", "NaN").
bool has_nan_token(const std::string& text) {
  std::istringstream is(text);
  std::string w;
  while (is >> w) {
    for (char& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (w == "nan" || w == "-nan" || w == "+nan") return true;
  }
  return false;
}

TEST(BenchReport, MedianAndSpreadIgnoreNaN) {
  EXPECT_DOUBLE_EQ(median({3, NAN, 1, 2}), 2.0);
  EXPECT_TRUE(std::isnan(median({NAN})));
  // Five rounds: quartiles are the 2nd and 4th values: (4 - 2) / 3.
  EXPECT_DOUBLE_EQ(relative_spread({5, 1, 4, 2, 3}), 2.0 / 3.0);
  // Two rounds: quartiles interpolate to 12.5 and 17.5 around the median 15.
  EXPECT_DOUBLE_EQ(relative_spread({10, 20}), 5.0 / 15.0);
  EXPECT_TRUE(std::isnan(relative_spread({7})));
  EXPECT_TRUE(std::isnan(relative_spread({7, NAN})));
}

TEST(BenchReport, RatioTargetsReadTheWayTheFigureDoes) {
  // Lower is better: loom at half the anchor's time meets <= 0.5x and misses <= 0.4x.
  EXPECT_EQ(summarize(make_row({1, 1, 1}, {2, 2, 2}, Target::ratio(0.5))).verdict, Verdict::kOk);
  EXPECT_EQ(summarize(make_row({1, 1, 1}, {2, 2, 2}, Target::ratio(0.4))).verdict, Verdict::kMiss);
  // Higher is better: 2x the anchor's throughput meets >= 1.5x, misses >= 3x.
  EXPECT_EQ(summarize(make_row({4}, {2}, Target::ratio(1.5), false)).verdict, Verdict::kOk);
  EXPECT_EQ(summarize(make_row({4}, {2}, Target::ratio(3), false)).verdict, Verdict::kMiss);
  EXPECT_EQ(summarize(make_row({4}, {2})).verdict, Verdict::kNoTarget);
  const Summary s = summarize(make_row({1, 3}, {4, 4}));
  EXPECT_DOUBLE_EQ(s.loom, 2.0);
  EXPECT_DOUBLE_EQ(s.anchor, 4.0);
  EXPECT_DOUBLE_EQ(s.ratio, 0.5);
}

TEST(BenchReport, MissingAnchorHasNoRatioAndIsNotJudged) {
  Row r = make_row({1, 1}, {}, Target::ratio(0.5));
  r.anchor_missing = "loom-anchor-torch is not built";
  const Summary s = summarize(r);
  EXPECT_TRUE(std::isnan(s.anchor));
  EXPECT_TRUE(std::isnan(s.ratio));
  EXPECT_EQ(s.verdict, Verdict::kNotJudged);
  EXPECT_FALSE(s.tie);
  // Figures a missing anchor left behind are not used.
  r.anchor_rounds = {2, 2};
  EXPECT_TRUE(std::isnan(summarize(r).ratio));
}

TEST(BenchReport, ValueTargetsBoundLoomsOwnFigure) {
  Row r = make_row({1.05}, {}, Target::value(1.1));
  r.anchor_missing = "this suite has none";
  EXPECT_EQ(summarize(r).verdict, Verdict::kOk);
  r.loom_rounds = {1.2};
  EXPECT_EQ(summarize(r).verdict, Verdict::kMiss);
  EXPECT_EQ(target_text(Target::value(1.1), true), "<=1.1");
  EXPECT_EQ(target_text(Target::ratio(0.5), true), "<=0.5x");
  EXPECT_EQ(target_text(Target::ratio(5), false), ">=5x");
  EXPECT_EQ(target_text(Target::none(), false), "");
}

TEST(BenchReport, WarnsWhenTheSpreadExceedsTheDifference) {
  // Loom's rounds vary by 10 % (quartiles 95 and 105 around 100) while the medians are equal.
  const Summary tie = summarize(make_row({90, 100, 110}, {100, 100, 100}));
  EXPECT_TRUE(tie.tie);
  EXPECT_EQ(tie_warning(tie),
            "spread across rounds (10.0%) is larger than the difference reported (0.0%): treat "
            "this row as a tie");
  // The anchor's spread counts as much as loom's.
  const Summary tie2 = summarize(make_row({100, 100, 100}, {80, 95, 120}));
  EXPECT_TRUE(tie2.tie);
  // A 2x difference stands out of a 2 % spread.
  const Summary clear = summarize(make_row({49, 50, 51}, {100, 100, 100}));
  EXPECT_FALSE(clear.tie);
  EXPECT_EQ(tie_warning(clear), "");
  // One round: the spread is unknown, so no warning either way.
  EXPECT_FALSE(summarize(make_row({100}, {101})).tie);
}

TEST(BenchReport, PairedRatiosGiveTheRatioAndItsSpread) {
  Row r = make_row({7.0, 7.5, 6.5}, {7.0, 7.0, 7.0}, Target::ratio(1.03));
  r.paired_ratios = {1.01, 1.02, 1.03};
  const Summary s = summarize(r);
  EXPECT_DOUBLE_EQ(s.ratio, 1.02);
  EXPECT_NEAR(s.spread, 0.01 / 1.02, 1e-12);
  EXPECT_EQ(s.verdict, Verdict::kOk);
  EXPECT_FALSE(s.tie);  // a 1 % spread under a 2 % difference
  // Paired ratios of 0.99, 1.01, 1.05: a 1 % difference inside a 3 % spread.
  r.paired_ratios = {0.99, 1.05, 1.01};
  EXPECT_TRUE(summarize(r).tie);
}

TEST(BenchReport, TargetsLineCountsEveryVerdict) {
  Tally t;
  for (Verdict v :
       {Verdict::kOk, Verdict::kOk, Verdict::kMiss, Verdict::kNoTarget, Verdict::kNotJudged}) {
    t.add(v);
  }
  EXPECT_EQ(targets_line(t), "targets: 2 met, 1 missed, 1 not judged (no figure to compare)");
  EXPECT_EQ(targets_line(Tally{3, 0, 0}, "busbw >= 1.2x Gloo"),
            "targets (busbw >= 1.2x Gloo): 3 met, 0 missed");
  EXPECT_EQ(targets_line(Tally{}), "targets: 0 met, 0 missed (no row has a target)");
}

TEST(BenchReport, LegendExplainsEachUnitOnceWithItsDirection) {
  const std::string l =
      legend({{"ns/op", true}, {"GFLOP/s", false}, {"ns/op", true}, {"widgets/s", false}});
  EXPECT_NE(l.find("ns/op      nanoseconds per operator call; lower is better\n"),
            std::string::npos)
      << l;
  EXPECT_NE(l.find("GFLOP/s    10^9 floating-point operations per second"), std::string::npos);
  EXPECT_NE(l.find("; higher is better"), std::string::npos);
  EXPECT_NE(l.find("widgets/s  higher is better\n"), std::string::npos) << l;
  EXPECT_EQ(l.find("ns/op", l.find("ns/op") + 1), std::string::npos) << "listed twice:\n" << l;
}

TEST(BenchReport, TableShowsVerdictsNoAnchorAndNeverNaN) {
  Row ok = make_row({1, 1, 1}, {2, 2, 2}, Target::ratio(0.5));
  ok.name = "eager_add_8";
  Row missing = make_row({5, 5, 5}, {}, Target::ratio(1.0), false);
  missing.name = "add_16M_t1";
  missing.unit = "GB/s";
  missing.anchor_missing = "timeout after 3 s on add_16M_t1 (the anchor was stopped)";
  Row noisy = make_row({90, 100, 110}, {100, 100, 100});
  noisy.name = "noisy_row";
  const std::string t = render_table({ok, missing, noisy});
  EXPECT_NE(t.find("verdict"), std::string::npos) << t;
  EXPECT_FALSE(has_nan_token(t)) << t;
  // The missing row: no anchor, ratio "-", its reason, not judged.
  const size_t at = t.find("add_16M_t1");
  const std::string line = t.substr(at, t.find('\n', at) - at);
  EXPECT_NE(line.find("no anchor"), std::string::npos) << line;
  EXPECT_NE(line.find("(timeout after 3 s on add_16M_t1 (the anchor was stopped))"),
            std::string::npos);
  EXPECT_NE(line.find(" - "), std::string::npos) << line;
  EXPECT_NE(line.find("not judged"), std::string::npos) << line;
  EXPECT_NE(t.find("ok"), std::string::npos);
  EXPECT_NE(t.find("no target"), std::string::npos);
  // The warning sits under the noisy row.
  EXPECT_NE(t.find("noisy_row"), std::string::npos);
  EXPECT_LT(t.find("noisy_row"), t.find("warning: spread across rounds"));
  EXPECT_NE(t.find("units:\n"), std::string::npos);
  EXPECT_NE(t.find("GB/s"), std::string::npos);
  EXPECT_NE(t.find("targets: 1 met, 0 missed, 1 not judged"), std::string::npos) << t;
}

TEST(BenchReport, JsonRowsUseNullNotNaNAndCarryTheVerdict) {
  Row r = make_row({1.5, 2.5}, {}, Target::ratio(0.5));
  r.anchor_rounds = {NAN};
  r.anchor_missing = "the anchor is not running";
  const std::string text = json_row(r, "libtorch \"1.13\"", "\"bytes\": 4096");
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
  EXPECT_EQ(text.find("NaN"), std::string::npos) << text;
  const Json j = Json::parse(text, "row");
  EXPECT_EQ(j.at("name").as_string(), "row");
  EXPECT_EQ(j.at("anchor").as_string(), "libtorch \"1.13\"");
  EXPECT_DOUBLE_EQ(j.at("loom").as_double(), 2.0);
  EXPECT_TRUE(j.at("anchor_value").is_null());
  EXPECT_TRUE(j.at("ratio").is_null());
  EXPECT_EQ(j.at("better").as_string(), "lower");
  EXPECT_EQ(j.at("target").as_string(), "<=0.5x");
  EXPECT_EQ(j.at("verdict").as_string(), "not judged");
  EXPECT_NEAR(j.at("spread").as_double(), 0.5 / 2.0, 1e-9);
  EXPECT_EQ(j.at("loom_rounds").as_array().size(), 2u);
  EXPECT_EQ(j.at("anchor_missing").as_string(), r.anchor_missing);
  EXPECT_EQ(j.at("bytes").as_int(), 4096);
  EXPECT_EQ(json_string("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
}

}  // namespace
}  // namespace loom::bench::report
