// Segment-level handshake tests: option negotiation (MSS, window scale,
// SACK-permitted, timestamps) active and passive, each option on and off,
// MSS against the path MTU, payload per packet (RFC 6691), SYN retries,
// simultaneous open.
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/tcp/tcp_segment_harness.h"
#include "netstack/transport/errors.h"

namespace netstack::tcp {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace testing;  // NOLINT: the harness and its matchers

// Receive buffer 256 KiB, max 6 MiB: the shift that covers 6 MiB is 7.
constexpr uint8_t kDefaultShift = 7;

class HandshakeTest : public ::testing::TestWithParam<bool> {
 protected:
  HarnessOptions Options(uint32_t mtu = 1500) {
    HarnessOptions o;
    o.v6 = GetParam();
    o.mtu = mtu;
    return o;
  }
  static uint16_t MssFor(bool v6, uint32_t mtu) {
    return static_cast<uint16_t>(mtu - (v6 ? 40 : 20) - 20);
  }
  // Writes n bytes and polls; returns the data segments sent.
  static std::vector<OutSegment> WriteAndTake(SegmentHarness& h,
                                              TcpSocket& s, size_t n) {
    auto w = s.Write(Bytes(n));
    EXPECT_TRUE(w.ok() && *w == n);
    h.Poll();
    return h.Take();
  }
};

INSTANTIATE_TEST_SUITE_P(V4V6, HandshakeTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "v6" : "v4"; });

TEST_P(HandshakeTest, ActiveSynOffersEveryOption) {
  SegmentHarness h(Options());
  auto s = h.tcp().Open(h.family());
  ASSERT_TRUE(s->Connect(h.peer_address()).ok());
  h.Poll();
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Flags(kSyn), HasMss(MssFor(GetParam(), 1500)),
                              WindowScale(kDefaultShift), SackPermitted(),
                              HasTimestamps(), TsEcr(0), Window(65535),
                              PayloadLen(0), ChecksumOk())));
}

TEST_P(HandshakeTest, ActiveSynOffersOnlyEnabledOptions) {
  SegmentHarness h(Options());
  ConnectionOptions o;
  o.sack = false;
  o.timestamps = false;
  o.window_scaling = false;
  auto s = h.tcp().Open(h.family());
  ASSERT_TRUE(s->SetOptions(o).ok());
  ASSERT_TRUE(s->Connect(h.peer_address()).ok());
  h.Poll();
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Flags(kSyn), HasMss(MssFor(GetParam(), 1500)),
                              NoWindowScale(), NoSackPermitted(),
                              NoTimestamps())));
}

TEST_P(HandshakeTest, ActiveAllOptionsNegotiated) {
  SegmentHarness h(Options());
  auto s = h.OpenActive();
  const TcpInfo info = s->Info();
  EXPECT_EQ(info.peer_mss, 1460u);
  EXPECT_EQ(info.snd_wscale, 7);
  EXPECT_EQ(info.rcv_wscale, kDefaultShift);
  EXPECT_TRUE(info.sack);
  EXPECT_TRUE(info.timestamps);
  // RFC 6691: the MSS option counts no TCP options, so with timestamps on
  // every segment a packet carries MSS - 12 bytes of payload.
  const uint32_t mss = std::min<uint32_t>(1460, MssFor(GetParam(), 1500));
  // (For IPv6 the 3 * 1448 bytes leave a small tail, which Minshall's
  // Nagle sends at once; only the full segments are checked here.)
  const auto out = WriteAndTake(h, *s, 3 * 1448);
  ASSERT_GE(out.size(), 3u) << ::testing::PrintToString(out);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_THAT(out[i], Tcp(FlagsSet(kAck), Seq(h.iss() + 1 + i * (mss - 12)),
                            PayloadLen(mss - 12), HasTimestamps(), NoMss(),
                            NoWindowScale(), NoSackPermitted(), ChecksumOk()));
  }
  // The receive window is scaled by our shift: 256 KiB >> 7.
  EXPECT_THAT(out[0], Window((256u << 10) >> kDefaultShift));
}

TEST_P(HandshakeTest, ActiveWithoutTimestampsUsesWholeMss) {
  SegmentHarness h(Options());
  PeerSynOptions p;
  p.timestamps = false;
  auto s = h.OpenActive(p);
  EXPECT_FALSE(s->Info().timestamps);
  const uint32_t mss = std::min<uint32_t>(1460, MssFor(GetParam(), 1500));
  const auto out = WriteAndTake(h, *s, 2 * mss);
  EXPECT_THAT(out, ElementsAre(Tcp(Seq(h.iss() + 1), PayloadLen(mss),
                                   NoTimestamps()),
                               Tcp(Seq(h.iss() + 1 + mss), PayloadLen(mss),
                                   NoTimestamps())));
}

