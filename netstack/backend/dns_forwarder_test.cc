// DnsForwarder over UDP: the guest is the fixture's peer on a fake link,
// the stack's own address plays the DNS address, and the upstream is a
// host UDP socket on this process's loopback that the test answers by
// hand (so it can answer out of order, late, twice, or with garbage).
#include "netstack/backend/dns_forwarder.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/tcp/tcp_test_util.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/udp/udp_test_fixture.h"
#include "netstack/wire/bytes.h"

namespace netstack::backend {
namespace {

using transport::IpAddress;
using transport::SocketAddress;
using udp::testing::ParseSent;
using udp::testing::SentFrame;

// A query for "a.test" A, with `id`.
std::vector<uint8_t> Query(uint16_t id, uint8_t tag = 0) {
  std::vector<uint8_t> q = {0, 0, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
                            1, 'a', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1};
  wire::StoreBe16(q.data(), id);
  q.push_back(tag);  // a trailing byte that tells queries apart
  return q;
}

struct Upstream {
  int fd = -1;
  SocketAddress addr;
  Upstream() {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_storage ss;
    socklen_t len = ToSockaddr(SocketAddress{*IpAddress::Parse("127.0.0.1"), 0}, ss);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&ss), len), 0);
    len = sizeof(ss);
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    addr = *FromSockaddr(ss, len);
  }
  ~Upstream() { close(fd); }
  // One query and who sent it (waits up to 2 s).
  std::optional<std::vector<uint8_t>> Receive(sockaddr_storage* from,
                                              socklen_t* from_len,
                                              int wait_ms = 2000) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, wait_ms) != 1) return std::nullopt;
    std::vector<uint8_t> buf(70000);
    *from_len = sizeof(*from);
    const ssize_t n = recvfrom(fd, buf.data(), buf.size(), 0,
                               reinterpret_cast<sockaddr*>(from), from_len);
    if (n < 0) return std::nullopt;
    buf.resize(static_cast<size_t>(n));
    return buf;
  }
  void Send(std::vector<uint8_t> msg, const sockaddr_storage& to,
            socklen_t len) {
    EXPECT_EQ(sendto(fd, msg.data(), msg.size(), 0,
                     reinterpret_cast<const sockaddr*>(&to), len),
              static_cast<ssize_t>(msg.size()));
  }
};

// The answer to `query`: QR set, same id and body, plus a marker byte.
std::vector<uint8_t> AnswerTo(const std::vector<uint8_t>& query, uint8_t marker) {
  std::vector<uint8_t> a = query;
  a[2] |= 0x80;
  a.push_back(marker);
  return a;
}

class DnsForwarderTest : public udp::testing::UdpFixture {
 protected:
  DnsForwarderTest() {
    loop_ = std::move(*eventloop::EventLoop::Create());
    now_ = loop_->Now();
    LearnPeer();
  }
  void Start(DnsForwarderOptions o = {}) {
    o.listen = {Our4(53)};
    o.upstreams = {upstream_.addr};
    o.tcp = false;
    o.seed = 7;
    auto f = DnsForwarder::Create(*udp_, nullptr, chunks_, *loop_, o);
    ASSERT_TRUE(f.ok()) << f.status();
    fwd_ = *std::move(f);
  }
  // Delivers the guest's datagrams to the forwarder (a Dispatch, as the
  // embedder's turn end does).
  void SendQuery(uint16_t guest_port, const std::vector<uint8_t>& q) {
    InjectUdp(Peer4(guest_port), Our4(53), q);
    notifier_.Dispatch();
  }
  // Loop turns until the guest got `n` datagrams (or 2 s); each as
  // (destination port, payload).
  std::vector<std::pair<uint16_t, std::vector<uint8_t>>> Answers(size_t n) {
    std::vector<std::pair<uint16_t, std::vector<uint8_t>>> out;
    const Instant until = loop_->Now() + absl::Seconds(2);
    while (out.size() < n && loop_->Now() < until) {
      (void)loop_->RunOnce(absl::Milliseconds(20));
      for (const auto& f : TakeSent()) {
        SentFrame s = ParseSent(f);
        EXPECT_EQ(s.protocol, 17);
        EXPECT_EQ(IpAddress(s.ip4.src), IpAddress(our_ip4_));
        EXPECT_EQ(wire::LoadBe16(&s.l4[0]), 53);  // from the DNS port
        out.emplace_back(wire::LoadBe16(&s.l4[2]),
                         std::vector<uint8_t>(s.l4.begin() + 8, s.l4.end()));
      }
    }
    return out;
  }

  Upstream upstream_;
  std::unique_ptr<eventloop::EventLoop> loop_;
  std::unique_ptr<DnsForwarder> fwd_;
};

