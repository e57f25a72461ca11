#include "netstack/backend/rate_limit.h"

#include <vector>

#include "gtest/gtest.h"
#include "netstack/eventloop/timer_wheel.h"

namespace netstack::backend {
namespace {

using transport::FourTuple;
using transport::IpAddress;
using transport::SocketAddress;

const Instant kT0 = absl::UnixEpoch() + absl::Hours(1);

FourTuple Flow(uint16_t port) {
  const IpAddress a(*wire::Ipv4Address::Parse("10.0.2.100"));
  const IpAddress b(*wire::Ipv4Address::Parse("192.0.2.1"));
  return FourTuple{SocketAddress{b, 80}, SocketAddress{a, port}};
}

TEST(RateBucketTest, StartsFullRefillsAtTheRateAndSavesUpToTheBurst) {
  RateBucket b(/*rate=*/1000, /*burst=*/100);
  EXPECT_DOUBLE_EQ(b.Available(kT0), 100);
  EXPECT_TRUE(b.Take(60, kT0));
  EXPECT_FALSE(b.Take(60, kT0));  // all or nothing: 40 left
  EXPECT_DOUBLE_EQ(b.Available(kT0), 40);
  EXPECT_DOUBLE_EQ(b.Available(kT0 + absl::Milliseconds(10)), 50);
  b.Consume(50);
  EXPECT_DOUBLE_EQ(b.Available(kT0 + absl::Milliseconds(10)), 0);
  EXPECT_DOUBLE_EQ(b.Available(kT0 + absl::Seconds(10)), 100);
}

TEST(RateBucketTest, WhenSaysHowLongAnAmountTakesToSaveUp) {
  RateBucket b(1000, 100);
  EXPECT_EQ(b.When(100, kT0), kT0);  // full at first use
  b.Consume(100);
  EXPECT_EQ(b.When(25, kT0), kT0 + absl::Milliseconds(25));
  // More than the burst is never there: as long as the burst takes.
  EXPECT_EQ(b.When(500, kT0), kT0 + absl::Milliseconds(100));
}

TEST(RateBucketTest, ClockSteppingBackGivesNothing) {
  RateBucket b(1000, 10);
  b.Consume(b.Available(kT0));
  EXPECT_DOUBLE_EQ(b.Available(kT0 - absl::Seconds(5)), 0);
  EXPECT_DOUBLE_EQ(b.Available(kT0 + absl::Milliseconds(5)), 5);
}

TEST(RateBucketTest, NewFlowsPastTheRateAreCountedOff) {
  // 10 a second, burst 5: 5 at once, then one each 100 ms.
  RateBucket b(10, 5);
  int took = 0;
  for (int i = 0; i < 50; ++i) took += b.Take(1, kT0);
  EXPECT_EQ(took, 5);
  took = 0;
  for (int ms = 1; ms <= 1000; ++ms) {
    took += b.Take(1, kT0 + absl::Milliseconds(ms));
  }
  EXPECT_EQ(took, 10);
}

class EgressLimiterTest : public ::testing::Test {
 protected:
  // 100,000 bytes a second, a burst of 10,000: the quantum a waiting flow
  // is resumed with is a hundredth of a second's (1,000 bytes), at least
  // 1,500 (kMinWrite).
  EgressLimiterTest()
      : limiter_(100000, 10000, wheel_,
                 [this](const FourTuple& t) { Resumed(t); }) {}

  void Resumed(const FourTuple& t) {
    resumed_.push_back(t.remote.port);
    if (on_resume_) on_resume_(t);
  }