TEST_P(HandshakeTest, ActiveWithoutWindowScaleNeitherSideScales) {
  SegmentHarness h(Options());
  PeerSynOptions p;
  p.window_scale.reset();
  auto s = h.OpenActive(p);
  EXPECT_EQ(s->Info().snd_wscale, 0);
  EXPECT_EQ(s->Info().rcv_wscale, 0);
  // Our window is not scaled: the field is capped at 65535.
  const auto out = WriteAndTake(h, *s, 100);
  EXPECT_THAT(out, ElementsAre(Tcp(Window(65535), PayloadLen(100))));
  // Nor is the peer's: a window of 3000 lets two full segments out (the
  // 104-byte rest waits: sender SWS avoidance), not 3000 << 7 bytes.
  const uint32_t mss = s->Info().mss;  // 1448 (v4) or 1428 (v6)
  h.Send(h.Segment().Ack(h.iss() + 101).Window(3000));
  const auto more = WriteAndTake(h, *s, 5000);
  EXPECT_THAT(more, ElementsAre(Tcp(Seq(h.iss() + 101), PayloadLen(mss)),
                                Tcp(Seq(h.iss() + 101 + mss),
                                    PayloadLen(mss))));
}

TEST_P(HandshakeTest, ActiveWithoutSackSendsNoSackBlocks) {
  SegmentHarness h(Options());
  PeerSynOptions p;
  p.sack = false;
  auto s = h.OpenActive(p);
  EXPECT_FALSE(s->Info().sack);
  // Out-of-order data: a duplicate ACK, and no SACK option.
  h.Send(h.Segment().Seq(h.peer.seq + 1000).Data(500));
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck), Ack(h.peer.seq),
                                        NoSack(), PayloadLen(0))));
}

TEST_P(HandshakeTest, ActiveWithSackReportsSackBlocks) {
  SegmentHarness h(Options());
  auto s = h.OpenActive();
  h.Send(h.Segment().Seq(h.peer.seq + 1000).Data(500));
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Flags(kAck), Ack(h.peer.seq),
                              SackBlocks(ElementsAre(Block(
                                  h.peer.seq + 1000, h.peer.seq + 1500))))));
}

TEST_P(HandshakeTest, ActivePeerWindowScaleAbove14IsClamped) {
  SegmentHarness h(Options());
  PeerSynOptions p;
  p.window_scale = 15;
  auto s = h.OpenActive(p);
  // RFC 7323 2.3: use 14.
  EXPECT_EQ(s->Info().snd_wscale, 14);
}

TEST_P(HandshakeTest, ActivePeerSmallerMssLimitsPayload) {
  SegmentHarness h(Options());
  PeerSynOptions p;
  p.mss = 1000;
  auto s = h.OpenActive(p);
  const auto out = WriteAndTake(h, *s, 2000);
  // The 24-byte tail goes too: no small segment is unacknowledged.
  EXPECT_THAT(out, ElementsAre(Tcp(PayloadLen(988)), Tcp(PayloadLen(988)),
                               Tcp(PayloadLen(24))));
}

TEST_P(HandshakeTest, ActivePeerWithoutMssOptionUsesDefault) {
  SegmentHarness h(Options());
  PeerSynOptions p;
  p.mss.reset();
  p.timestamps = false;
  auto s = h.OpenActive(p);
  // RFC 9293 3.7.1: 536 for IPv4; RFC 8200 5: 1220 for IPv6.
  const uint32_t def = GetParam() ? 1220 : 536;
  EXPECT_EQ(s->Info().mss, def);
  const auto out = WriteAndTake(h, *s, def + 1);
  EXPECT_THAT(out, ElementsAre(Tcp(PayloadLen(def)), Tcp(PayloadLen(1))));
}

TEST_P(HandshakeTest, MssClampedToPathMtu) {
  SegmentHarness h(Options(/*mtu=*/1280));
  const uint16_t ours = MssFor(GetParam(), 1280);
  auto s = h.OpenActive();  // the peer offers 1460
  EXPECT_THAT(h.last_syn(), HasMss(ours));
  const auto out = WriteAndTake(h, *s, 2 * (ours - 12));
  EXPECT_THAT(out, ElementsAre(Tcp(PayloadLen(ours - 12)),
                               Tcp(PayloadLen(ours - 12))));
  for (const auto& seg : out) {
    EXPECT_LE(seg.ip_packet_len, 1280u);
  }
}

