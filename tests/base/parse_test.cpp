// The one number parser (loom/parse.h): every hostile command-line value from the hardening review,
// checked against the values std::from_chars / strtod give for good input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "loom/error.h"
#include "loom/parse.h"
#include "test_errors.h"

namespace loom {
namespace {

using testing::error_of;

TEST(ParseInt, AcceptsWholeDecimalIntegersInRange) {
  EXPECT_EQ(parse_int("42", "--x"), 42);
  EXPECT_EQ(parse_int("+7", "--x"), 7);
  EXPECT_EQ(parse_int("-3", "--x", -5, 5), -3);
  EXPECT_EQ(parse_int("9223372036854775807", "--x"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parse_int("-9223372036854775808", "--x"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(parse_int("1", "--x", 1, 1), 1);
}

TEST(ParseInt, RejectsOverflowInsteadOfSaturating) {
  const std::string m = error_of<ValueError>(
      [] { parse_int("99999999999999999999999", "[loom train] --epochs", 1, 1000000); });
  EXPECT_EQ(m,
            "[loom train] --epochs must be an integer from 1 to 1000000 but got "
            "'99999999999999999999999' "
            "(too large for a 64-bit integer)");
  EXPECT_CONTAINS(error_of<ValueError>([] { parse_int("-99999999999999999999999", "--x"); }),
                  "too large");
}

TEST(ParseInt, RejectsValuesOutsideTheRangeNamingIt) {
  EXPECT_EQ(
      error_of<ValueError>([] { parse_int("2147483648", "[loom train] --threads", 1, 1024); }),
      "[loom train] --threads must be an integer from 1 to 1024 but got '2147483648'");
  EXPECT_EQ(error_of<ValueError>([] { parse_int("0", "--threads", 1); }),
            "--threads must be an integer at least 1 but got '0'");
  EXPECT_EQ(error_of<ValueError>([] { parse_int("-1", "--n", 0); }),
            "--n must be an integer at least 0 but got '-1'");
  EXPECT_EQ(
      error_of<ValueError>([] { parse_int("9", "--n", std::numeric_limits<int64_t>::min(), 8); }),
      "--n must be an integer at most 8 but got '9'");
}

TEST(ParseInt, RejectsTextThatIsNotAnInteger) {
  for (const char* bad :
       {"", "abc", "1.5", "1e3", " 1", "1 ", "0x10", "--1", "+", "-", "1k", "+-1"}) {
    EXPECT_CONTAINS(error_of<ValueError>([&] { parse_int(bad, "--n"); }),
                    "--n expects an integer (any integer) but got '")
        << "text '" << bad << "'";
  }
  // Control characters are not echoed raw, and hostile lengths are cut.
  const std::string m =
      error_of<ValueError>([] { parse_int(std::string(200, '7') + "\n", "--n"); });
  EXPECT_LT(m.size(), 140u);
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(ParseDouble, AcceptsFiniteDecimalNumbers) {
  EXPECT_DOUBLE_EQ(parse_double("0.001", "--lr"), 1e-3);
  EXPECT_DOUBLE_EQ(parse_double("1e-3", "--lr"), 1e-3);
  EXPECT_DOUBLE_EQ(parse_double(".5", "--lr"), 0.5);
  EXPECT_DOUBLE_EQ(parse_double("-2.5E2", "--x"), -250.0);
  EXPECT_DOUBLE_EQ(parse_double("3", "--x", 0, 3), 3.0);
}

TEST(ParseDouble, RejectsWhatStodAcceptedOrMisreported) {
  // std::stod threw "stod" for these; strtod read "nan", "inf", " 1" and hex floats as numbers.
  for (const char* bad : {"abc", "", "nan", "NaN", "inf", "-inf", "infinity", " 1", "1 ", "0x1p3",
                          "1,5", "1e", "e5"}) {
    EXPECT_CONTAINS(error_of<ValueError>([&] { parse_double(bad, "[loom train] --lr", 0, 10); }),
                    "[loom train] --lr expects a number (from 0 to 10) but got '")
        << "text '" << bad << "'";
  }
  EXPECT_EQ(error_of<ValueError>([] { parse_double("1e400", "--lr", 0); }),
            "--lr must be a number at least 0 but got '1e400' (too large to represent)");
  EXPECT_EQ(error_of<ValueError>([] { parse_double("1e-400", "--lr", 0); }),
            "--lr must be a number at least 0 but got '1e-400' (too small to represent: it would "
            "read as 0)");
  EXPECT_EQ(error_of<ValueError>([] { parse_double("-0.1", "--lr", 0, 10); }),
            "--lr must be a number from 0 to 10 but got '-0.1'");
}

TEST(ParseBool, AcceptsTheUsualSpellingsOnly) {
  for (const char* t : {"1", "true", "TRUE", "yes", "On"}) EXPECT_TRUE(parse_bool(t, "X")) << t;
  for (const char* f : {"0", "false", "No", "off"}) EXPECT_FALSE(parse_bool(f, "X")) << f;
  EXPECT_CONTAINS(error_of<ValueError>([] { parse_bool("2", "LOOM_X"); }),
                  "LOOM_X expects a boolean");
}

}  // namespace
}  // namespace loom
