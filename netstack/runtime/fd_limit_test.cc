#include "netstack/runtime/fd_limit.h"

#include <sys/resource.h>

#include <limits>

#include "gtest/gtest.h"

namespace netstack::runtime {
namespace {

constexpr uint64_t kNrOpen = 1048576;
constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

TEST(PlanFdLimits, RaisesTheSoftLimitToTheNeed) {
  const FdLimits got = PlanFdLimits({1024, 524288}, 5440, false, kNrOpen);
  EXPECT_EQ(got.soft, 5440u);
  EXPECT_EQ(got.hard, 524288u);
}

TEST(PlanFdLimits, NeverLowersASoftLimitSetHigher) {
  const FdLimits got = PlanFdLimits({65536, 524288}, 5440, true, kNrOpen);
  EXPECT_EQ(got.soft, 65536u);
  EXPECT_EQ(got.hard, 524288u);
}

TEST(PlanFdLimits, UnprivilegedStopsAtTheHardLimit) {
  const FdLimits got = PlanFdLimits({1024, 4096}, 10384, false, kNrOpen);
  EXPECT_EQ(got.soft, 4096u);
  EXPECT_EQ(got.hard, 4096u);
}

TEST(PlanFdLimits, PrivilegedRaisesTheHardLimitUpToNrOpen) {
  FdLimits got = PlanFdLimits({1024, 4096}, 10384, true, kNrOpen);
  EXPECT_EQ(got.soft, 10384u);
  EXPECT_EQ(got.hard, 10384u);
  got = PlanFdLimits({1024, 4096}, 2000000, true, kNrOpen);
  EXPECT_EQ(got.soft, kNrOpen);
  EXPECT_EQ(got.hard, kNrOpen);
}

TEST(PlanFdLimits, UnlimitedHardLimit) {
  const FdLimits got = PlanFdLimits({1024, kUnlimited}, 5440, true, kNrOpen);
  EXPECT_EQ(got.soft, 5440u);
  EXPECT_EQ(got.hard, kUnlimited);
}

TEST(PlanFdLimits, SoftAboveHardIsPulledDown) {
  // Not something getrlimit returns, but the plan must stay valid.
  const FdLimits got = PlanFdLimits({8192, 4096}, 100, false, kNrOpen);
  EXPECT_LE(got.soft, got.hard);
}

TEST(DescribeFdLimit, DnsQueriesAreTheGuestsAndNamed) {
  // Since 2026-12-06 each DNS query in flight holds a host socket of its
  // own (a random source port each, review finding 10).
  FdBudget b{4096, 1024, 256, 64};
  b.dns_queries = 512;
  EXPECT_EQ(b.flows(), 4096u + 1024 + 256 + 512);
  EXPECT_EQ(b.need(), 4096u + 1024 + 256 + 512 + 64);
  EXPECT_EQ(DescribeFdLimit({1024, 524288}, {8192, 524288}, b),
            "netstackd: fd limit 8192 (was 1024; hard 524288): room for "
            "--max-tcp-flows 4096, --max-udp-flows 1024, 256 ping flows, "
            "512 DNS queries and 64 others\n");
}

TEST(DescribeFdLimit, EnoughSaysTheLimitAndWhatItIsFor) {
  const FdBudget b{4096, 1024, 256, 64};
  EXPECT_EQ(DescribeFdLimit({1024, 524288}, {5440, 524288}, b),
            "netstackd: fd limit 5440 (was 1024; hard 524288): room for "
            "--max-tcp-flows 4096, --max-udp-flows 1024, 256 ping flows and "
            "64 others\n");
}

TEST(DescribeFdLimit, PortForwardsAreNamedWhenThereAreAny) {
  FdBudget b{4096, 1024, 256, 64};
  b.forwards = 1024 + 4;
  EXPECT_EQ(b.need(), 4096u + 1024 + 256 + 64 + 1028);
  EXPECT_EQ(DescribeFdLimit({1024, 524288}, {8192, 524288}, b),
            "netstackd: fd limit 8192 (was 1024; hard 524288): room for "
            "--max-tcp-flows 4096, --max-udp-flows 1024, 256 ping flows, "
            "1028 for port forwards and 64 others\n");
}

TEST(DescribeFdLimit, ShortNamesTheNumbersAndTheFixes) {
  const FdBudget b{10000, 1024, 256, 64};
  const std::string line = DescribeFdLimit({1024, 4096}, {4096, 4096}, b);
  EXPECT_EQ(line.rfind("netstackd: warning: fd limit 4096 (was 1024; hard "
                       "4096) is below the 11344 fds that --max-tcp-flows "
                       "10000, ",
                       0),
            0u)
      << line;
  EXPECT_NE(line.find("ulimit -Hn 11344"), std::string::npos) << line;
  EXPECT_NE(line.find("run it as root"), std::string::npos) << line;
  EXPECT_NE(line.find("lower --max-tcp-flows"), std::string::npos) << line;
  EXPECT_NE(line.find("backend.tcp_end.connect_failed"), std::string::npos);
}

TEST(FdBudget, ASplicedConnectionCostsItsSocketsAndTwoPipes) {
  FdBudget b{4096, 1024, 256, 64};
  b.forwards = 2;
  b.spliced_conns = 100;
  EXPECT_EQ(b.need(), 4096u + 1024 + 256 + 64 + 2 + 100 * 6);
  EXPECT_EQ(DescribeFdLimit({1024, 524288}, {6042, 524288}, b),
            "netstackd: fd limit 6042 (was 1024; hard 524288): room for "
            "--max-tcp-flows 4096, --max-udp-flows 1024, 256 ping flows, "
            "2 for port forwards, 100 spliced forward connections (6 fds "
            "each) and 64 others\n");
}

TEST(SplicedConnsThatFit, AllWhenTheLimitCoversTheBudget) {
  FdBudget b{4096, 1024, 256, 64};
  b.forwards = 2;
  b.spliced_conns = 4096;
  EXPECT_EQ(SplicedConnsThatFit(b, b.need()), 4096u);
  EXPECT_EQ(SplicedConnsThatFit(b, kUnlimited), 4096u);
}

// The limit holds the guest's flows but not every connection: forwards
// get what is left, and the guest's flows keep all theirs.
TEST(SplicedConnsThatFit, WhatTheGuestsFlowsLeave) {
  FdBudget b{300, 100, 12, 64};  // flows 412, others 64
  b.forwards = 2;
  b.spliced_conns = 1000;
  const uint64_t soft = 1024;
  const uint64_t fit = SplicedConnsThatFit(b, soft);
  EXPECT_EQ(fit, (1024u - 66 - 412) / 6);  // 91
  EXPECT_GE(soft - 66 - fit * FdBudget::kFdsPerSplicedConn, b.flows());
}

// The limit is short even of the guest's flows (the review's case: a hard
// limit of 1024 and the default flow limits): forwards get a quarter of
// what there is, and the guest keeps three quarters whatever clients do.
TEST(SplicedConnsThatFit, AQuarterWhenShortOfTheGuestsFlows) {
  FdBudget b{4096, 1024, 256, 64};
  b.forwards = 2;
  b.spliced_conns = 4096;
  EXPECT_EQ(SplicedConnsThatFit(b, 1024), (1024u - 66) / 4 / 6);  // 39
  const std::string line = DescribeFdLimit({1024, 1024}, {1024, 1024}, b);
  EXPECT_NE(line.find("spliced forward connections: at most 39 of "
                      "--max-forward-conns 4096; a client past it is reset "
                      "(forward.N.refused_limit)."),
            std::string::npos)
      << line;
  EXPECT_EQ(line.back(), '\n');
}

TEST(SplicedConnsThatFit, NeverMoreThanAsked) {
  FdBudget b{4096, 1024, 256, 64};
  b.spliced_conns = 3;
  EXPECT_EQ(SplicedConnsThatFit(b, 1024), 3u);
  EXPECT_EQ(SplicedConnsThatFit(b, 10), 0u);  // not even the others fit
}

// Through the stack a connection holds one fd (the client's socket), in
// the backend's inbound share, which gets what the guest's flows leave
// as the spliced path does.
TEST(StackConnsThatFit, OneFdEachAfterTheGuestsFlows) {
  FdBudget b{4096, 1024, 256, 64};
  b.forwards = 2;
  b.stack_conns = 1024;
  EXPECT_EQ(b.need(), 4096u + 1024 + 256 + 64 + 2 + 1024);
  EXPECT_EQ(StackConnsThatFit(b, b.need()), 1024u);
  EXPECT_EQ(SplicedConnsThatFit(b, b.need()), 0u);
  EXPECT_EQ(StackConnsThatFit(b, 1024), (1024u - 66) / 4);  // 239
  const std::string line = DescribeFdLimit({1024, 1024}, {1024, 1024}, b);
  EXPECT_NE(line.find("1024 forward connections through the stack (1 fd "
                      "each)"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("forward connections through the stack: at most 239 "
                      "of --max-forward-conns 1024; a client past it is "
                      "reset (forward.N.refused_limit, "
                      "backend.tcp_refused_inbound_limit)."),
            std::string::npos)
      << line;
  FdBudget room{300, 100, 12, 64};  // flows 412, others 64
  room.forwards = 2;
  room.stack_conns = 1000;
  EXPECT_EQ(StackConnsThatFit(room, 1024), 1024u - 66 - 412);  // 546
}

// The real thing, in this process: the soft limit comes down to 64 (an
// unprivileged change), RaiseFdLimit brings it back up to the need.
TEST(RaiseFdLimit, RaisesThisProcessesSoftLimit) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 512) {
    GTEST_SKIP() << "hard fd limit " << saved.rlim_max << " below 512";
  }
  rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const FdBudget b{300, 100, 12, 64};  // 476
  const std::string line = RaiseFdLimit(b);
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, 476u);
  EXPECT_EQ(now.rlim_max, saved.rlim_max);
  EXPECT_EQ(line.rfind("netstackd: fd limit 476 (was 64; ", 0), 0u) << line;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

}  // namespace
}  // namespace netstack::runtime
