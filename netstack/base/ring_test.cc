#include "netstack/base/ring.h"

#include <deque>
#include <memory>
#include <random>

#include "gtest/gtest.h"

namespace netstack {
namespace {

TEST(RingTest, BehavesLikeADequeUnderRandomOperations) {
  Ring<int> ring;
  std::deque<int> ref;
  std::mt19937 rng(7);
  for (int step = 0; step < 100000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    if (op < 5) {
      ring.push_back(step);
      ref.push_back(step);
    } else if (op < 8 && !ref.empty()) {
      ring.pop_front();
      ref.pop_front();
    } else if (op == 8 && !ref.empty()) {
      ring.pop_back();
      ref.pop_back();
    } else {
      const size_t at = ref.empty() ? 0 : rng() % (ref.size() + 1);
      ring.insert(at, -step);
      ref.insert(ref.begin() + static_cast<ptrdiff_t>(at), -step);
    }
    ASSERT_EQ(ring.size(), ref.size());
    if (!ref.empty()) {
      ASSERT_EQ(ring.front(), ref.front());
      ASSERT_EQ(ring.back(), ref.back());
      const size_t i = rng() % ref.size();
      ASSERT_EQ(ring[i], ref[i]);
    }
  }
}

TEST(RingTest, DestroysElementsAndReusesStorage) {
  auto counter = std::make_shared<int>(0);
  {
    Ring<std::shared_ptr<int>> ring;
    for (int i = 0; i < 100; ++i) ring.push_back(counter);
    EXPECT_EQ(counter.use_count(), 101);
    const size_t cap = ring.capacity();
    for (int round = 0; round < 1000; ++round) {
      ring.pop_front();
      ring.push_back(counter);
    }
    EXPECT_EQ(ring.capacity(), cap);  // steady state: no growth
    for (int i = 0; i < 50; ++i) ring.pop_front();
    EXPECT_EQ(counter.use_count(), 51);
  }
  EXPECT_EQ(counter.use_count(), 1);
}

TEST(RingTest, ShrinkToFitFreesOnlyWhenEmpty) {
  Ring<int> ring;
  ring.push_back(1);
  ring.shrink_to_fit();
  EXPECT_GT(ring.capacity(), 0u);
  ring.pop_front();
  ring.shrink_to_fit();
  EXPECT_EQ(ring.capacity(), 0u);
  ring.push_back(2);
  EXPECT_EQ(ring.front(), 2);
}

}  // namespace
}  // namespace netstack
