#include "netstack/base/token_bucket.h"

#include "gtest/gtest.h"

namespace netstack {
namespace {

const Instant kT0 = absl::UnixEpoch() + absl::Hours(1);

int Takes(TokenBucket& b, Instant now, int tries) {
  int n = 0;
  for (int i = 0; i < tries; ++i) n += b.Take(now);
  return n;
}

TEST(TokenBucketTest, StartsFullThenRefillsAtTheRate) {
  TokenBucket b(/*rate=*/100, /*burst=*/10);
  EXPECT_EQ(Takes(b, kT0, 50), 10);
  EXPECT_EQ(Takes(b, kT0 + absl::Milliseconds(50), 50), 5);
  // Saving up stops at the burst.
  EXPECT_EQ(Takes(b, kT0 + absl::Seconds(10), 50), 10);
}

TEST(TokenBucketTest, ClockSteppingBackGivesNothing) {
  TokenBucket b(100, 1);
  EXPECT_TRUE(b.Take(kT0));
  EXPECT_FALSE(b.Take(kT0 - absl::Seconds(5)));
  // ... and does not move the refill point back either.
  EXPECT_FALSE(b.Take(kT0 + absl::Milliseconds(5)));
  EXPECT_TRUE(b.Take(kT0 + absl::Milliseconds(10)));
}

}  // namespace
}  // namespace netstack