  eventloop::TimerWheel wheel_{kT0};
  EgressLimiter limiter_;
  std::vector<uint16_t> resumed_;
  std::function<void(const FourTuple&)> on_resume_;
};

TEST_F(EgressLimiterTest, AFlowPastTheBudgetWaitsForTheTimerNotABusyLoop) {
  EXPECT_EQ(limiter_.min_write(), 1500u);
  ASSERT_EQ(limiter_.Allow(kT0), 10000u);
  limiter_.Sent(10000);
  EXPECT_EQ(limiter_.Allow(kT0), 0u);
  limiter_.Wait(Flow(1), kT0);
  EXPECT_EQ(limiter_.counters().waits, 1u);
  EXPECT_EQ(limiter_.waiting(), 1u);
  // One timer, due when the quantum is saved up (15 ms at 100 kB/s).
  EXPECT_EQ(wheel_.size(), 1u);
  EXPECT_EQ(wheel_.NextDeadline(), kT0 + absl::Milliseconds(15));
  EXPECT_EQ(wheel_.Advance(kT0 + absl::Milliseconds(14)), 0u);
  EXPECT_TRUE(resumed_.empty());
  // While it waits, another flow gets nothing either (first come, first
  // served), and joins the queue.
  EXPECT_EQ(limiter_.Allow(kT0 + absl::Milliseconds(14)), 0u);
  limiter_.Wait(Flow(2), kT0 + absl::Milliseconds(14));
  EXPECT_EQ(wheel_.size(), 1u);
  on_resume_ = [&](const FourTuple& t) {
    const uint64_t a = limiter_.Allow(kT0 + absl::Milliseconds(15));
    if (t.remote.port == 1) {
      EXPECT_EQ(a, 1500u);
      limiter_.Sent(a);
    } else {
      EXPECT_EQ(a, 0u);
      limiter_.Wait(t, kT0 + absl::Milliseconds(15));
    }
  };
  EXPECT_EQ(wheel_.Advance(kT0 + absl::Milliseconds(15)), 1u);
  EXPECT_EQ(resumed_, (std::vector<uint16_t>{1, 2}));
  EXPECT_EQ(limiter_.counters().bytes_delayed, 1500u);
  EXPECT_EQ(limiter_.counters().bytes, 11500u);
  // Flow 1 did not wait again; flow 2 did, and the timer is armed for it.
  EXPECT_EQ(limiter_.waiting(), 1u);
  EXPECT_EQ(wheel_.NextDeadline(), kT0 + absl::Milliseconds(30));
}

TEST_F(EgressLimiterTest, FlowsServedGoBehindThoseThatGotNothing) {
  limiter_.Sent(limiter_.Allow(kT0));
  for (uint16_t p : {1, 2, 3}) limiter_.Wait(Flow(p), kT0);
  Instant now = kT0;
  // Each resume: the first flow takes the quantum and waits again.
  on_resume_ = [&](const FourTuple& t) {
    const uint64_t a = limiter_.Allow(now);
    if (a > 0) limiter_.Sent(a);
    limiter_.Wait(t, now);
  };
  for (int i = 0; i < 3; ++i) {
    now = wheel_.NextDeadline();
    ASSERT_EQ(wheel_.Advance(now), 1u);
  }
  // Rounds: [1 2 3], [2 3 1], [3 1 2]: each flow served first once.
  EXPECT_EQ(resumed_, (std::vector<uint16_t>{1, 2, 3, 2, 3, 1, 3, 1, 2}));
  EXPECT_EQ(limiter_.counters().bytes_delayed, 3 * 1500u);
}

TEST_F(EgressLimiterTest, OverALongRunTheBytesFollowTheRate) {
  // One flow that always has more to send, resumed by the timer.
  Instant now = kT0;
  uint64_t sent = 0;
  auto pump = [&](const FourTuple& t) {
    while (true) {
      const uint64_t a = limiter_.Allow(now);
      if (a == 0) {
        limiter_.Wait(t, now);
        return;
      }
      limiter_.Sent(a);
      sent += a;
    }
  };
  on_resume_ = pump;
  pump(Flow(1));
  while (now < kT0 + absl::Seconds(5)) {
    now = wheel_.NextDeadline();
    wheel_.Advance(now);
  }
  // The burst, then 100,000 a second.
  const double want = 10000 + 100000 * absl::ToDoubleSeconds(now - kT0);
  EXPECT_NEAR(static_cast<double>(sent), want, 1500);
  // About one wake per quantum, never a busy loop.
  EXPECT_LT(resumed_.size(), 5 * 100000 / 1500 + 2);
}

TEST_F(EgressLimiterTest, ADatagramOverTheBudgetIsDroppedWhole) {
  EXPECT_TRUE(limiter_.TakeDatagram(9000, kT0));
  EXPECT_FALSE(limiter_.TakeDatagram(1200, kT0));  // 1,000 left
  EXPECT_TRUE(limiter_.TakeDatagram(1000, kT0));
  EXPECT_EQ(limiter_.counters().datagrams_dropped, 1u);
  EXPECT_EQ(limiter_.counters().bytes_dropped, 1200u);
  EXPECT_EQ(limiter_.counters().bytes, 10000u);
  EXPECT_TRUE(limiter_.TakeDatagram(1200, kT0 + absl::Milliseconds(12)));
  EXPECT_EQ(wheel_.size(), 0u);  // datagrams never wait
}

TEST_F(EgressLimiterTest, ADatagramFloodAndAWaitingUploadShareTheRate) {
  // A TCP flow that always has more, and 1,200-byte datagrams offered
  // every millisecond (1.2 MB/s, twelve times the rate).
  Instant now = kT0;
  uint64_t tcp = 0, udp = 0;
  auto pump = [&](const FourTuple& t) {
    while (true) {
      const uint64_t a = limiter_.Allow(now);
      if (a == 0) {
        limiter_.Wait(t, now);
        return;
      }
      limiter_.Sent(a);
      tcp += a;
    }
  };
  on_resume_ = pump;
  pump(Flow(1));
  for (int ms = 1; ms <= 5000; ++ms) {
    const Instant t = kT0 + absl::Milliseconds(ms);
    while (wheel_.NextDeadline() <= t) {
      now = wheel_.NextDeadline();
      wheel_.Advance(now);
    }
    now = t;
    udp += limiter_.TakeDatagram(1200, now) ? 1200 : 0;
  }
  const double total = 10000 + 100000 * 5.0;
  EXPECT_NEAR(static_cast<double>(tcp + udp), total, 0.05 * total);
  // Neither starves: each gets at least two fifths.
  EXPECT_GT(tcp, 0.4 * total) << udp;
  EXPECT_GT(udp, 0.4 * total) << tcp;
}

TEST(AdmissionTest, ABoolIsThePolicysAllowOrRefuse) {
  EXPECT_EQ(Admission(true).kind, Admission::Kind::kAllow);
  EXPECT_EQ(Admission(false).kind, Admission::Kind::kRefuse);
  EXPECT_EQ(Admission(Admission::Kind::kDrop).kind, Admission::Kind::kDrop);
}

TEST(ParseNewFlowRateTest, RateSlashSecondAndBurst) {
  absl::StatusOr<NewFlowRate> r = ParseNewFlowRate("20");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->per_second, 20u);
  EXPECT_EQ(r->burst, 20u);  // a second's worth
  r = ParseNewFlowRate("50/s,burst=5");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->per_second, 50u);
  EXPECT_EQ(r->burst, 5u);
  r = ParseNewFlowRate("0");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->per_second, 0u);  // off
  for (const char* bad : {"", "x", "-1", "10/m", "10/s,", "10,burst=0",
                          "10,burst=", "10,bust=3", "1.5", "20000000",
                          "10,burst=20000000"}) {
    EXPECT_FALSE(ParseNewFlowRate(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseNewFlowRate("10/m").status().message(),
            "'10/m': want N[/s][,burst=M], N new flows a second (0: no "
            "limit)");
}

TEST(ParseEgressRateTest, UnitsSayBitsOrBytes) {
  struct Case {
    const char* text;
    uint64_t rate;
  };
  for (const Case& c : {Case{"10Mbit", 1250000}, Case{"10mbit/s", 1250000},
                        Case{"1.5Gbit", 187500000}, Case{"800kbit", 100000},
                        Case{"8000bit", 1000}, Case{"1MB", 1000000},
                        Case{"1MiB", 1048576}, Case{"64KiB/s", 65536},
                        Case{"2kB", 2000}, Case{"3GB", 3000000000},
                        Case{"500B", 500}}) {
    absl::StatusOr<EgressRate> r = ParseEgressRate(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status();
    EXPECT_EQ(r->bytes_per_second, c.rate) << c.text;
  }
  // The burst: a tenth of a second's worth, at least 64 KiB.
  EXPECT_EQ(ParseEgressRate("1Gbit")->burst, 12500000u);
  EXPECT_EQ(ParseEgressRate("1MB")->burst, 100000u);
  EXPECT_EQ(ParseEgressRate("1Mbit")->burst, 65536u);
  absl::StatusOr<EgressRate> r = ParseEgressRate("10Mbit,burst=256KiB");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->burst, 262144u);
  EXPECT_EQ(ParseEgressRate("0")->bytes_per_second, 0u);  // off
  for (const char* bad :
       {"", "10", "10M", "10Mb", "10Mbps", "Mbit", "-1Mbit", "10 Mbit",
        "10Mbit,burst=1", "10Mbit,burst=10", "10Mbit,burst=2Mbit",
        "10Mbit,burst", "100bit", "2Tbit", "10Mbit/m"}) {
    EXPECT_FALSE(ParseEgressRate(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseEgressRate("10Mb").status().message(),
            "'10Mb': 'Mb' is ambiguous: say Mbit (bits) or MB (bytes) a "
            "second");
  EXPECT_EQ(ParseEgressRate("10").status().message(),
            "'10': a rate needs its unit: bit, kbit, Mbit, Gbit (bits a "
            "second) or B, kB, MB, GB, KiB, MiB, GiB (bytes a second), "
            "e.g. 10Mbit");
}

TEST(FormatEgressRateTest, SaysBothUnits) {
  EXPECT_EQ(FormatEgressRate(EgressRate{1250000, 131072}),
            "10 Mbit/s (1250000 B/s), burst 131072 B");
}

}  // namespace
}  // namespace netstack::backend