TEST_P(HandshakeTest, PassiveSynAckEchoesAllOfferedOptions) {
  SegmentHarness h(Options());
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  EXPECT_THAT(h.last_syn(),
              Tcp(Flags(kSyn | kAck), Ack(SegmentHarness::kPeerIsn + 1),
                  HasMss(MssFor(GetParam(), 1500)),
                  WindowScale(kDefaultShift), SackPermitted(), HasTimestamps(),
                  Window(65535), ChecksumOk()));
  // TSecr echoes the SYN's TSval (the harness clock did not move).
  EXPECT_THAT(h.last_syn(), TsEcr(h.peer.ts_base));
  const TcpInfo info = s->Info();
  EXPECT_TRUE(info.sack);
  EXPECT_TRUE(info.timestamps);
  EXPECT_EQ(info.snd_wscale, 7);
  EXPECT_EQ(info.rcv_wscale, kDefaultShift);
  const uint32_t mss = std::min<uint32_t>(1460, MssFor(GetParam(), 1500));
  EXPECT_EQ(info.mss, mss - 12);
}

TEST_P(HandshakeTest, PassiveFinalAckElicitsNothing) {
  SegmentHarness h(Options());
  auto l = h.tcp().Open(h.family());
  ASSERT_TRUE(l->Bind(h.our_address()).ok());
  ASSERT_TRUE(l->Listen(8).ok());
  h.Send(h.Syn());
  auto sa = h.Take();
  ASSERT_THAT(sa, ElementsAre(Tcp(Flags(kSyn | kAck))));
  h.peer.seq += 1;
  h.peer.timestamps = true;
  h.SendAck(sa[0].tcp.seq + 1);
  ASSERT_TRUE(l->Accept().ok());
  // An ACK that carries nothing is not answered (RFC 9293 3.10.7.4: no
  // ACK of an ACK); Linux sends nothing here either. The window the
  // SYN-ACK offered (65535, unscaled) is raised with the first ACK of data.
  EXPECT_THAT(h.Take(), IsEmpty());
}

TEST_P(HandshakeTest, PassiveSynWithoutOptionsGetsOnlyMss) {
  SegmentHarness h(Options());
  PeerSynOptions p;
  p.mss.reset();
  p.window_scale.reset();
  p.sack = false;
  p.timestamps = false;
  auto s = h.OpenPassive(p);
  ASSERT_NE(s, nullptr);
  // RFC 7323 1.3 / RFC 2018 2: an option not in the SYN is not in the
  // SYN-ACK; the MSS option is always sent.
  EXPECT_THAT(h.last_syn(),
              Tcp(Flags(kSyn | kAck), HasMss(MssFor(GetParam(), 1500)),
                  NoWindowScale(), NoSackPermitted(), NoTimestamps()));
  const uint32_t def = GetParam() ? 1220 : 536;
  const auto out = WriteAndTake(h, *s, 2 * def);
  EXPECT_THAT(out, ElementsAre(Tcp(PayloadLen(def), NoTimestamps(),
                                   Window(65535)),
                               Tcp(PayloadLen(def))));
}

struct OneOption {
  const char* name;
  bool mss, ws, sack, ts;
};

class PassiveOneOptionTest
    : public ::testing::TestWithParam<std::tuple<bool, OneOption>> {};

INSTANTIATE_TEST_SUITE_P(
    Each, PassiveOneOptionTest,
    ::testing::Combine(
        ::testing::Bool(),
        ::testing::Values(OneOption{"Mss", true, false, false, false},
                          OneOption{"WindowScale", false, true, false, false},
                          OneOption{"SackPermitted", false, false, true, false},
                          OneOption{"Timestamps", false, false, false, true})),
    [](const auto& p) {
      return std::string(std::get<0>(p.param) ? "v6_" : "v4_") +
             std::get<1>(p.param).name;
    });