TEST_F(DnsForwarderTest, AnswersComeBackWithTheGuestsIdAndBytes) {
  Start();
  const std::vector<uint8_t> q = Query(0x1234);
  SendQuery(5000, q);
  sockaddr_storage from;
  socklen_t from_len;
  auto up = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(up.has_value());
  // Everything but the id passes through unchanged.
  ASSERT_EQ(up->size(), q.size());
  EXPECT_TRUE(std::equal(q.begin() + 2, q.end(), up->begin() + 2));
  upstream_.Send(AnswerTo(*up, 0xaa), from, from_len);
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, 5000);
  std::vector<uint8_t> want = AnswerTo(q, 0xaa);
  EXPECT_EQ(got[0].second, want);
  EXPECT_EQ(fwd_->counters().queries_udp, 1u);
  EXPECT_EQ(fwd_->counters().answers_udp, 1u);
  EXPECT_EQ(fwd_->pending(), 0u);
}

TEST_F(DnsForwarderTest, SameIdFromTwoGuestSocketsDoesNotCollide) {
  Start();
  const std::vector<uint8_t> qa = Query(7, 'A');
  const std::vector<uint8_t> qb = Query(7, 'B');
  SendQuery(6000, qa);
  SendQuery(6001, qb);
  sockaddr_storage from;
  socklen_t from_len;
  auto ua = upstream_.Receive(&from, &from_len);
  auto ub = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(ua && ub);
  EXPECT_NE(wire::LoadBe16(ua->data()), wire::LoadBe16(ub->data()));
  // Answered in the other order.
  upstream_.Send(AnswerTo(*ub, 'b'), from, from_len);
  upstream_.Send(AnswerTo(*ua, 'a'), from, from_len);
  auto got = Answers(2);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& [port, msg] : got) {
    EXPECT_EQ(wire::LoadBe16(msg.data()), 7);
    if (port == 6000) {
      EXPECT_EQ(msg, AnswerTo(qa, 'a'));
    } else {
      EXPECT_EQ(port, 6001);
      EXPECT_EQ(msg, AnswerTo(qb, 'b'));
    }
  }
  // A second answer to the same id is not a second answer.
  upstream_.Send(AnswerTo(*ua, 'x'), from, from_len);
  EXPECT_TRUE(Answers(1).empty());
  EXPECT_EQ(fwd_->counters().dropped_reply_unknown_id, 1u);
}

TEST_F(DnsForwarderTest, MalformedQueriesAndAnswersAreDroppedAndCounted) {
  Start();
  SendQuery(7000, {});                        // empty
  SendQuery(7000, {1, 2, 3, 4, 5});           // shorter than a header
  SendQuery(7000, std::vector<uint8_t>(11));  // one byte short
  std::vector<uint8_t> response = Query(1);
  response[2] |= 0x80;                        // a response, not a query
  SendQuery(7000, response);
  EXPECT_EQ(fwd_->counters().dropped_short, 3u);
  EXPECT_EQ(fwd_->counters().dropped_not_query, 1u);
  EXPECT_EQ(fwd_->counters().queries_udp, 0u);
  sockaddr_storage from;
  socklen_t from_len;
  EXPECT_FALSE(upstream_.Receive(&from, &from_len, 100).has_value());

  // A 12-byte header alone is a query as far as we care.
  SendQuery(7001, std::vector<uint8_t>(12));
  auto up = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(up.has_value());
  upstream_.Send({1, 2, 3}, from, from_len);                  // short
  upstream_.Send(*up, from, from_len);                        // QR=0
  std::vector<uint8_t> wrong = AnswerTo(*up, 0);
  wrong[0] ^= 0xff;                                           // unknown id
  upstream_.Send(wrong, from, from_len);
  upstream_.Send(AnswerTo(*up, 1), from, from_len);           // the real one
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, 7001);
  EXPECT_EQ(fwd_->counters().dropped_reply_short, 1u);
  EXPECT_EQ(fwd_->counters().dropped_reply_not_response, 1u);
  EXPECT_EQ(fwd_->counters().dropped_reply_unknown_id, 1u);
}

TEST_F(DnsForwarderTest, UnansweredQueriesTimeOutAndLateAnswersAreDropped) {
  DnsForwarderOptions o;
  o.timeout = absl::Seconds(5);
  Start(o);
  SendQuery(8000, Query(1));
  sockaddr_storage from;
  socklen_t from_len;
  auto up = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(fwd_->pending(), 1u);
  fwd_->Poll(loop_->Now() + absl::Seconds(6));
  EXPECT_EQ(fwd_->pending(), 0u);
  EXPECT_EQ(fwd_->counters().timeouts, 1u);
  upstream_.Send(AnswerTo(*up, 0), from, from_len);
  EXPECT_TRUE(Answers(1).empty());
  EXPECT_EQ(fwd_->counters().dropped_reply_unknown_id, 1u);
}

