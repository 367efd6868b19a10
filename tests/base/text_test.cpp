// Text for people and documents (loom/text.h): byte counts in binary units and XML escaping.
#include <gtest/gtest.h>

#include "loom/text.h"

namespace loom {
namespace {

TEST(FormatBytes, WholeMultiplesAreExactAndOthersHaveFourDigits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1001), "1001 B");
  EXPECT_EQ(format_bytes(1024), "1 KiB");
  EXPECT_EQ(format_bytes(64 << 10), "64 KiB");
  EXPECT_EQ(format_bytes(3 << 20), "3 MiB");
  EXPECT_EQ(format_bytes(1.5 * (1 << 20)), "1.5 MiB");
  EXPECT_EQ(format_bytes(33554), "32.77 KiB");
  EXPECT_EQ(format_bytes(static_cast<double>(int64_t{5} << 40)), "5 TiB");
  EXPECT_EQ(format_bytes(-2048), "-2 KiB");
  EXPECT_EQ(format_bytes(0.5), "0.5 B");
}

TEST(XmlEscape, EveryMarkupCharacter) {
  EXPECT_EQ(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  EXPECT_EQ(xml_escape("plain"), "plain");
  EXPECT_EQ(xml_escape(""), "");
}

}  // namespace
}  // namespace loom
