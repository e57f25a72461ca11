#include "netstack/tcp/congestion_control.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/tcp/cubic.h"
#include "netstack/tcp/reno.h"

namespace netstack::tcp {
namespace {

using absl::Milliseconds;
using absl::Seconds;

const Instant kT0 = absl::UnixEpoch() + Seconds(1'000'000);
constexpr uint32_t kUnlimited = UINT32_MAX / 2;  // the initial ssthresh

AckEvent Ack(Instant now, uint32_t delivered, uint32_t in_flight,
             Duration rtt = Milliseconds(100)) {
  AckEvent e;
  e.now = now;
  e.delivered_packets = delivered;
  e.prior_in_flight = in_flight;
  e.rtt = rtt;
  e.min_rtt = rtt;
  return e;
}

// One round trip of ACK clocking: the cwnd at its start is acknowledged
// `per_ack` packets at a time, the ACKs spread evenly over `rtt`.
void AckOneWindow(CongestionControl& cc, Instant& now,
                  Duration rtt = Milliseconds(100), uint32_t per_ack = 1) {
  const uint32_t window = cc.cwnd();
  const uint32_t acks = (window + per_ack - 1) / per_ack;
  for (uint32_t i = 0; i < acks; ++i) {
    now += rtt / acks;
    cc.OnAck(Ack(now, per_ack, window - i * per_ack, rtt));
  }
}

// --- Names and the factory ---------------------------------------------------

TEST(CongestionControlTest, NamesRoundTrip) {
  EXPECT_EQ(AlgorithmName(CongestionAlgorithm::kNewReno), "reno");
  EXPECT_EQ(AlgorithmName(CongestionAlgorithm::kCubic), "cubic");
  EXPECT_EQ(ParseAlgorithm("reno"), CongestionAlgorithm::kNewReno);
  EXPECT_EQ(ParseAlgorithm("newreno"), CongestionAlgorithm::kNewReno);
  EXPECT_EQ(ParseAlgorithm("NewReno"), CongestionAlgorithm::kNewReno);
  EXPECT_EQ(ParseAlgorithm("cubic"), CongestionAlgorithm::kCubic);
  EXPECT_EQ(ParseAlgorithm("bbr"), std::nullopt);
  EXPECT_EQ(ParseAlgorithm(""), std::nullopt);
  for (auto a : {CongestionAlgorithm::kNewReno, CongestionAlgorithm::kCubic}) {
    EXPECT_EQ(ParseAlgorithm(AlgorithmName(a)), a);
  }
}

TEST(CongestionControlTest, FactoryMakesTheAlgorithmWithInitialWindow) {
  auto reno = MakeCongestionControl(CongestionAlgorithm::kNewReno);
  EXPECT_EQ(reno->algorithm(), CongestionAlgorithm::kNewReno);
  EXPECT_EQ(reno->cwnd(), 10u);  // RFC 6928
  EXPECT_EQ(reno->ssthresh(), kUnlimited);
  EXPECT_TRUE(reno->InSlowStart());
  auto cubic = MakeCongestionControl(CongestionAlgorithm::kCubic, 4);
  EXPECT_EQ(cubic->algorithm(), CongestionAlgorithm::kCubic);
  EXPECT_EQ(cubic->cwnd(), 4u);
  EXPECT_EQ(MakeCongestionControl(CongestionAlgorithm::kCubic, 0)->cwnd(), 1u);
}

// --- Behaviour both algorithms share
// ------------------------------------------

class BothAlgorithms : public testing::TestWithParam<CongestionAlgorithm> {
 protected:
  std::unique_ptr<CongestionControl> cc_ = MakeCongestionControl(GetParam());
  Instant now_ = kT0;
};

INSTANTIATE_TEST_SUITE_P(All, BothAlgorithms,
                         testing::Values(CongestionAlgorithm::kNewReno,
                                         CongestionAlgorithm::kCubic),
                         [](const auto& info) {
                           return std::string(AlgorithmName(info.param));
                         });

TEST_P(BothAlgorithms, SlowStartDoublesEveryRoundTrip) {
  for (uint32_t want : {20u, 40u, 80u, 160u}) {
    AckOneWindow(*cc_, now_);
    EXPECT_EQ(cc_->cwnd(), want);
    EXPECT_TRUE(cc_->InSlowStart());
  }
}

TEST_P(BothAlgorithms, SlowStartDoublesWithDelayedAcks) {
  // One ACK per two packets: +2 each, so still doubling.
  AckOneWindow(*cc_, now_, Milliseconds(100), 2);
  EXPECT_EQ(cc_->cwnd(), 20u);
  AckOneWindow(*cc_, now_, Milliseconds(100), 2);
  EXPECT_EQ(cc_->cwnd(), 40u);
}

TEST_P(BothAlgorithms, StretchAckGrowsSlowStartByWhatItCovers) {
  // A GRO receiver's single ACK for the whole window: slow start counts
  // all of it (Linux tcp_slow_start), so cwnd still doubles per RTT.
  cc_->OnAck(Ack(now_, 10, 10));
  EXPECT_EQ(cc_->cwnd(), 20u);
  cc_->OnAck(Ack(now_, 3, 20));
  EXPECT_EQ(cc_->cwnd(), 23u);
  cc_->OnAck(Ack(now_, 0, 23));
  EXPECT_EQ(cc_->cwnd(), 23u);
}

TEST_P(BothAlgorithms, SlowStartStopsAtSsthreshOnAStretchAck) {
  cc_->OnRetransmitTimeout(now_, 40);  // ssthresh 20 (reno) / 28 (cubic)
  const uint32_t ssthresh = cc_->ssthresh();
  // 100 packets: slow start takes cwnd to ssthresh, and only what is left
  // over counts in congestion avoidance (a few packets, not 100).
  cc_->OnAck(Ack(now_, 100, 1));
  EXPECT_FALSE(cc_->InSlowStart());
  EXPECT_GE(cc_->cwnd(), ssthresh);
  EXPECT_LE(cc_->cwnd(), ssthresh + 100 / ssthresh + 1);
}

TEST_P(BothAlgorithms, RetransmitTimeoutCollapsesToOnePacket) {
  AckOneWindow(*cc_, now_);
  AckOneWindow(*cc_, now_);
  ASSERT_EQ(cc_->cwnd(), 40u);
  cc_->OnRetransmitTimeout(now_, 40);
  EXPECT_EQ(cc_->cwnd(), 1u);
  const uint32_t ssthresh =
      GetParam() == CongestionAlgorithm::kNewReno ? 20u : 28u;  // 1/2, 0.7
  EXPECT_EQ(cc_->ssthresh(), ssthresh);
  // Slow start again, up to exactly ssthresh.
  for (uint32_t want : {2u, 4u, 8u, 16u}) {
    AckOneWindow(*cc_, now_);
    EXPECT_EQ(cc_->cwnd(), want);
  }
  AckOneWindow(*cc_, now_);
  EXPECT_GE(cc_->cwnd(), ssthresh);
  EXPECT_LE(cc_->cwnd(), ssthresh + 1);
  EXPECT_FALSE(cc_->InSlowStart());
}

TEST_P(BothAlgorithms, SsthreshIsAtLeastTwoPackets) {
  cc_->OnRetransmitTimeout(now_, 1);
  EXPECT_EQ(cc_->ssthresh(), 2u);
  EXPECT_EQ(cc_->cwnd(), 1u);
  cc_->OnCongestionEvent(now_, 0);
  EXPECT_EQ(cc_->ssthresh(), 2u);
  EXPECT_EQ(cc_->cwnd(), 2u);
}

TEST_P(BothAlgorithms, NoGrowthInRecoveryOrWhenApplicationLimited) {
  cc_->OnCongestionEvent(now_, 10);
  const uint32_t cwnd = cc_->cwnd();
  for (int i = 0; i < 50; ++i) {
    now_ += Milliseconds(10);
    AckEvent e = Ack(now_, 1, cwnd);
    e.in_recovery = true;
    cc_->OnAck(e);
  }
  EXPECT_EQ(cc_->cwnd(), cwnd);
  cc_->OnRecoveryEnd(now_);
  EXPECT_EQ(cc_->cwnd(), cc_->ssthresh());
  for (int i = 0; i < 50; ++i) {
    now_ += Milliseconds(10);
    AckEvent e = Ack(now_, 1, 1);
    e.app_limited = true;
    cc_->OnAck(e);
  }
  EXPECT_EQ(cc_->cwnd(), cwnd);
  // Slow start too.
  auto fresh = MakeCongestionControl(GetParam());
  AckEvent e = Ack(now_, 5, 2);
  e.app_limited = true;
  fresh->OnAck(e);
  EXPECT_EQ(fresh->cwnd(), 10u);
}

TEST_P(BothAlgorithms, IdleRestartFallsBackToTheInitialWindow) {
  AckOneWindow(*cc_, now_);
  AckOneWindow(*cc_, now_);
  ASSERT_EQ(cc_->cwnd(), 40u);
  cc_->OnIdleRestart(now_);
  EXPECT_EQ(cc_->cwnd(), 10u);
  EXPECT_EQ(cc_->ssthresh(), kUnlimited);
  // With a finite ssthresh it keeps 3/4 of the old cwnd.
  cc_->OnCongestionEvent(now_, 20);
  cc_->OnRecoveryEnd(now_);
  ASSERT_LT(cc_->ssthresh(), 20u);
  for (int i = 0; i < 60 && cc_->cwnd() < 40; ++i) AckOneWindow(*cc_, now_);
  const uint32_t cwnd = cc_->cwnd();
  ASSERT_GE(cwnd, 40u);
  cc_->OnIdleRestart(now_);
  EXPECT_EQ(cc_->cwnd(), 10u);
  EXPECT_EQ(cc_->ssthresh(), cwnd * 3 / 4);
  // An idle restart below the initial window keeps the smaller one.
  cc_->OnRetransmitTimeout(now_, 10);
  cc_->OnIdleRestart(now_);
  EXPECT_EQ(cc_->cwnd(), 1u);
}

TEST_P(BothAlgorithms, UndoWithoutAnEventDoesNothing) {
  AckOneWindow(*cc_, now_);
  cc_->Undo();
  EXPECT_EQ(cc_->cwnd(), 20u);
  EXPECT_EQ(cc_->ssthresh(), kUnlimited);
}

TEST_P(BothAlgorithms, UndoOfATimeout) {
  AckOneWindow(*cc_, now_);
  cc_->OnRetransmitTimeout(now_, 20);
  ASSERT_EQ(cc_->cwnd(), 1u);
  cc_->Undo();
  EXPECT_EQ(cc_->cwnd(), 20u);
  EXPECT_EQ(cc_->ssthresh(), kUnlimited);
}

// --- NewReno ----------------------------------------------------------------

TEST(NewRenoTest, CongestionEventHalvesTheFlight) {
  NewReno reno(10);
  reno.OnCongestionEvent(kT0, 40);
  EXPECT_EQ(reno.ssthresh(), 20u);
  EXPECT_EQ(reno.cwnd(), 20u);
  reno.OnRecoveryEnd(kT0);
  EXPECT_EQ(reno.cwnd(), 20u);
  reno.OnCongestionEvent(kT0, 41);
  EXPECT_EQ(reno.ssthresh(), 20u);
  reno.OnCongestionEvent(kT0, 5);
  EXPECT_EQ(reno.ssthresh(), 2u);
  EXPECT_EQ(reno.cwnd(), 2u);
}

TEST(NewRenoTest, CongestionAvoidanceAddsOnePacketPerWindow) {
  NewReno reno(40);
  Instant now = kT0;
  reno.OnCongestionEvent(now, 40);
  reno.OnRecoveryEnd(now);
  ASSERT_EQ(reno.cwnd(), 20u);
  ASSERT_FALSE(reno.InSlowStart());
  for (int i = 0; i < 19; ++i) reno.OnAck(Ack(now, 1, 20));
  EXPECT_EQ(reno.cwnd(), 20u);  // 19 of 20 delivered
  reno.OnAck(Ack(now, 1, 20));
  EXPECT_EQ(reno.cwnd(), 21u);
  // From here one packet per round trip, exactly.
  for (uint32_t want = 22; want <= 40; ++want) {
    AckOneWindow(reno, now);
    EXPECT_EQ(reno.cwnd(), want);
  }
  // Delayed ACKs do not slow it down (byte counting).
  for (uint32_t want = 41; want <= 45; ++want) {
    AckOneWindow(reno, now, Milliseconds(100), 2);
    EXPECT_EQ(reno.cwnd(), want);
  }
}

TEST(NewRenoTest, LeavingSlowStartCarriesTheRestIntoAvoidance) {
  NewReno reno(10);
  reno.OnRetransmitTimeout(kT0, 22);  // ssthresh 11
  reno.OnAck(Ack(kT0, 2, 1));
  reno.OnAck(Ack(kT0, 2, 1));
  reno.OnAck(Ack(kT0, 2, 1));
  reno.OnAck(Ack(kT0, 2, 1));
  reno.OnAck(Ack(kT0, 2, 1));
  EXPECT_EQ(reno.cwnd(), 11u);  // 1 + 2 * 5
  EXPECT_FALSE(reno.InSlowStart());
  // 11 more packets: one more cwnd in congestion avoidance.
  for (int i = 0; i < 10; ++i) reno.OnAck(Ack(kT0, 1, 11));
  EXPECT_EQ(reno.cwnd(), 11u);
  reno.OnAck(Ack(kT0, 1, 11));
  EXPECT_EQ(reno.cwnd(), 12u);
}

TEST(NewRenoTest, UndoRestoresTheStateBeforeTheEvent) {
  NewReno reno(10);
  Instant now = kT0;
  reno.OnCongestionEvent(now, 40);  // ssthresh 20
  reno.OnRecoveryEnd(now);
  for (int i = 0; i < 5; ++i) AckOneWindow(reno, now);
  ASSERT_EQ(reno.cwnd(), 25u);
  reno.OnCongestionEvent(now, 25);
  EXPECT_EQ(reno.cwnd(), 12u);
  EXPECT_EQ(reno.ssthresh(), 12u);
  reno.Undo();
  EXPECT_EQ(reno.cwnd(), 25u);
  EXPECT_EQ(reno.ssthresh(), 20u);
  // Recovery ending after an undo leaves cwnd alone; a second undo too.
  reno.OnRecoveryEnd(now);
  reno.Undo();
  EXPECT_EQ(reno.cwnd(), 25u);
  EXPECT_EQ(reno.ssthresh(), 20u);
}

// --- CUBIC ------------------------------------------------------------------

// Loss at `w_max` packets in flight, then recovery; returns the time.
Instant LoseAt(Cubic& cubic, uint32_t w_max, Instant now) {
  cubic.OnCongestionEvent(now, w_max);
  cubic.OnRecoveryEnd(now);
  return now;
}

TEST(CubicTest, LossReducesToBetaTimesWmax) {
  Cubic cubic(100);
  cubic.OnCongestionEvent(kT0, 100);
  EXPECT_EQ(cubic.cwnd(), 70u);
  EXPECT_EQ(cubic.ssthresh(), 70u);
  EXPECT_EQ(cubic.w_max(), 100.0);
  cubic.OnRecoveryEnd(kT0);
  EXPECT_EQ(cubic.cwnd(), 70u);
  EXPECT_FALSE(cubic.in_epoch());
}

TEST(CubicTest, KFollowsEquation2) {
  Cubic cubic(100);
  Instant now = LoseAt(cubic, 100, kT0);
  now += Milliseconds(100);
  cubic.OnAck(Ack(now, 1, 70));
  ASSERT_TRUE(cubic.in_epoch());
  EXPECT_EQ(cubic.epoch_start(), now);  // the first ACK after the event
  // K = cbrt((W_max - cwnd_epoch) / C) = cbrt(30 / 0.4) = cbrt(75).
  EXPECT_NEAR(cubic.k(), 4.2171633265, 1e-9);
  EXPECT_NEAR(cubic.WCubic(0), 70.0, 1e-9);
  EXPECT_NEAR(cubic.WCubic(cubic.k()), 100.0, 1e-9);
  EXPECT_NEAR(cubic.WCubic(cubic.k() + 1), 100.4, 1e-9);

  Cubic big(1000);
  now = LoseAt(big, 1000, now);
  big.OnAck(Ack(now, 1, 700));
  EXPECT_EQ(big.cwnd(), 700u);
  EXPECT_NEAR(big.k(), 9.0856029642, 1e-9);  // cbrt(750)
}

// Runs ACK-clocked round trips for `seconds` after a loss at `w_max` and
// records cwnd at the start of each, t counted from the epoch start.
struct Trace {
  std::vector<double> t;
  std::vector<uint32_t> cwnd;
};
Trace RunAfterLoss(Cubic& cubic, uint32_t w_max, Duration rtt, double seconds) {
  Instant now = LoseAt(cubic, w_max, kT0);
  Trace trace;
  const Instant end = now + absl::Seconds(seconds);
  Instant epoch = now;
  while (now < end) {
    trace.t.push_back(absl::ToDoubleSeconds(now - epoch));
    trace.cwnd.push_back(cubic.cwnd());
    AckOneWindow(cubic, now, rtt);
    // The epoch starts on the first ACK of the first round.
    if (trace.t.size() == 1) epoch = cubic.epoch_start();
  }
  return trace;
}

TEST(CubicTest, CwndFollowsTheCubicCurve) {
  Cubic cubic(1000);
  const Trace trace = RunAfterLoss(cubic, 1000, Milliseconds(100), 13.5);
  const double k = cubic.k();
  ASSERT_NEAR(k, 9.0856, 1e-4);
  bool checked_k = false;
  for (size_t i = 1; i < trace.t.size(); ++i) {
    // W_cubic(t) within one packet and 0.5%: per ACK cwnd closes the gap
    // to W_cubic(t + RTT) over the next RTT.
    const double want = cubic.WCubic(trace.t[i]);
    EXPECT_NEAR(trace.cwnd[i], want, 1 + want * 0.005) << "t = " << trace.t[i];
    if (std::abs(trace.t[i] - k) < 0.05) {
      EXPECT_NEAR(trace.cwnd[i], 1000.0, 1.0) << "at t = K";
      checked_k = true;
    }
  }
  EXPECT_TRUE(checked_k);
  EXPECT_GT(trace.t.back(), k + 4);
  // W_est stays far below: this is the cubic region throughout.
  EXPECT_LT(cubic.w_est(), 800);
}

TEST(CubicTest, ConcaveBeforeKConvexAfter) {
  Cubic cubic(1000);
  const Trace trace = RunAfterLoss(cubic, 1000, Milliseconds(100), 13.5);
  const double k = cubic.k();
  // Growth over each second: shrinking up to K, growing after it.
  auto cwnd_at = [&](double t) {
    for (size_t i = 0; i < trace.t.size(); ++i) {
      if (trace.t[i] >= t) return static_cast<double>(trace.cwnd[i]);
    }
    return 0.0;
  };
  std::vector<double> before, after;
  for (double t = 0; t + 1 <= k; t += 1) {
    before.push_back(cwnd_at(t + 1) - cwnd_at(t));
  }
  for (double t = k + 1; t + 1 <= k + 4; t += 1) {
    after.push_back(cwnd_at(t + 1) - cwnd_at(t));
  }
  ASSERT_GE(before.size(), 8u);
  ASSERT_EQ(after.size(), 3u);
  for (size_t i = 1; i < before.size(); ++i) {
    EXPECT_LT(before[i], before[i - 1]) << "second " << i;
  }
  for (size_t i = 1; i < after.size(); ++i) {
    EXPECT_GT(after[i], after[i - 1]) << "second " << i;
  }
  // The first second after the loss regains about C (K^3 - (K-1)^3) = 89
  // packets; exactly, what the curve gains between the sampled times.
  size_t one = 0;
  while (trace.t[one] < 1) ++one;
  EXPECT_NEAR(trace.cwnd[one] - trace.cwnd[0],
              cubic.WCubic(trace.t[one]) - cubic.WCubic(0), 2);
  EXPECT_NEAR(before[0], 0.4 * (std::pow(k, 3) - std::pow(k - 1, 3)), 10);
  // Around K it is nearly flat: C (1^3 - 0) = 0.4 packets per second.
  EXPECT_LE(cwnd_at(k + 0.5) - cwnd_at(k - 0.5), 2);
}

TEST(CubicTest, RenoFriendlyRegionDominatesAtShortRttAndSmallCwnd) {
  // W_max = 10 and a 1 ms RTT: K is 1.96 s, so for the first tens of
  // round trips the curve is still at about 7 packets while Reno's
  // estimate grows by alpha = 0.53 per RTT, and by 1 once past 10.
  Cubic cubic(10);
  Instant now = LoseAt(cubic, 10, kT0);
  ASSERT_EQ(cubic.cwnd(), 7u);
  const Duration rtt = Milliseconds(1);
  AckOneWindow(cubic, now, rtt);
  EXPECT_NEAR(cubic.w_est(), 7 + Cubic::kAlpha, 1e-9);
  EXPECT_EQ(cubic.cwnd(), 7u);
  for (int i = 0; i < 5; ++i) AckOneWindow(cubic, now, rtt);
  // 6 round trips at alpha: 7 + 6 * 0.53 = 10.2, less the slower per-ACK
  // steps once cwnd itself grows.
  EXPECT_NEAR(cubic.w_est(), 7 + 6 * Cubic::kAlpha, 0.2);
  EXPECT_EQ(cubic.cwnd(), static_cast<uint32_t>(cubic.w_est()));
  const uint32_t at_six = cubic.cwnd();
  for (int i = 0; i < 20; ++i) AckOneWindow(cubic, now, rtt);
  // Past cwnd_prior (10) alpha is 1: 20 more packets over 20 RTTs.
  EXPECT_NEAR(cubic.cwnd(), at_six + 20, 1);
  const double t = absl::ToDoubleSeconds(now - cubic.epoch_start());
  EXPECT_LT(cubic.WCubic(t), 7.5);
  EXPECT_EQ(cubic.cwnd(), static_cast<uint32_t>(cubic.w_est()));
}

TEST(CubicTest, FastConvergenceLowersWmax) {
  Cubic cubic(100);
  Instant now = LoseAt(cubic, 100, kT0);
  for (int i = 0; i < 5; ++i) AckOneWindow(cubic, now);
  const uint32_t cwnd = cubic.cwnd();
  ASSERT_LT(cwnd, 100u);
  // Loss again before regaining W_max: W_max = cwnd (1 + 0.7) / 2.
  cubic.OnCongestionEvent(now, cwnd);
  EXPECT_NEAR(cubic.w_max(), cwnd * 0.85, 1e-9);
  EXPECT_EQ(cubic.cwnd(), cwnd * 7 / 10);
  cubic.OnRecoveryEnd(now);
  now += Milliseconds(100);
  cubic.OnAck(Ack(now, 1, cubic.cwnd()));
  EXPECT_NEAR(cubic.k(), std::cbrt((cwnd * 0.85 - cwnd * 7 / 10) / Cubic::kC),
              1e-9);

  // Exact numbers: loss at 70 after one at 100.
  Cubic exact(100);
  LoseAt(exact, 100, kT0);
  exact.OnCongestionEvent(kT0, 70);
  EXPECT_NEAR(exact.w_max(), 59.5, 1e-9);
  EXPECT_EQ(exact.cwnd(), 49u);

  // A loss after growing past the old W_max takes cwnd as the new W_max.
  Cubic past(100);
  Instant t = LoseAt(past, 100, kT0);
  while (past.cwnd() <= 105) AckOneWindow(past, t);
  const uint32_t top = past.cwnd();
  past.OnCongestionEvent(t, top);
  EXPECT_EQ(past.w_max(), static_cast<double>(top));
}

TEST(CubicTest, AfterTimeoutTheCurveStartsAtTheNewCwnd) {
  Cubic cubic(100);
  Instant now = kT0;
  cubic.OnRetransmitTimeout(now, 100);
  EXPECT_EQ(cubic.cwnd(), 1u);
  EXPECT_EQ(cubic.ssthresh(), 70u);
  while (cubic.InSlowStart()) AckOneWindow(cubic, now);
  ASSERT_TRUE(cubic.in_epoch());
  // Section 4.8: K = 0 and W_max = cwnd at the start of the stage.
  EXPECT_EQ(cubic.k(), 0.0);
  EXPECT_EQ(cubic.w_max(), 70.0);
  // Convex from there: 70 + 0.4 t^3.
  const Instant epoch = cubic.epoch_start();
  while (now - epoch < Seconds(5)) AckOneWindow(cubic, now);
  const double t = absl::ToDoubleSeconds(now - epoch);
  EXPECT_NEAR(cubic.cwnd(), 70 + 0.4 * t * t * t, 2);
}

TEST(CubicTest, UndoRestoresCwndSsthreshAndWmax) {
  Cubic cubic(100);
  Instant now = LoseAt(cubic, 100, kT0);
  for (int i = 0; i < 10; ++i) AckOneWindow(cubic, now);
  const uint32_t cwnd = cubic.cwnd();
  const double k = cubic.k();
  const Instant epoch = cubic.epoch_start();
  ASSERT_EQ(cubic.ssthresh(), 70u);
  cubic.OnCongestionEvent(now, cwnd);
  ASSERT_NE(cubic.w_max(), 100.0);
  cubic.Undo();
  EXPECT_EQ(cubic.cwnd(), cwnd);
  EXPECT_EQ(cubic.ssthresh(), 70u);
  EXPECT_EQ(cubic.w_max(), 100.0);
  EXPECT_EQ(cubic.k(), k);
  EXPECT_EQ(cubic.epoch_start(), epoch);
  // Growth continues on the old curve.
  AckOneWindow(cubic, now);
  EXPECT_GE(cubic.cwnd(), cwnd);
  const double t = absl::ToDoubleSeconds(now - epoch);
  EXPECT_NEAR(cubic.cwnd(), cubic.WCubic(t), 2);
}

TEST(CubicTest, ApplicationLimitedTimeDoesNotAdvanceTheCurve) {
  Cubic cubic(100);
  Instant now = LoseAt(cubic, 100, kT0);
  for (int i = 0; i < 10; ++i) AckOneWindow(cubic, now);
  const uint32_t cwnd = cubic.cwnd();
  const Instant epoch = cubic.epoch_start();
  // Five seconds of application-limited ACKs.
  for (int i = 0; i < 50; ++i) {
    now += Milliseconds(100);
    AckEvent e = Ack(now, 1, 5);
    e.app_limited = true;
    cubic.OnAck(e);
  }
  EXPECT_EQ(cubic.cwnd(), cwnd);
  EXPECT_EQ(cubic.epoch_start(), epoch + Seconds(5));
  // One more round trip grows as the frozen curve says, not to W_cubic
  // five seconds later (which would be capped at 1.5 cwnd).
  AckOneWindow(cubic, now);
  const double t = absl::ToDoubleSeconds(now - cubic.epoch_start());
  EXPECT_NEAR(cubic.cwnd(), cubic.WCubic(t), 2);
  EXPECT_LE(cubic.cwnd(), cwnd + 5);
}

}  // namespace
}  // namespace netstack::tcp
