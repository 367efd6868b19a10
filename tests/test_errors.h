// Test helpers shared by every test folder: the message of an expected exception, and a check that
// a message contains a fragment.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace loom::testing {

// The message of the E that f() throws; "no exception" or "wrong exception type: ..." otherwise, so
// that a check on the message fails with a readable reason.
template <class E, class F>
std::string error_of(const F& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

}  // namespace loom::testing

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "message: " << (haystack)