TEST_P(PassiveOneOptionTest, SynAckCarriesExactlyThatOption) {
  const auto& [v6, opt] = GetParam();
  HarnessOptions ho;
  ho.v6 = v6;
  SegmentHarness h(ho);
  PeerSynOptions p;
  p.mss = opt.mss ? std::optional<uint16_t>(1400) : std::nullopt;
  p.window_scale = opt.ws ? std::optional<uint8_t>(3) : std::nullopt;
  p.sack = opt.sack;
  p.timestamps = opt.ts;
  auto s = h.OpenPassive(p);
  ASSERT_NE(s, nullptr);
  const OutSegment& sa = h.last_syn();
  EXPECT_TRUE(sa.tcp.mss.has_value());  // always
  EXPECT_EQ(sa.tcp.window_scale.has_value(), opt.ws);
  EXPECT_EQ(sa.tcp.sack_permitted, opt.sack);
  EXPECT_EQ(sa.tcp.timestamps.has_value(), opt.ts);
  const TcpInfo info = s->Info();
  EXPECT_EQ(info.sack, opt.sack);
  EXPECT_EQ(info.timestamps, opt.ts);
  EXPECT_EQ(info.snd_wscale, opt.ws ? 3 : 0);
  EXPECT_EQ(info.rcv_wscale, opt.ws ? kDefaultShift : 0);
  const uint32_t peer_mss = opt.mss ? 1400 : (v6 ? 1220 : 536);
  EXPECT_EQ(info.mss, peer_mss - (opt.ts ? 12 : 0));
  // Data segments: timestamps exactly when negotiated.
  ASSERT_TRUE(s->Write(Bytes(100)).ok());
  h.Poll();
  const auto out = h.Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tcp.timestamps.has_value(), opt.ts);
  EXPECT_EQ(out[0].tcp.window,
            opt.ws ? (256u << 10) >> kDefaultShift : 65535u);
}

TEST_P(HandshakeTest, PassiveMssClampedToPathMtu) {
  SegmentHarness h(Options(/*mtu=*/1300));
  auto s = h.OpenPassive();
  ASSERT_NE(s, nullptr);
  EXPECT_THAT(h.last_syn(), HasMss(MssFor(GetParam(), 1300)));
  EXPECT_EQ(s->Info().mss, MssFor(GetParam(), 1300) - 12u);
}

TEST_P(HandshakeTest, SynRetriesBackOffThenTimedOut) {
  HarnessOptions ho = Options();
  ho.tcp.connection.syn_retries = 3;
  SegmentHarness h(ho);
  auto s = h.tcp().Open(h.family());
  ASSERT_TRUE(s->Connect(h.peer_address()).ok());
  h.Poll();
  const Instant t0 = h.now();
  auto syn = h.Take();
  ASSERT_THAT(syn, ElementsAre(Tcp(Flags(kSyn))));
  const uint32_t iss = syn[0].tcp.seq;
  // Initial RTO 1 s (RFC 6298 2.1), doubled per retry.
  h.AdvanceTo(t0 + absl::Seconds(16));
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Flags(kSyn), Seq(iss), HasMss(MssFor(GetParam(), 1500)),
                              SentAt(t0 + absl::Seconds(1))),
                          Tcp(Flags(kSyn), Seq(iss), SentAt(t0 + absl::Seconds(3))),
                          Tcp(Flags(kSyn), Seq(iss), SentAt(t0 + absl::Seconds(7)))));
  // The fourth expiry (t0 + 15 s) gives up.
  EXPECT_EQ(s->state(), TcpState::kClosed);
  EXPECT_EQ(transport::ErrnoOf(s->TakeError()), ETIMEDOUT);
  EXPECT_EQ(h.tcp().counters().connections_timed_out, 1u);
}

TEST_P(HandshakeTest, SynAckRetransmittedWhenFinalAckLost) {
  HarnessOptions ho = Options();
  SegmentHarness h(ho);
  auto l = h.tcp().Open(h.family());
  ASSERT_TRUE(l->Bind(h.our_address()).ok());
  ASSERT_TRUE(l->Listen(8).ok());
  h.Send(h.Syn());
  const Instant t0 = h.now();
  auto sa = h.Take();
  ASSERT_THAT(sa, ElementsAre(Tcp(Flags(kSyn | kAck))));
  h.AdvanceTo(t0 + absl::Seconds(3) + absl::Milliseconds(1));
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Flags(kSyn | kAck), Seq(sa[0].tcp.seq),
                              Ack(SegmentHarness::kPeerIsn + 1),
                              SentAt(t0 + absl::Seconds(1))),
                          Tcp(Flags(kSyn | kAck), Seq(sa[0].tcp.seq),
                              SentAt(t0 + absl::Seconds(3)))));
  // A retransmitted SYN (our SYN-ACK was lost) gets the SYN-ACK again.
  h.Send(h.Syn());
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kSyn | kAck),
                                        Seq(sa[0].tcp.seq))));
}

