// Global limits of the TCP layer (issue 12 item 4, STYLE.md "every table a
// peer can grow has a cap"): connections, half-open connections and
// TIME_WAIT entries, each refusal counted under its own name.
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/stack/counters.h"
#include "netstack/tcp/tcp_segment_harness.h"
#include "netstack/transport/errors.h"

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace testing;  // NOLINT: the harness and its matchers
using stack::DropReason;

class LimitsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUpHarness(const TcpLayerOptions& tcp) {
    HarnessOptions o;
    o.v6 = GetParam();
    o.tcp = tcp;
    h_ = std::make_unique<SegmentHarness>(o);
    listener_ = h_->tcp().Open(h_->family());
    ASSERT_TRUE(listener_->Bind(h_->our_address()).ok());
    ASSERT_TRUE(listener_->Listen(64).ok());
  }
  std::vector<OutSegment> SynFrom(uint16_t port) {
    h().peer.port = port;
    h().peer.seq = SegmentHarness::kPeerIsn + port;
    h().Send(h().Syn());
    return h().Take();
  }
  SegmentHarness& h() { return *h_; }
  std::unique_ptr<SegmentHarness> h_;
  std::unique_ptr<TcpSocket> listener_;
};

INSTANTIATE_TEST_SUITE_P(V4V6, LimitsTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(LimitsTest, HalfOpenLimitWithoutCookiesDrops) {
  TcpLayerOptions o;
  o.syn_cookies = false;
  o.max_half_open = 2;
  SetUpHarness(o);
  EXPECT_THAT(SynFrom(41000), ElementsAre(Tcp(Flags(kSyn | kAck))));
  EXPECT_THAT(SynFrom(41001), ElementsAre(Tcp(Flags(kSyn | kAck))));
  EXPECT_THAT(SynFrom(41002), IsEmpty());
  EXPECT_EQ(h().Drops(DropReason::kTcpHalfOpenLimit), 1u);
  EXPECT_EQ(h().tcp().counters().half_open_limit_drops, 1u);
  EXPECT_EQ(h().tcp().connection_count(), 2u);
}

// While the link is busy (its reads hit their batch limit), a listener
// answers busy_syn_rate SYNs a second and drops the rest; a link that
// keeps up gets every SYN answered.
TEST_P(LimitsTest, BusyLinkShedsSynsPastTheRate) {
  TcpLayerOptions o;
  o.busy_syn_rate = 10;
  o.busy_syn_burst = 1;
  SetUpHarness(o);
  EXPECT_THAT(SynFrom(41000), ElementsAre(Tcp(Flags(kSyn | kAck))));
  EXPECT_THAT(SynFrom(41001), ElementsAre(Tcp(Flags(kSyn | kAck))));
  h().link().set_busy(true);
  EXPECT_THAT(SynFrom(41002), ElementsAre(Tcp(Flags(kSyn | kAck))));
  EXPECT_THAT(SynFrom(41003), IsEmpty());
  EXPECT_EQ(h().Drops(DropReason::kTcpSynShed), 1u);
  EXPECT_EQ(h().tcp().counters().syns_shed, 1u);
  // A tenth of a second later: one more token.
  h().Advance(absl::Milliseconds(100));
  EXPECT_THAT(SynFrom(41003), ElementsAre(Tcp(Flags(kSyn | kAck))));
  EXPECT_THAT(SynFrom(41004), IsEmpty());
  h().link().set_busy(false);
  h().Poll();  // a turn without a full read
  EXPECT_THAT(SynFrom(41005), ElementsAre(Tcp(Flags(kSyn | kAck))));
  EXPECT_EQ(h().tcp().counters().syns_shed, 2u);
}

TEST_P(LimitsTest, HalfOpenLimitFallsBackToCookies) {
  TcpLayerOptions o;
  o.max_half_open = 1;
  SetUpHarness(o);
  EXPECT_THAT(SynFrom(41000), ElementsAre(Tcp(Flags(kSyn | kAck))));
  auto cookie = SynFrom(41001);
  ASSERT_THAT(cookie, ElementsAre(Tcp(Flags(kSyn | kAck))));
  EXPECT_EQ(h().tcp().counters().syn_cookies_sent, 1u);
  EXPECT_EQ(h().tcp().connection_count(), 1u) << "a cookie keeps no state";
  // The cookie completes.
  h().peer.seq += 1;
  h().peer.timestamps = true;
  h().peer.ts_recent = cookie[0].tcp.timestamps->tsval;
  h().SendAck(cookie[0].tcp.seq + 1);
  EXPECT_EQ(h().tcp().counters().syn_cookies_accepted, 1u);
  EXPECT_TRUE(listener_->Accept().ok());
}

TEST_P(LimitsTest, ConnectionLimitRefusesSynsAndConnect) {
  TcpLayerOptions o;
  o.max_connections = 1;
  SetUpHarness(o);
  EXPECT_THAT(SynFrom(41000), ElementsAre(Tcp(Flags(kSyn | kAck))));
  EXPECT_THAT(SynFrom(41001), IsEmpty());
  EXPECT_EQ(h().Drops(DropReason::kTcpConnectionLimit), 1u);
  EXPECT_EQ(h().tcp().counters().connection_limit_refusals, 1u);
  auto s = h().tcp().Open(h().family());
  const absl::Status st = s->Connect(h().peer_address());
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(h().tcp().counters().connection_limit_refusals, 2u);
}

TEST_P(LimitsTest, TimeWaitLimitClosesWithoutTimeWait) {
  TcpLayerOptions o;
  o.max_time_wait = 1;
  SetUpHarness(o);
  for (uint16_t port : {41000, 41001}) {
    auto syn = SynFrom(port);
    ASSERT_THAT(syn, ElementsAre(Tcp(Flags(kSyn | kAck))));
    h().peer.seq += 1;
    h().SendAck(syn[0].tcp.seq + 1);
    auto a = listener_->Accept();
    ASSERT_TRUE(a.ok());
    a->reset();  // our FIN
    h().Poll();
    h().peer.ack = syn[0].tcp.seq + 2;
    h().Send(h().Segment().Flags(kFin | kAck));
    h().peer.seq += 1;
    // The peer's FIN is acked either way.
    EXPECT_THAT(h().Take(), ElementsAre(Tcp(FlagsSet(kFin)), Tcp(Flags(kAck))));
  }
  EXPECT_EQ(h().tcp().time_wait_count(), 1u);
  EXPECT_EQ(h().tcp().counters().time_wait_overflows, 1u);
  EXPECT_EQ(h().tcp().connection_count(), 1u);
}

TEST(LimitsDefaults, AreSane) {
  const TcpLayerOptions o;
  EXPECT_GE(o.max_connections, 65536u);
  EXPECT_GE(o.max_half_open, 1024u);
  EXPECT_GE(o.max_time_wait, 16384u);
}

}  // namespace
}  // namespace netstack::tcp
