// detail::SmallVector: inline room, spilling to the heap, copies and moves keep every element.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "loom/detail/small_vector.h"

namespace loom {
namespace {

using detail::SmallVector;

TEST(SmallVector, GrowsPastItsInlineRoomKeepingElements) {
  SmallVector<std::string, 2> v;
  EXPECT_EQ(v.capacity(), 2u);
  for (int i = 0; i < 20; ++i) v.push_back(std::string(30, static_cast<char>('a' + i)));
  ASSERT_EQ(v.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(v[i], std::string(30, static_cast<char>('a' + i)));
  v.resize(3);
  EXPECT_EQ(v.size(), 3u);
  EXPECT_EQ(v.back(), std::string(30, 'c'));
  v.clear();
  EXPECT_TRUE(v.empty());
}

TEST(SmallVector, EmplacingAnElementOfItselfWhileGrowing) {
  SmallVector<std::string, 1> v;
  v.push_back(std::string(40, 'x'));
  v.push_back(v[0]);  // grows: the argument refers to the old storage
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[1], std::string(40, 'x'));
}

TEST(SmallVector, CopiesAndMovesInlineAndOnTheHeap) {
  for (int n : {1, 5}) {
    SmallVector<std::shared_ptr<int>, 2> a;
    for (int i = 0; i < n; ++i) a.push_back(std::make_shared<int>(i));
    SmallVector<std::shared_ptr<int>, 2> b = a;
    ASSERT_EQ(b.size(), static_cast<size_t>(n));
    EXPECT_EQ(a[0].use_count(), 2);
    SmallVector<std::shared_ptr<int>, 2> c = std::move(b);
    EXPECT_TRUE(b.empty());
    ASSERT_EQ(c.size(), static_cast<size_t>(n));
    EXPECT_EQ(*c[n - 1], n - 1);
    b = std::move(c);
    EXPECT_EQ(b.size(), static_cast<size_t>(n));
    c = b;
    EXPECT_EQ(a[0].use_count(), 3);
    b.clear();
    c = SmallVector<std::shared_ptr<int>, 2>();
    EXPECT_EQ(a[0].use_count(), 1);  // every copy released
  }
}

}  // namespace
}  // namespace loom