TEST_F(DnsForwarderTest, TheTableIsBounded) {
  DnsForwarderOptions o;
  o.max_pending = 4;
  Start(o);
  for (uint16_t i = 0; i < 100; ++i) SendQuery(9000 + i, Query(i));
  EXPECT_EQ(fwd_->pending(), 4u);
  EXPECT_EQ(fwd_->counters().queries_udp, 100u);
  EXPECT_EQ(fwd_->counters().dropped_table_full, 96u);
  sockaddr_storage from;
  socklen_t from_len;
  int forwarded = 0;
  while (upstream_.Receive(&from, &from_len, 100)) ++forwarded;
  EXPECT_EQ(forwarded, 4);
}

TEST_F(DnsForwarderTest, CreateFailsWithoutUsableUpstreamSettings) {
  DnsForwarderOptions o;
  o.listen = {Our4(53)};
  o.upstreams = {upstream_.addr};
  o.tcp = true;  // but no TcpLayer
  EXPECT_FALSE(DnsForwarder::Create(*udp_, nullptr, chunks_, *loop_, o).ok());
  o.tcp = false;
  o.listen = {SocketAddress{*IpAddress::Parse("10.77.0.1"), 53}};  // not ours
  EXPECT_FALSE(DnsForwarder::Create(*udp_, nullptr, chunks_, *loop_, o).ok());
}

// Over TCP, with a guest on a second stack (testing::Network: host a is
// the guest, host b runs the forwarder) and the forwarder's loop on the
// network's fake clock.
class DnsForwarderTcpTest : public ::testing::Test {
 protected:
  DnsForwarderTcpTest()
      : udp_(*net_.b().stack, net_.b().chunks, net_.b().packets,
             net_.b().notifier, 1) {
    loop_ = std::move(
        *eventloop::EventLoop::Create({}, [this] { return net_.now(); }));
    DnsForwarderOptions o;
    o.listen = {SocketAddress{net_.b().v4(), 53}};
    o.upstreams = {upstream_.addr};
    o.seed = 7;
    auto f = DnsForwarder::Create(udp_, net_.b().tcp.get(), net_.b().chunks,
                                  *loop_, o);
    EXPECT_TRUE(f.ok()) << f.status();
    if (f.ok()) fwd_ = *std::move(f);
  }
  ~DnsForwarderTcpTest() override { fwd_.reset(); }
  void Run(Duration d) {
    net_.RunFor(d);
    (void)loop_->RunOnce(absl::ZeroDuration());
    net_.RunFor(d);
  }

  tcp::testing::Network net_;
  udp::UdpLayer udp_;
  Upstream upstream_;
  std::unique_ptr<eventloop::EventLoop> loop_;
  std::unique_ptr<DnsForwarder> fwd_;
};

// A zero length is a message shorter than a header, like lengths 1..11:
// counted as malformed and the connection closed. (It was read as the
// guest's FIN: a read into an empty buffer returns 0, and the message was
// not counted; dns_forwarder_fuzzer found it.)
TEST_F(DnsForwarderTcpTest, AZeroLengthMessageIsMalformed) {
  ASSERT_NE(fwd_, nullptr);
  std::unique_ptr<tcp::TcpSocket> c = net_.a().tcp->Open(transport::Family::kIpv4);
  ASSERT_TRUE(c->Connect({net_.b().v4(), 53}).ok());
  Run(absl::Milliseconds(10));
  ASSERT_EQ(fwd_->tcp_clients(), 1u);
  const std::vector<uint8_t> q = Query(0x4242);
  std::vector<uint8_t> stream = {0, static_cast<uint8_t>(q.size())};
  stream.insert(stream.end(), q.begin(), q.end());
  stream.insert(stream.end(), {0, 0});  // the empty message
  stream.insert(stream.end(), {0, static_cast<uint8_t>(q.size())});
  stream.insert(stream.end(), q.begin(), q.end());
  ASSERT_EQ(*c->Write(stream), stream.size());
  Run(absl::Milliseconds(10));
  EXPECT_EQ(fwd_->counters().queries_tcp, 1u);  // the first, not the third
  EXPECT_EQ(fwd_->counters().dropped_tcp_malformed, 1u);
  EXPECT_EQ(fwd_->tcp_clients(), 0u);
  std::vector<uint8_t> buf(64);
  absl::StatusOr<size_t> n = c->Read(buf);
  EXPECT_TRUE(!n.ok() || *n == 0);  // closed: EOF or a reset
}

}  // namespace
}  // namespace netstack::backend
