#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "loom/error.h"
#include "loom/json.h"

namespace loom {
namespace {

TEST(Json, ParseDumpRoundTripKeepsTypesOrderAndExactIntegers) {
  const char* text = R"( {"z": null, "b": true, "f": false, "big": 9007199254740993,
      "min": -9223372036854775808, "max": 9223372036854775807, "huge": 18446744073709551616,
      "pi": 3.141592653589793, "tiny": 5e-324, "neg": -0.5, "exp": 1E+3,
      "s": "tab\there \"q\" \\ \/ \u00e9 \ud83d\ude00", "nested": {"a": [1, [2, {}], []]},
      "nan": NaN, "inf": -Infinity} )";
  Json j = Json::parse(text, "doc");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.at("big").as_int(), 9007199254740993);  // not representable as a double
  EXPECT_EQ(j.at("min").as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(j.at("max").as_int(), std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(j.at("huge").is_int());
  EXPECT_DOUBLE_EQ(j.at("huge").as_double(), 18446744073709551616.0);
  EXPECT_EQ(j.at("tiny").as_double(), 5e-324);
  EXPECT_EQ(j.at("exp").as_double(), 1000.0);
  EXPECT_TRUE(j.at("exp").is_number() && !j.at("exp").is_int());
  EXPECT_EQ(j.at("s").as_string(), "tab\there \"q\" \\ / \xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_TRUE(std::isnan(j.at("nan").as_double()));
  EXPECT_EQ(j.at("inf").as_double(), -HUGE_VAL);
  EXPECT_EQ(j.at("nested").at("a").at(size_t{1}).at(size_t{0}).as_int(), 2);
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.as_object()) keys.push_back(k);
  EXPECT_EQ(keys.front(), "z");
  EXPECT_EQ(keys.back(), "inf");
  for (int indent : {-1, 0, 2}) {
    std::string dumped = j.dump(indent);
    EXPECT_EQ(Json::parse(dumped, "dump"), j) << dumped;
    EXPECT_EQ(Json::parse(dumped, "dump").dump(indent), dumped);
  }
}

TEST(Json, DumpFormatsLikePython) {
  Json j =
      Json::object({{"b", 1}, {"a", Json::array({1.0, 0.1, "x\n\x01"})}, {"e", Json::object()}});
  EXPECT_EQ(j.dump(), R"({"b":1,"a":[1.0,0.1,"x\n\u0001"],"e":{}})");
  EXPECT_EQ(
      j.dump(2),
      "{\n  \"b\": 1,\n  \"a\": [\n    1.0,\n    0.1,\n    \"x\\n\\u0001\"\n  ],\n  \"e\": {}\n}");
  EXPECT_EQ(Json(std::numeric_limits<double>::quiet_NaN()).dump(), "NaN");
  EXPECT_EQ(Json(HUGE_VAL).dump(), "Infinity");
  // Doubles print as Python's repr does.
  const std::vector<std::pair<double, const char*>> doubles = {
      {1e300, "1e+300"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {0.0001, "0.0001"},
      {1e-05, "1e-05"},
      {-0.0, "-0.0"},
      {123.456, "123.456"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {0.30000000000000004, "0.30000000000000004"}};
  for (const auto& [d, text] : doubles) EXPECT_EQ(Json(d).dump(), text);
  EXPECT_EQ(Json(uint64_t{1} << 63).dump(), "9.223372036854776e+18");
  EXPECT_EQ(Json(-7).dump(), "-7");
  EXPECT_EQ(Json().dump(), "null");
}

TEST(Json, BuildAndAccess) {
  Json state;
  state.set("step", 10).set("lr", 0.001).set("name", "adamw");
  state.set("step", 11);  // replaces in place
  Json moments;
  moments.push_back(1).push_back("two");
  state.set("moments", moments);
  EXPECT_EQ(state.size(), 4u);
  EXPECT_EQ(state.as_object().front().first, "step");
  EXPECT_EQ(state.at("step").as_int(), 11);
  EXPECT_EQ(state.at("moments").size(), 2u);
  EXPECT_TRUE(state.contains("lr"));
  EXPECT_EQ(state.find("nope"), nullptr);
  EXPECT_EQ(Json(3.0).as_int(), 3);
  Json copy = state;
  copy.at("moments").as_array().clear();
  EXPECT_EQ(state.at("moments").size(), 2u);  // deep copy

  try {
    state.at("betas");
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("missing key \"betas\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("step, lr, name, moments"), std::string::npos) << e.what();
  }
  EXPECT_THROW(state.at("name").as_int(), DataError);
  EXPECT_THROW(Json(3.5).as_int(), DataError);
  EXPECT_THROW(Json(1e30).as_int(), DataError);
  EXPECT_THROW(state.at("step").as_string(), DataError);
  EXPECT_THROW(state.at("moments").at(size_t{2}), DataError);
  EXPECT_THROW(Json(1).as_object(), DataError);
}

TEST(Json, ErrorsNameTheSourceAndByteOffset) {
  struct Case {
    std::string text;
    size_t offset;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"", 0, "end of input"},
      {"{\"a\":1,}", 7, "string key"},
      {"[1 2]", 3, "',' or ']'"},
      {"{\"a\" 1}", 5, "':'"},
      {"{\"a\":1}x", 7, "after the JSON value"},
      {"  \"abc", 2, "unterminated string"},
      {"tru", 0, "expected a value"},
      {"[01]", 2, "',' or ']'"},
      {"[1.]", 3, "digit after '.'"},
      {"[-]", 2, "a digit"},
      {"[1e]", 3, "exponent"},
      {"[\"\xff\"]", 2, "invalid UTF-8"},
      {"[\"\xc0\xaf\"]", 2, "invalid UTF-8"},  // overlong '/'
      {"[\"a\tb\"]", 3, "control character"},
      {"[\"\\x\"]", 3, "escape"},
      {"[\"\\udc00\"]", 2, "low surrogate"},
      {"[\"\\ud800x\"]", 2, "high surrogate"},
      {"[\"\\u12g4\"]", 6, "hex digits"},
      {"{\"a\":1,\"b\":2,\"a\":3}", 13, "duplicate key \"a\""},
      {"[1e999]", 1, "out of the range"},
      {std::string(300, '['), 256, "nesting deeper"},
  };
  for (const Case& c : cases) {
    try {
      Json::parse(c.text, "opt.json");
      ADD_FAILURE() << "parsed: " << c.text;
    } catch (const DataError& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[json] opt.json: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.reason), std::string::npos) << c.text << " -> " << msg;
      EXPECT_NE(msg.find("at byte offset " + std::to_string(c.offset)), std::string::npos)
          << c.text << " -> " << msg;
    }
  }
  // Duplicate detection in large objects goes through the hash set.
  std::string big = "{";
  for (int i = 0; i < 40; ++i) big += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  EXPECT_EQ(Json::parse(big + "\"last\":0}", "big").size(), 41u);
  EXPECT_THROW(Json::parse(big + "\"k3\":0}", "big"), DataError);
}

}  // namespace
}  // namespace loom
