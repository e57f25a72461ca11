// Segment-level listener tests: backlog overflow and SYN cookies (RFC
// 4987 3.6): cookie SYN-ACKs, the final ACK that creates the connection,
// options carried in the timestamp, forged ACKs refused.
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

class ListenTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUpHarness(bool cookies = true) {
    HarnessOptions o;
    o.v6 = GetParam();
    o.tcp.syn_cookies = cookies;
    h_ = std::make_unique<SegmentHarness>(o);
    listener_ = h_->tcp().Open(h_->family());
    ASSERT_TRUE(listener_->Bind(h_->our_address()).ok());
    ASSERT_TRUE(listener_->Listen(1).ok());
  }
  // A SYN from peer port `port`; returns what the stack answered.
  std::vector<OutSegment> SynFrom(uint16_t port, const PeerSynOptions& o = {}) {
    h().peer.port = port;
    h().peer.seq = SegmentHarness::kPeerIsn + port;
    h().Send(h().Syn(o));
    return h().Take();
  }
  uint16_t Mss() const { return GetParam() ? 1440 : 1460; }
  SegmentHarness& h() { return *h_; }
  std::unique_ptr<SegmentHarness> h_;
  std::unique_ptr<TcpSocket> listener_;
};

INSTANTIATE_TEST_SUITE_P(V4V6, ListenTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(ListenTest, SynCookiesPastBacklogCompleteAndAccept) {
  SetUpHarness();
  // The first SYN takes the backlog (one half-open connection).
  auto first = SynFrom(41000);
  ASSERT_THAT(first, ElementsAre(Tcp(Flags(kSyn | kAck))));
  EXPECT_EQ(h().tcp().counters().syn_cookies_sent, 0u);
  // The second: a stateless SYN-ACK whose ISN is the cookie. With
  // timestamps, window scale and SACK-permitted ride in the TSval.
  auto cookie = SynFrom(41001);
  ASSERT_THAT(cookie,
              ElementsAre(Tcp(Flags(kSyn | kAck),
                              Ack(SegmentHarness::kPeerIsn + 41001 + 1),
                              HasTimestamps(), WindowScale(7), SackPermitted(),
                              ChecksumOk())));
  ASSERT_TRUE(cookie[0].tcp.mss.has_value());
  EXPECT_LE(*cookie[0].tcp.mss, Mss());
  EXPECT_EQ(h().tcp().counters().syn_cookies_sent, 1u);
  EXPECT_EQ(h().tcp().connection_count(), 1u) << "a cookie keeps no state";
  // The peer's final ACK echoes the cookie: an established connection.
  h().peer.seq += 1;
  h().peer.ack = cookie[0].tcp.seq + 1;
  h().peer.timestamps = true;
  h().peer.ts_recent = cookie[0].tcp.timestamps->tsval;
  h().Send(h().Segment().Data(100));
  EXPECT_EQ(h().tcp().counters().syn_cookies_accepted, 1u);
  auto a = listener_->Accept();
  ASSERT_TRUE(a.ok()) << a.status();
  auto& s = *a;
  EXPECT_EQ(s->state(), TcpState::kEstablished);
  EXPECT_EQ(s->remote_address().port, 41001);
  const TcpInfo info = s->Info();
  EXPECT_TRUE(info.sack);
  EXPECT_TRUE(info.timestamps);
  EXPECT_EQ(info.snd_wscale, 7);
  EXPECT_EQ(s->readable_bytes(), 100u);
  // And it works both ways.
  ASSERT_TRUE(s->Write(Bytes(50)).ok());
  h().Poll();
  const auto out = h().Take();
  ASSERT_FALSE(out.empty());
  EXPECT_THAT(out.back(), Tcp(Seq(cookie[0].tcp.seq + 1), PayloadLen(50),
                              Ack(h().peer.seq + 100)));
}

TEST_P(ListenTest, CookieWithoutTimestampsCarriesNoOtherOptions) {
  SetUpHarness();
  SynFrom(41000);
  PeerSynOptions p;
  p.timestamps = false;
  auto cookie = SynFrom(41001, p);
  EXPECT_THAT(cookie, ElementsAre(Tcp(Flags(kSyn | kAck), NoTimestamps(),
                                      NoWindowScale(), NoSackPermitted())));
  h().peer.seq += 1;
  h().SendAck(cookie[0].tcp.seq + 1);
  auto a = listener_->Accept();
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE((*a)->Info().sack);
  EXPECT_EQ((*a)->Info().snd_wscale, 0);
}

TEST_P(ListenTest, ForgedAckRefusedWithRstAndCounted) {
  SetUpHarness();
  SynFrom(41000);
  // A cookie goes out, so an ACK is checked as one (tcp_listener_close_test
  // has the ACK that arrives when no cookie was sent: a stray ACK).
  ASSERT_THAT(SynFrom(41001), ElementsAre(Tcp(Flags(kSyn | kAck))));
  h().peer.port = 41002;
  h().peer.seq = 777;
  h().SendAck(0x12345678);
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kRst), Seq(0x12345678))));
  EXPECT_EQ(h().tcp().counters().syn_cookies_rejected, 1u);
  EXPECT_EQ(h().Drops(DropReason::kTcpBadSynCookie), 1u);
  EXPECT_TRUE(transport::IsWouldBlock(listener_->Accept().status()));
}

TEST_P(ListenTest, CookieAckFromAnotherTupleRefused) {
  SetUpHarness();
  SynFrom(41000);
  auto cookie = SynFrom(41001);
  ASSERT_EQ(cookie.size(), 1u);
  // The right cookie, the wrong port: refused.
  h().peer.port = 41003;
  h().peer.seq = SegmentHarness::kPeerIsn + 41001 + 1;
  h().SendAck(cookie[0].tcp.seq + 1);
  EXPECT_THAT(h().Take(), ElementsAre(Tcp(Flags(kRst))));
  EXPECT_EQ(h().tcp().counters().syn_cookies_rejected, 1u);
}

TEST_P(ListenTest, WithoutCookiesOverflowIsDropped) {
  SetUpHarness(/*cookies=*/false);
  ASSERT_THAT(SynFrom(41000), ElementsAre(Tcp(Flags(kSyn | kAck))));
  EXPECT_THAT(SynFrom(41001), IsEmpty());
  EXPECT_EQ(h().Drops(DropReason::kTcpListenOverflow), 1u);
}

}  // namespace
}  // namespace netstack::tcp
