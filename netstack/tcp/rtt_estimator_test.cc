#include "netstack/tcp/rtt_estimator.h"

#include "gtest/gtest.h"

namespace netstack::tcp {
namespace {

using absl::Milliseconds;
using absl::Seconds;

const Instant kT0 = absl::UnixEpoch() + Seconds(1000);

TEST(RttEstimatorTest, InitialRtoBeforeAnySample) {
  RttEstimator e;
  EXPECT_FALSE(e.has_sample());
  EXPECT_EQ(e.Rto(), Seconds(1));  // RFC 6298 section 2.1
  EXPECT_EQ(e.min_rtt(), absl::InfiniteDuration());
}

TEST(RttEstimatorTest, FirstSampleSetsSrttAndHalfVariance) {
  RttEstimator e;
  e.Sample(Milliseconds(100), kT0);
  EXPECT_TRUE(e.has_sample());
  EXPECT_EQ(e.srtt(), Milliseconds(100));
  EXPECT_EQ(e.rttvar(), Milliseconds(50));
  // 100 + 4 * 50.
  EXPECT_EQ(e.Rto(), Milliseconds(300));
  EXPECT_EQ(e.latest_rtt(), Milliseconds(100));
  EXPECT_EQ(e.min_rtt(), Milliseconds(100));
}

TEST(RttEstimatorTest, LaterSamplesFollowSection23) {
  RttEstimator e;
  e.Sample(Milliseconds(100), kT0);
  e.Sample(Milliseconds(200), kT0 + Seconds(1));
  // RTTVAR = 3/4 * 50 + 1/4 * |100 - 200| = 62.5 (from the old SRTT);
  // SRTT = 7/8 * 100 + 1/8 * 200 = 112.5.
  EXPECT_EQ(e.rttvar(), absl::Microseconds(62500));
  EXPECT_EQ(e.srtt(), absl::Microseconds(112500));
  EXPECT_EQ(e.Rto(), absl::Microseconds(112500 + 250000));
  e.Sample(Milliseconds(50), kT0 + Seconds(2));
  // RTTVAR = 3/4 * 62.5 + 1/4 * 62.5 = 62.5; SRTT = 98.4375 + 6.25.
  EXPECT_EQ(e.rttvar(), absl::Microseconds(62500));
  EXPECT_EQ(e.srtt(), absl::Nanoseconds(104687500));
  EXPECT_EQ(e.Rto(), absl::Nanoseconds(104687500 + 250000000));
  EXPECT_EQ(e.latest_rtt(), Milliseconds(50));
  EXPECT_EQ(e.min_rtt(), Milliseconds(50));
}

TEST(RttEstimatorTest, RtoIsClampedToMinimum) {
  RttEstimator e;
  e.Sample(Milliseconds(1), kT0);
  // 1 + max(1, 4 * 0.5) = 3 ms, raised to min_rto.
  EXPECT_EQ(e.Rto(), Milliseconds(200));
}

TEST(RttEstimatorTest, GranularityBoundsTheVarianceTerm) {
  RttOptions o;
  o.min_rto = absl::ZeroDuration();
  o.granularity = Milliseconds(10);
  RttEstimator e(o);
  // Identical samples: SRTT stays 100 ms, RTTVAR = 50 ms * (3/4)^(n-1).
  for (int i = 0; i < 11; ++i) e.Sample(Milliseconds(100), kT0);
  EXPECT_EQ(e.srtt(), Milliseconds(100));
  EXPECT_GT(e.Rto(), Milliseconds(110));  // 4 * 50 * 0.75^10 = 11.3 ms
  e.Sample(Milliseconds(100), kT0);
  EXPECT_EQ(e.Rto(), Milliseconds(110));  // 4 * 50 * 0.75^11 = 8.4 ms < G
}

TEST(RttEstimatorTest, RtoIsClampedToMaximum) {
  RttOptions o;
  o.max_rto = Seconds(60);
  RttEstimator e(o);
  e.Sample(Seconds(30), kT0);  // 30 + 4 * 15 = 90 s
  EXPECT_EQ(e.Rto(), Seconds(60));
}

TEST(RttEstimatorTest, BackoffDoublesUpToMaximum) {
  RttEstimator e;
  e.Backoff();
  EXPECT_EQ(e.Rto(), Seconds(2));
  e.Backoff();
  EXPECT_EQ(e.Rto(), Seconds(4));
  for (int i = 0; i < 5; ++i) e.Backoff();
  EXPECT_EQ(e.backoff(), 7u);
  EXPECT_EQ(e.Rto(), Seconds(120));  // 128 s capped
  for (int i = 0; i < 1000; ++i) e.Backoff();
  EXPECT_EQ(e.backoff(), 1007u);  // still counted, for giving up after N
  EXPECT_EQ(e.Rto(), Seconds(120));
}

TEST(RttEstimatorTest, SampleResetsBackoff) {
  RttEstimator e;
  e.Backoff();
  e.Backoff();
  e.Sample(Milliseconds(100), kT0);
  EXPECT_EQ(e.backoff(), 0u);
  EXPECT_EQ(e.Rto(), Milliseconds(300));
  e.Backoff();
  EXPECT_EQ(e.Rto(), Milliseconds(600));
  e.ResetBackoff();
  EXPECT_EQ(e.Rto(), Milliseconds(300));
}

TEST(RttEstimatorTest, NegativeSampleIsIgnored) {
  RttEstimator e;
  e.Sample(Milliseconds(100), kT0);
  e.Backoff();
  e.Sample(Milliseconds(-5), kT0);
  EXPECT_EQ(e.srtt(), Milliseconds(100));
  EXPECT_EQ(e.min_rtt(), Milliseconds(100));
  EXPECT_EQ(e.backoff(), 1u);
}

TEST(RttEstimatorTest, MinRttKeepsTheWindowsMinimum) {
  RttEstimator e;  // 300 s window
  e.Sample(Milliseconds(100), kT0);
  e.Sample(Milliseconds(50), kT0 + Seconds(10));
  EXPECT_EQ(e.min_rtt(), Milliseconds(50));
  e.Sample(Milliseconds(80), kT0 + Seconds(100));
  e.Sample(Milliseconds(90), kT0 + Seconds(200));
  EXPECT_EQ(e.min_rtt(), Milliseconds(50));
  e.Sample(Milliseconds(120), kT0 + Seconds(310));  // 50 ms is 300 s old
  EXPECT_EQ(e.min_rtt(), Milliseconds(50));
  // Past the window the minimum steps up to the best later sample (80 ms,
  // still inside it), not to the latest one.
  e.Sample(Milliseconds(120), kT0 + Seconds(311));
  EXPECT_EQ(e.min_rtt(), Milliseconds(80));
  // A new low takes over at once.
  e.Sample(Milliseconds(30), kT0 + Seconds(312));
  EXPECT_EQ(e.min_rtt(), Milliseconds(30));
}

TEST(RttEstimatorTest, MinRttRestartsWhenEverythingAgedOut) {
  RttOptions o;
  o.min_rtt_window = Seconds(10);
  RttEstimator e(o);
  e.Sample(Milliseconds(50), kT0);
  e.Sample(Milliseconds(70), kT0 + Seconds(5));
  EXPECT_EQ(e.min_rtt(), Milliseconds(50));
  e.Sample(Milliseconds(200), kT0 + Seconds(30));
  EXPECT_EQ(e.min_rtt(), Milliseconds(200));
}

}  // namespace
}  // namespace netstack::tcp