TEST_P(HandshakeTest, SimultaneousOpen) {
  SegmentHarness h(Options());
  auto s = h.tcp().Open(h.family());
  ASSERT_TRUE(s->Bind({h.our_ip(), SegmentHarness::kOurPort}).ok());
  ASSERT_TRUE(s->Connect(h.peer_address()).ok());
  h.Poll();
  auto syn = h.Take();
  ASSERT_THAT(syn, ElementsAre(Tcp(Flags(kSyn))));
  const uint32_t iss = syn[0].tcp.seq;
  // The peer's own SYN crosses ours (RFC 9293 figure 8).
  h.peer.timestamps = true;
  h.Send(h.Syn().Timestamps(h.PeerTsval(), 0));
  EXPECT_EQ(s->state(), TcpState::kSynReceived);
  // We answer with SYN-ACK, same ISS, acking the peer's SYN.
  EXPECT_THAT(h.Take(),
              ElementsAre(Tcp(Flags(kSyn | kAck), Seq(iss),
                              Ack(SegmentHarness::kPeerIsn + 1),
                              HasMss(MssFor(GetParam(), 1500)),
                              WindowScale(kDefaultShift), SackPermitted(),
                              HasTimestamps())));
  // The peer's SYN-ACK for our SYN arrives: its SYN again (SEG.SEQ = IRS,
  // just below RCV.NXT) with the ACK of ours. It completes the handshake
  // (RFC 9293 figure 8 line 7, as Linux's tcp_validate_incoming): the
  // peer, in SYN-RECEIVED too, completes on our SYN-ACK the same way, so
  // neither sends anything more. (Refusing it as out of window made two
  // such stacks trade SYN-ACKs; conformance scenario simultaneous_open.)
  h.peer.seq = SegmentHarness::kPeerIsn;
  PeerSegment synack = h.Syn();
  synack.Flags(kSyn | kAck).Ack(iss + 1);
  h.Send(synack);
  EXPECT_EQ(s->state(), TcpState::kEstablished);
  h.Take();
  h.peer.seq = SegmentHarness::kPeerIsn + 1;
  // Data flows both ways.
  ASSERT_TRUE(s->Write(Bytes(10)).ok());
  h.Poll();
  EXPECT_THAT(h.Take(),
              ::testing::Contains(Tcp(Seq(iss + 1), PayloadLen(10),
                                      Ack(SegmentHarness::kPeerIsn + 1))));
}

TEST_P(HandshakeTest, ConnectRefusedByRst) {
  SegmentHarness h(Options());
  auto s = h.tcp().Open(h.family());
  ASSERT_TRUE(s->Connect(h.peer_address()).ok());
  h.Poll();
  auto syn = h.Take();
  ASSERT_EQ(syn.size(), 1u);
  h.peer.port = syn[0].tcp.dst_port;
  h.peer.remote_port = syn[0].tcp.src_port;
  // A RST without ACK is not acceptable in SYN_SENT (RFC 9293 3.10.7.3).
  h.Send(h.Segment().Flags(kRst).Seq(0));
  EXPECT_EQ(s->state(), TcpState::kSynSent);
  // RST|ACK acking our SYN: connection refused.
  h.Send(h.Segment().Flags(kRst | kAck).Seq(0).Ack(syn[0].tcp.seq + 1));
  EXPECT_EQ(s->state(), TcpState::kClosed);
  EXPECT_EQ(transport::ErrnoOf(s->TakeError()), ECONNREFUSED);
  EXPECT_THAT(h.Take(), IsEmpty());
}

TEST_P(HandshakeTest, SynSentAnswersBadAckWithReset) {
  SegmentHarness h(Options());
  auto s = h.tcp().Open(h.family());
  ASSERT_TRUE(s->Connect(h.peer_address()).ok());
  h.Poll();
  auto syn = h.Take();
  ASSERT_EQ(syn.size(), 1u);
  h.peer.port = syn[0].tcp.dst_port;
  h.peer.remote_port = syn[0].tcp.src_port;
  // RFC 9293 3.10.7.3: an ACK outside (ISS, SND.NXT] gets <SEQ=SEG.ACK><RST>.
  PeerSegment bad = h.Syn();
  bad.Flags(kSyn | kAck).Ack(syn[0].tcp.seq + 1000);
  h.Send(bad);
  EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kRst),
                                        Seq(syn[0].tcp.seq + 1000))));
  EXPECT_EQ(s->state(), TcpState::kSynSent);
}

}  // namespace
}  // namespace netstack::tcp
