// DnsForwarder over UDP: the guest is the fixture's peer on a fake link,
// the stack's own address plays the DNS address, and the upstream is a
// host UDP socket on this process's loopback that the test answers by
// hand (so it can answer out of order, late, twice, or with garbage).
#include "netstack/backend/dns_forwarder.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/policy/policy.h"
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
  explicit Upstream(SocketAddress at = {*IpAddress::Parse("127.0.0.1"), 0}) {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_storage ss;
    socklen_t len = ToSockaddr(at, ss);
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

// A query with `id` for `name` (dotted labels), `qtype`, `qclass`, RD set.
std::vector<uint8_t> QueryFor(uint16_t id, std::string_view name,
                              uint16_t qtype = 1, uint16_t qclass = 1) {
  std::vector<uint8_t> q = {0, 0, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  wire::StoreBe16(q.data(), id);
  while (!name.empty()) {
    const std::string_view label = name.substr(0, name.find('.'));
    q.push_back(static_cast<uint8_t>(label.size()));
    q.insert(q.end(), label.begin(), label.end());
    name.remove_prefix(std::min(name.size(), label.size() + 1));
  }
  q.push_back(0);
  q.insert(q.end(),
           {static_cast<uint8_t>(qtype >> 8), static_cast<uint8_t>(qtype),
            static_cast<uint8_t>(qclass >> 8), static_cast<uint8_t>(qclass)});
  return q;
}

uint8_t Opcode(const std::vector<uint8_t>& m) { return (m[2] >> 3) & 0x0f; }
uint8_t Rcode(const std::vector<uint8_t>& m) { return m[3] & 0x0f; }
constexpr uint8_t kFormErr = 1, kServFail = 2, kNotImp = 4;  // RFC 1035 4.1.1
constexpr uint8_t kNxDomain = 3;

// Egress policy (issue #33): answers with records, built on the query
// the upstream received (its id and question). Each record's owner is a
// pointer to the question's name (offset 12) unless `owner` is given.
std::vector<uint8_t> ARecord(std::string_view ip, uint32_t ttl = 300,
                             std::vector<uint8_t> owner = {0xc0, 12}) {
  const IpAddress a = *IpAddress::Parse(ip);
  std::vector<uint8_t> r = owner;
  const uint16_t type = a.is_v4() ? 1 : 28;
  const size_t len = a.is_v4() ? 4 : 16;
  r.insert(r.end(),
           {static_cast<uint8_t>(type >> 8), static_cast<uint8_t>(type), 0, 1,
            static_cast<uint8_t>(ttl >> 24), static_cast<uint8_t>(ttl >> 16),
            static_cast<uint8_t>(ttl >> 8), static_cast<uint8_t>(ttl), 0,
            static_cast<uint8_t>(len)});
  const uint8_t* b = a.is_v4() ? a.v4().bytes.data() : a.v6().bytes.data();
  r.insert(r.end(), b, b + len);
  return r;
}

// A name in wire form, uncompressed.
std::vector<uint8_t> WireName(std::string_view name) {
  std::vector<uint8_t> q = QueryFor(0, name);
  return std::vector<uint8_t>(q.begin() + 12, q.end() - 4);
}

std::vector<uint8_t> CnameRecord(std::string_view target,
                                 std::vector<uint8_t> owner = {0xc0, 12}) {
  std::vector<uint8_t> r = owner;
  const std::vector<uint8_t> t = WireName(target);
  r.insert(r.end(),
           {0, 5, 0, 1, 0, 0, 1, 0, 0, static_cast<uint8_t>(t.size())});
  r.insert(r.end(), t.begin(), t.end());
  return r;
}

// `query` (header and question) answered with `records` in the answer
// section.
std::vector<uint8_t> AnswerWith(
    const std::vector<uint8_t>& query,
    const std::vector<std::vector<uint8_t>>& records) {
  std::vector<uint8_t> a = query;
  a[2] |= 0x80;
  a[3] |= 0x80;
  wire::StoreBe16(&a[6], static_cast<uint16_t>(records.size()));
  for (const auto& r : records) a.insert(a.end(), r.begin(), r.end());
  return a;
}

// The addresses of the A/AAAA records in `m`'s answer section, as text
// (records whose owner is a pointer and names written out both read).
std::vector<std::string> AnswerAddresses(const std::vector<uint8_t>& m) {
  std::vector<std::string> out;
  size_t at = 12;
  while (m[at] != 0) at += 1 + m[at];  // the question's name
  at += 5;
  for (int i = 0; i < wire::LoadBe16(&m[6]) && at < m.size(); ++i) {
    while ((m[at] & 0xc0) != 0xc0 && m[at] != 0) at += 1 + m[at];
    at += (m[at] & 0xc0) == 0xc0 ? 2 : 1;
    const uint16_t type = wire::LoadBe16(&m[at]);
    const uint16_t len = wire::LoadBe16(&m[at + 8]);
    at += 10;
    if (type == 1) {
      out.push_back(IpAddress(wire::Ipv4Address::FromBytes(&m[at])).ToString());
    } else if (type == 28) {
      out.push_back(IpAddress(wire::Ipv6Address::FromBytes(&m[at])).ToString());
    }
    at += len;
  }
  return out;
}

std::shared_ptr<const policy::Policy> MakePolicy(std::string_view file) {
  absl::StatusOr<policy::PolicyConfig> c = policy::ParsePolicyFile(file);
  EXPECT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::shared_ptr<const policy::Policy>> p =
      policy::Policy::Create(*std::move(c));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : policy::Policy::Open();
}

// The allowlist of the policy tests below.
constexpr std::string_view kAllowlist =
    "allow *.allowed.test\n"
    "deny blocked.allowed.test\n";

// What the forwarder reported through on_denied.
struct Denied {
  std::string qname;
  policy::Verdict verdict;
  SocketAddress guest;   // who asked
  SocketAddress server;  // which of our DNS addresses
  bool over_tcp = false;
};

// The options that put `policy` (and `pins`, `denied`) in force.
DnsForwarderOptions WithPolicy(const std::shared_ptr<const policy::Policy>& p,
                               policy::PinTable* pins,
                               std::vector<Denied>* denied) {
  DnsForwarderOptions o;
  o.policy = [p] { return p.get(); };
  o.pins = pins;
  o.on_denied = [denied](const DnsDenial& d) {
    denied->push_back(
        {std::string(d.qname), d.verdict, d.guest, d.server, d.over_tcp});
  };
  return o;
}

// The fds this process has open.
size_t OpenFds() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

// An IPv4 address on an alias of lo ("lo:53") for the alias's life: an
// upstream that was unreachable (no route) becomes reachable. The test
// binary runs in a network namespace of its own (isolated_netns_test_env).
class LoopbackAlias {
 public:
  explicit LoopbackAlias(const char* ip) {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo:53", IFNAMSIZ - 1);
    auto* sin = reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr);
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, ip, &sin->sin_addr);
    ok_ = ioctl(fd_, SIOCSIFADDR, &ifr) == 0;
    EXPECT_TRUE(ok_) << "SIOCSIFADDR lo:53: " << std::strerror(errno);
  }
  ~LoopbackAlias() {
    // An alias brought down is deleted (devinet_ioctl).
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo:53", IFNAMSIZ - 1);
    if (ok_) {
      EXPECT_EQ(ioctl(fd_, SIOCSIFFLAGS, &ifr), 0);
    }
    close(fd_);
  }
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

class DnsForwarderTest : public udp::testing::UdpFixture {
 protected:
  DnsForwarderTest() {
    loop_ = std::move(*eventloop::EventLoop::Create());
    now_ = loop_->Now();
    LearnPeer();
  }
  void Start(DnsForwarderOptions o = {}) { StartWith({upstream_.addr}, o); }
  void StartWith(std::vector<SocketAddress> upstreams,
                 DnsForwarderOptions o = {}) {
    o.listen = {Our4(53)};
    o.upstreams = std::move(upstreams);
    o.tcp = false;
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
  std::vector<std::pair<uint16_t, std::vector<uint8_t>>> Answers(
      size_t n, Duration wait = absl::Seconds(2)) {
    std::vector<std::pair<uint16_t, std::vector<uint8_t>>> out;
    const Instant until = loop_->Now() + wait;
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
  sockaddr_storage from_a, from_b;
  socklen_t from_a_len, from_b_len;
  auto ua = upstream_.Receive(&from_a, &from_a_len);
  auto ub = upstream_.Receive(&from_b, &from_b_len);
  ASSERT_TRUE(ua && ub);
  // Answered in the other order, each from its query's socket.
  upstream_.Send(AnswerTo(*ub, 'b'), from_b, from_b_len);
  upstream_.Send(AnswerTo(*ua, 'a'), from_a, from_a_len);
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
  // A second answer is not a second answer: the query's socket is gone.
  EXPECT_EQ(fwd_->pending(), 0u);
  upstream_.Send(AnswerTo(*ua, 'x'), from_a, from_a_len);
  EXPECT_TRUE(Answers(1, absl::Milliseconds(200)).empty());
  EXPECT_EQ(fwd_->counters().answers_udp, 2u);
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

  SendQuery(7001, Query(0x7001));
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
  // The query's socket is closed with it: a late answer finds none.
  upstream_.Send(AnswerTo(*up, 0), from, from_len);
  EXPECT_TRUE(Answers(1, absl::Milliseconds(200)).empty());
  EXPECT_EQ(fwd_->counters().answers_udp, 0u);
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

// Review 2026-12-06, finding 10 (RFC 5452 9.2 and 10): each query goes
// upstream from a socket of its own, so from a port the kernel picked at
// random; one fixed port left the 16-bit id as the only secret.
TEST_F(DnsForwarderTest, EachQueryLeavesFromASourcePortOfItsOwn) {
  Start();
  for (uint16_t i = 0; i < 4; ++i) {
    SendQuery(41000 + i, Query(static_cast<uint16_t>(0x100 + i), i));
  }
  std::set<uint16_t> ports;
  for (int i = 0; i < 4; ++i) {
    sockaddr_storage from;
    socklen_t from_len;
    auto up = upstream_.Receive(&from, &from_len);
    ASSERT_TRUE(up.has_value());
    ports.insert(FromSockaddr(from, from_len)->port);
  }
  EXPECT_EQ(ports.size(), 4u);
}

// Finding 10 (RFC 5452 3): an answer must repeat the query's question; the
// id alone is 16 bits. The name compares without regard to case (RFC 4343).
TEST_F(DnsForwarderTest, AnAnswerToAnotherQuestionIsDropped) {
  Start();
  SendQuery(5000, QueryFor(0x2222, "a.test"));
  sockaddr_storage from;
  socklen_t from_len;
  auto up = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(up.has_value());
  const uint16_t id = wire::LoadBe16(up->data());
  std::vector<uint8_t> no_question(up->begin(), up->begin() + 12);
  no_question[2] |= 0x80;
  no_question[5] = 0;  // QDCOUNT 0
  for (const std::vector<uint8_t>& wrong :
       {AnswerTo(QueryFor(id, "b.test"), 1), AnswerTo(QueryFor(id, "a.tes"), 2),
        AnswerTo(QueryFor(id, "a.test", 28), 3),
        AnswerTo(QueryFor(id, "a.test", 1, 3), 4), no_question}) {
    upstream_.Send(wrong, from, from_len);
  }
  EXPECT_TRUE(Answers(1, absl::Milliseconds(300)).empty());
  EXPECT_EQ(fwd_->counters().dropped_reply_question, 5u);
  EXPECT_EQ(fwd_->pending(), 1u);
  upstream_.Send(AnswerTo(QueryFor(id, "A.TeSt"), 5), from, from_len);
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, 5000);
  EXPECT_EQ(wire::LoadBe16(got[0].second.data()), 0x2222);
  EXPECT_EQ(got[0].second.back(), 5);
  EXPECT_EQ(fwd_->counters().answers_udp, 1u);
}

// Finding 10: UPDATE, NOTIFY and the other opcodes are not the host
// resolver's business (it may trust 127.0.0.1 for updates): answered
// NOTIMP here (RFC 1035 4.1.1), never forwarded.
TEST_F(DnsForwarderTest, OtherOpcodesAreAnsweredNotImpAndNeverForwarded) {
  Start();
  uint16_t port = 42000;
  for (uint8_t opcode : {1, 2, 4, 5, 6, 15}) {
    std::vector<uint8_t> q =
        QueryFor(static_cast<uint16_t>(0x5500 + opcode), "a.test");
    q[2] = static_cast<uint8_t>(opcode << 3) | 0x01;  // and RD
    SendQuery(port, q);
    auto got = Answers(1);
    ASSERT_EQ(got.size(), 1u) << "opcode " << int{opcode};
    const std::vector<uint8_t>& a = got[0].second;
    EXPECT_EQ(got[0].first, port);
    EXPECT_EQ(wire::LoadBe16(a.data()), 0x5500 + opcode);
    EXPECT_TRUE(a[2] & 0x80);  // QR
    EXPECT_EQ(Opcode(a), opcode);
    EXPECT_EQ(Rcode(a), kNotImp);
    // The question repeated, as in the query.
    EXPECT_EQ(wire::LoadBe16(&a[4]), 1);
    EXPECT_EQ(a.size(), q.size());
    ++port;
  }
  sockaddr_storage from;
  socklen_t from_len;
  EXPECT_FALSE(upstream_.Receive(&from, &from_len, 100).has_value());
  EXPECT_EQ(fwd_->counters().answers_notimp, 6u);
  EXPECT_EQ(fwd_->counters().queries_udp, 6u);
  EXPECT_EQ(fwd_->pending(), 0u);
}

// Finding 10: only a query with one well-formed question is forwarded;
// the rest are answered FORMERR (RFC 1035 4.1.1).
TEST_F(DnsForwarderTest, QueriesWithoutOneQuestionAreAnsweredFormErr) {
  Start();
  std::vector<std::vector<uint8_t>> bad;
  bad.push_back(std::vector<uint8_t>(12));  // QDCOUNT 0
  std::vector<uint8_t> two = QueryFor(0, "a.test");
  const std::vector<uint8_t> second = QueryFor(0, "b.test");
  two.insert(two.end(), second.begin() + 12, second.end());
  two[5] = 2;  // QDCOUNT 2
  bad.push_back(two);
  std::vector<uint8_t> pointer = {
      0, 0, 1, 0,    0,    1, 0, 0, 0,
      0, 0, 0, 0xc0, 0x0c, 0, 1, 0, 1};  // name -> header
  bad.push_back(pointer);
  std::vector<uint8_t> extended = QueryFor(0, "a.test");
  extended[12] = 0x41;  // an extended label type (RFC 6891 obsoleted them)
  bad.push_back(extended);
  std::vector<uint8_t> cut = QueryFor(0, "a.test");
  cut.resize(cut.size() - 1);  // QCLASS cut short
  bad.push_back(cut);
  std::vector<uint8_t> endless = QueryFor(0, "a");
  endless.resize(12);
  for (int i = 0; i < 64; ++i) {  // 64 labels of 4: past 255 octets
    endless.insert(endless.end(), {3, 'a', 'b', 'c'});
  }
  endless.insert(endless.end(), {0, 0, 1, 0, 1});
  bad.push_back(endless);
  uint16_t id = 0x6600;
  for (std::vector<uint8_t>& q : bad) {
    wire::StoreBe16(q.data(), id);
    SendQuery(43000, q);
    auto got = Answers(1);
    ASSERT_EQ(got.size(), 1u) << "query " << id - 0x6600;
    EXPECT_EQ(wire::LoadBe16(got[0].second.data()), id);
    EXPECT_EQ(Rcode(got[0].second), kFormErr) << "query " << id - 0x6600;
    EXPECT_EQ(got[0].second.size(), 12u);  // the header alone
    ++id;
  }
  sockaddr_storage from;
  socklen_t from_len;
  EXPECT_FALSE(upstream_.Receive(&from, &from_len, 100).has_value());
  EXPECT_EQ(fwd_->counters().answers_formerr, bad.size());
}

// Finding 10: the ids come from getrandom, not from a generator seeded by
// the options: two forwarders made alike draw different ids. (That they
// cannot be predicted is not something a test can show.)
TEST_F(DnsForwarderTest, IdsDoNotFollowFromTheOptions) {
  std::vector<uint16_t> ids[2];
  for (int run = 0; run < 2; ++run) {
    Start();
    ASSERT_NE(fwd_, nullptr);
    for (uint16_t i = 0; i < 8; ++i) SendQuery(44000 + i, Query(i));
    sockaddr_storage from;
    socklen_t from_len;
    for (int i = 0; i < 8; ++i) {
      auto up = upstream_.Receive(&from, &from_len);
      ASSERT_TRUE(up.has_value());
      ids[run].push_back(wire::LoadBe16(up->data()));
    }
    fwd_.reset();
  }
  EXPECT_NE(ids[0], ids[1]);
}

// Finding 10 (and 3): IPV6_V6ONLY on the AF_INET6 upstream socket, so
// [::ffff:127.0.0.1] is not a way to 127.0.0.1.
TEST_F(DnsForwarderTest, AV4MappedUpstreamIsNotReachedOverIpv6) {
  StartWith({SocketAddress{*IpAddress::Parse("::ffff:127.0.0.1"),
                           upstream_.addr.port}});
  ASSERT_NE(fwd_, nullptr);
  SendQuery(5000, QueryFor(0x4444, "a.test"));
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Rcode(got[0].second), kServFail);
  sockaddr_storage from;
  socklen_t from_len;
  EXPECT_FALSE(upstream_.Receive(&from, &from_len, 100).has_value());
  EXPECT_EQ(fwd_->counters().upstream_unreachable, 1u);
}

// Issue 30, item 18: an upstream with no route to it (this namespace has lo
// only) is no error at start; the guest's queries get SERVFAIL, with the
// question repeated (glibc ignores an answer whose question count differs
// from its query's).
TEST_F(DnsForwarderTest, AnUnreachableUpstreamIsAnsweredServfail) {
  StartWith({SocketAddress{*IpAddress::Parse("192.0.2.53"), 53}});
  ASSERT_NE(fwd_, nullptr);
  const std::vector<uint8_t> q = QueryFor(0x3333, "a.test");
  SendQuery(5000, q);
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  const std::vector<uint8_t>& a = got[0].second;
  EXPECT_EQ(got[0].first, 5000);
  EXPECT_EQ(wire::LoadBe16(a.data()), 0x3333);
  EXPECT_EQ(a[2], 0x81);  // QR, opcode QUERY, RD as asked
  EXPECT_EQ(Rcode(a), kServFail);
  ASSERT_EQ(a.size(), q.size());
  EXPECT_EQ(wire::LoadBe16(&a[4]), 1);  // QDCOUNT
  EXPECT_TRUE(std::equal(q.begin() + 12, q.end(), a.begin() + 12));
  EXPECT_EQ(fwd_->counters().answers_servfail, 1u);
  EXPECT_EQ(fwd_->counters().upstream_unreachable, 1u);
  EXPECT_EQ(fwd_->pending(), 0u);
}

// Item 18: with an unreachable upstream first, the next one is used.
TEST_F(DnsForwarderTest, AnUnreachableUpstreamFailsOverToTheNext) {
  StartWith(
      {SocketAddress{*IpAddress::Parse("192.0.2.53"), 53}, upstream_.addr});
  ASSERT_NE(fwd_, nullptr);
  SendQuery(5000, QueryFor(0x3434, "a.test"));
  sockaddr_storage from;
  socklen_t from_len;
  auto up = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(up.has_value());
  upstream_.Send(AnswerTo(*up, 9), from, from_len);
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].second.back(), 9);
  EXPECT_EQ(fwd_->counters().upstream_unreachable, 1u);
  // The reachable one is now the current one: the next query goes
  // straight there.
  SendQuery(5001, QueryFor(0x3535, "a.test"));
  ASSERT_TRUE(upstream_.Receive(&from, &from_len).has_value());
  EXPECT_EQ(fwd_->counters().upstream_unreachable, 1u);
}

// Item 18: SERVFAIL while the upstream cannot be reached, said once on
// stderr; answers again as soon as it can, said once too.
TEST_F(DnsForwarderTest, ServfailWhileUnreachableThenAnswersWhenItIsBack) {
  const IpAddress ip = *IpAddress::Parse("10.255.255.53");
  ::testing::internal::CaptureStderr();
  StartWith({SocketAddress{ip, 5353}});
  for (uint16_t i = 0; fwd_ != nullptr && i < 3; ++i) {
    SendQuery(5000 + i, QueryFor(i, "a.test"));
    auto got = Answers(1);
    EXPECT_EQ(got.size(), 1u);
    if (got.size() == 1) {
      EXPECT_EQ(Rcode(got[0].second), kServFail);
    }
  }
  {
    LoopbackAlias alias("10.255.255.53");
    Upstream back(SocketAddress{ip, 5353});
    for (uint16_t i = 0; fwd_ != nullptr && alias.ok() && i < 2; ++i) {
      SendQuery(6000 + i, QueryFor(i, "a.test"));
      sockaddr_storage from;
      socklen_t from_len;
      auto up = back.Receive(&from, &from_len);
      EXPECT_TRUE(up.has_value());
      if (!up) break;
      back.Send(AnswerTo(*up, 7), from, from_len);
      auto got = Answers(1);
      EXPECT_EQ(got.size(), 1u);
      if (got.size() == 1) {
        EXPECT_EQ(Rcode(got[0].second), 0);
      }
    }
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(fwd_, nullptr);
  std::vector<std::string> lines;
  for (size_t at = 0; at < err.size();) {
    const size_t end = std::min(err.find('\n', at), err.size());
    if (end > at) lines.push_back(err.substr(at, end - at));
    at = end + 1;
  }
  ASSERT_EQ(lines.size(), 2u) << err;
  EXPECT_NE(lines[0].find("10.255.255.53:5353"), std::string::npos) << err;
  EXPECT_NE(lines[0].find("SERVFAIL"), std::string::npos) << err;
  EXPECT_NE(lines[1].find("reachable again"), std::string::npos) << err;
  EXPECT_EQ(fwd_->counters().answers_servfail, 3u);
  EXPECT_EQ(fwd_->counters().upstream_unreachable, 3u);
  EXPECT_EQ(fwd_->counters().answers_udp, 2u);
}

// Each waiting query holds one fd, so max_pending bounds them; an answer
// or a timeout gives it back.
TEST_F(DnsForwarderTest, EachPendingQueryHoldsOneFdUntilItEnds) {
  DnsForwarderOptions o;
  o.max_pending = 4;
  Start(o);
  const size_t idle = OpenFds();
  for (uint16_t i = 0; i < 6; ++i) SendQuery(45000 + i, Query(i, 'a' + i));
  EXPECT_EQ(fwd_->pending(), 4u);
  EXPECT_EQ(OpenFds(), idle + 4);
  sockaddr_storage from;
  socklen_t from_len;
  auto up = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(up.has_value());
  upstream_.Send(AnswerTo(*up, 1), from, from_len);
  ASSERT_EQ(Answers(1).size(), 1u);
  EXPECT_EQ(OpenFds(), idle + 3);
  fwd_->Poll(loop_->Now() + absl::Seconds(6));
  EXPECT_EQ(fwd_->pending(), 0u);
  EXPECT_EQ(fwd_->counters().timeouts, 3u);
  EXPECT_EQ(OpenFds(), idle);
}

// ECONNREFUSED on the query's socket (nobody at the upstream's port):
// SERVFAIL at once rather than at the timeout.
TEST_F(DnsForwarderTest, ARefusedQueryIsAnsweredServfail) {
  SocketAddress nobody = upstream_.addr;
  {
    Upstream gone;  // a port that was free a moment ago
    nobody = gone.addr;
  }
  StartWith({nobody});
  SendQuery(5000, QueryFor(0x3636, "a.test"));
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Rcode(got[0].second), kServFail);
  EXPECT_EQ(fwd_->counters().upstream_refused, 1u);
  EXPECT_EQ(fwd_->pending(), 0u);
}

// ---- The egress policy (issue #33, netstack/policy/dns_policy.h) ----

// A denied name is answered NXDOMAIN here: nothing reaches the upstream,
// and on_denied says which name and why.
TEST_F(DnsForwarderTest, ADeniedNameGetsNxdomainWithoutAskingUpstream) {
  policy::PinTable pins;
  std::vector<Denied> denied;
  Start(WithPolicy(MakePolicy(kAllowlist), &pins, &denied));
  const std::vector<uint8_t> q1 = QueryFor(0x5101, "Evil.Test");
  const std::vector<uint8_t> q2 = QueryFor(0x5102, "blocked.allowed.test", 28);
  SendQuery(5100, q1);
  SendQuery(5100, q2);
  auto got = Answers(2);
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<uint8_t>& q = i == 0 ? q1 : q2;
    const std::vector<uint8_t>& a = got[i].second;
    ASSERT_EQ(a.size(), q.size());  // the question, no record
    EXPECT_EQ(wire::LoadBe16(a.data()), wire::LoadBe16(q.data()));
    EXPECT_EQ(a[2], 0x81);  // QR, RD
    EXPECT_EQ(Rcode(a), kNxDomain);
    EXPECT_TRUE(std::equal(q.begin() + 12, q.end(), a.begin() + 12));
  }
  sockaddr_storage from;
  socklen_t from_len;
  EXPECT_FALSE(upstream_.Receive(&from, &from_len, 200).has_value());
  ASSERT_EQ(denied.size(), 2u);
  EXPECT_EQ(denied[0].qname, "evil.test");
  EXPECT_FALSE(denied[0].verdict.allow);
  EXPECT_EQ(denied[0].verdict.reason, policy::Reason::kNotAllowed);
  EXPECT_EQ(denied[1].qname, "blocked.allowed.test");
  EXPECT_EQ(denied[1].verdict.reason, policy::Reason::kDenyRule);
  EXPECT_EQ(denied[1].verdict.rule, 1);
  // The flow log's line names the guest's address and port that asked,
  // and the forwarder's address it asked (issue #33: every line carries
  // the guest source).
  for (const Denied& d : denied) {
    EXPECT_EQ(d.guest, Peer4(5100));
    EXPECT_EQ(d.server, Our4(53));
    EXPECT_FALSE(d.over_tcp);
  }
  EXPECT_EQ(fwd_->counters().policy.queries_denied, 2u);
  EXPECT_EQ(fwd_->pending(), 0u);
  EXPECT_NE(
      fwd_->counters().Format().find("backend.dns.policy.queries_denied 2\n"),
      std::string::npos);
}

// An allowed name's answer reaches the guest unchanged, and its addresses
// are pinned for the name.
TEST_F(DnsForwarderTest, AnAllowedNamesAnswerPinsItsAddresses) {
  policy::PinTable pins;
  std::vector<Denied> denied;
  Start(WithPolicy(MakePolicy(kAllowlist), &pins, &denied));
  const std::vector<uint8_t> q = QueryFor(0x5201, "www.allowed.test");
  SendQuery(5200, q);
  sockaddr_storage from;
  socklen_t from_len;
  auto up = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(up.has_value());
  upstream_.Send(AnswerWith(*up, {ARecord("203.0.113.5", 300),
                                  ARecord("2001:db8::5", 300)}),
                 from, from_len);
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  std::vector<uint8_t> want =
      AnswerWith(q, {ARecord("203.0.113.5", 300), ARecord("2001:db8::5", 300)});
  EXPECT_EQ(got[0].second, want);
  const Instant now = loop_->Now();
  EXPECT_EQ(pins.Find(*IpAddress::Parse("203.0.113.5"), now),
            "www.allowed.test");
  EXPECT_EQ(pins.Find(*IpAddress::Parse("2001:db8::5"), now),
            "www.allowed.test");
  EXPECT_FALSE(pins.Find(*IpAddress::Parse("203.0.113.5"),
                         now + absl::Seconds(301) + policy::PinTable::kPinGrace)
                   .has_value());
  EXPECT_EQ(fwd_->counters().policy.answers_pinned, 1u);
  EXPECT_EQ(fwd_->counters().policy.addresses_pinned, 2u);
  EXPECT_TRUE(denied.empty());
}

// The rebinding case: an allowed name answered with loopback and private
// addresses; they are taken out and the public one stays (and is the
// only one pinned).
TEST_F(DnsForwarderTest, RebindingRecordsAreRemovedFromTheAnswer) {
  policy::PinTable pins;
  std::vector<Denied> denied;
  Start(WithPolicy(MakePolicy(kAllowlist), &pins, &denied));
  SendQuery(5300, QueryFor(0x5301, "www.allowed.test"));
  sockaddr_storage from;
  socklen_t from_len;
  auto up = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(up.has_value());
  upstream_.Send(AnswerWith(*up, {ARecord("127.0.0.1"), ARecord("10.0.0.1"),
                                  ARecord("203.0.113.5")}),
                 from, from_len);
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(wire::LoadBe16(&got[0].second[6]), 1);  // ANCOUNT
  EXPECT_EQ(AnswerAddresses(got[0].second),
            std::vector<std::string>{"203.0.113.5"});
  EXPECT_EQ(got[0].second.size(), QueryFor(0, "www.allowed.test").size() + 16);
  EXPECT_EQ(pins.size(), 1u);
  EXPECT_EQ(fwd_->counters().policy.records_stripped, 2u);
}

// The chain from the question: www.allowed.test -> edge.cdn.test ->
// e1.cdn.test, whose address is pinned for www.allowed.test.
TEST_F(DnsForwarderTest, CnameChainsArePinnedForTheAllowedName) {
  policy::PinTable pins;
  std::vector<Denied> denied;
  Start(WithPolicy(MakePolicy(kAllowlist), &pins, &denied));
  SendQuery(5400, QueryFor(0x5401, "www.allowed.test"));
  sockaddr_storage from;
  socklen_t from_len;
  auto up = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(up.has_value());
  upstream_.Send(
      AnswerWith(*up, {CnameRecord("edge.cdn.test"),
                       CnameRecord("e1.cdn.test", WireName("edge.cdn.test")),
                       ARecord("198.51.100.7", 60, WireName("E1.cdn.test")),
                       ARecord("198.51.100.8", 60, WireName("other.test"))}),
      from, from_len);
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Rcode(got[0].second), 0);
  const Instant now = loop_->Now();
  EXPECT_EQ(pins.Find(*IpAddress::Parse("198.51.100.7"), now),
            "www.allowed.test");
  EXPECT_FALSE(pins.Find(*IpAddress::Parse("198.51.100.8"), now).has_value());
}

// An allowed name's answer that cannot be read (an A record cut short)
// becomes SERVFAIL: nothing in it could be pinned or checked.
TEST_F(DnsForwarderTest, AnUnreadableAnswerForAnAllowedNameIsServfail) {
  policy::PinTable pins;
  std::vector<Denied> denied;
  Start(WithPolicy(MakePolicy(kAllowlist), &pins, &denied));
  const std::vector<uint8_t> q = QueryFor(0x5501, "www.allowed.test");
  SendQuery(5500, q);
  sockaddr_storage from;
  socklen_t from_len;
  auto up = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(up.has_value());
  std::vector<uint8_t> a = AnswerWith(*up, {ARecord("127.0.0.1")});
  a.pop_back();
  upstream_.Send(a, from, from_len);
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Rcode(got[0].second), kServFail);
  EXPECT_EQ(got[0].second.size(), q.size());
  EXPECT_EQ(fwd_->counters().policy.answers_malformed, 1u);
  EXPECT_EQ(fwd_->counters().answers_servfail, 1u);
  EXPECT_EQ(pins.size(), 0u);
}

// A policy replaced while running applies to the next query; a getter
// that returns null is no policy.
TEST_F(DnsForwarderTest, ThePolicyIsAskedForEachQuery) {
  std::shared_ptr<const policy::Policy> current = MakePolicy(kAllowlist);
  DnsForwarderOptions o;
  o.policy = [&current] { return current.get(); };
  Start(o);
  SendQuery(5600, QueryFor(0x5601, "evil.test"));
  auto got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Rcode(got[0].second), kNxDomain);
  current = nullptr;
  SendQuery(5600, QueryFor(0x5602, "evil.test"));
  sockaddr_storage from;
  socklen_t from_len;
  auto up = upstream_.Receive(&from, &from_len);
  ASSERT_TRUE(up.has_value());
  upstream_.Send(AnswerWith(*up, {ARecord("127.0.0.1")}), from, from_len);
  got = Answers(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(AnswerAddresses(got[0].second),
            std::vector<std::string>{"127.0.0.1"});
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

// A TCP listener on the fake upstream's address and port, served by hand
// and without blocking (the forwarder's loop runs in the same thread):
// Step() accepts, reads one length-prefixed query per connection and
// answers it with `answer(query)`.
struct TcpUpstream {
  int listener = -1;
  struct Conn {
    int fd = -1;
    std::vector<uint8_t> in;
    bool answered = false;
    bool eof = false;
  };
  std::vector<Conn> conns;
  std::function<std::vector<uint8_t>(const std::vector<uint8_t>&)> answer;

  explicit TcpUpstream(const SocketAddress& at) {
    listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage ss;
    const socklen_t len = ToSockaddr(at, ss);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&ss), len), 0)
        << std::strerror(errno);
    EXPECT_EQ(listen(listener, 16), 0);
  }
  ~TcpUpstream() {
    for (Conn& c : conns) close(c.fd);
    close(listener);
  }
  void Step() {
    for (;;) {
      const int fd =
          accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      Conn c;
      c.fd = fd;
      conns.push_back(std::move(c));
    }
    for (Conn& c : conns) {
      uint8_t buf[4096];
      for (;;) {
        const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
        if (n == 0) c.eof = true;
        if (n <= 0) break;
        c.in.insert(c.in.end(), buf, buf + n);
      }
      if (c.answered || c.in.size() < 2 ||
          c.in.size() < 2u + wire::LoadBe16(c.in.data()) || !answer) {
        continue;
      }
      const std::vector<uint8_t> q(c.in.begin() + 2, c.in.end());
      const std::vector<uint8_t> a = answer(q);
      std::vector<uint8_t> out = {static_cast<uint8_t>(a.size() >> 8),
                                  static_cast<uint8_t>(a.size())};
      out.insert(out.end(), a.begin(), a.end());
      // Blocking is fine: a few KiB into a loopback socket.
      size_t done = 0;
      while (done < out.size()) {
        const ssize_t n =
            send(c.fd, out.data() + done, out.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN) {
          pollfd p{c.fd, POLLOUT, 0};
          poll(&p, 1, 100);
          continue;
        }
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      c.answered = true;
    }
  }
};

class DnsForwarderTcpUpstreamTest : public DnsForwarderTcpTest {
 protected:
  // Connects a guest TCP socket to the DNS address and sends `q` on it.
  std::unique_ptr<tcp::TcpSocket> Ask(const std::vector<uint8_t>& q) {
    std::unique_ptr<tcp::TcpSocket> c =
        net_.a().tcp->Open(transport::Family::kIpv4);
    EXPECT_TRUE(c->Connect({net_.b().v4(), 53}).ok());
    Run(absl::Milliseconds(10));
    std::vector<uint8_t> m = {static_cast<uint8_t>(q.size() >> 8),
                              static_cast<uint8_t>(q.size())};
    m.insert(m.end(), q.begin(), q.end());
    EXPECT_EQ(*c->Write(m), m.size());
    return c;
  }
  // Turns everything (the wire, the forwarder's loop, the fake upstream
  // over TCP and, if `udp_answer` is set, over UDP) until the guest has
  // one whole answer on `c`, or 3 s of real time pass.
  std::optional<std::vector<uint8_t>> AnswerOn(
      tcp::TcpSocket& c, TcpUpstream* tcp_up,
      std::function<std::vector<uint8_t>(const std::vector<uint8_t>&)>
          udp_answer = nullptr) {
    std::vector<uint8_t> in;
    const absl::Time until = absl::Now() + absl::Seconds(3);
    while (absl::Now() < until) {
      Run(absl::Milliseconds(1));
      if (tcp_up) tcp_up->Step();
      sockaddr_storage from;
      socklen_t from_len;
      if (auto q = upstream_.Receive(&from, &from_len, 0)) {
        if (udp_answer) upstream_.Send(udp_answer(*q), from, from_len);
      }
      uint8_t buf[8192];
      absl::StatusOr<size_t> n = c.Read(buf);
      if (n.ok() && *n == 0) return std::nullopt;
      if (n.ok()) in.insert(in.end(), buf, buf + *n);
      if (in.size() >= 2 && in.size() >= 2u + wire::LoadBe16(in.data())) {
        return std::vector<uint8_t>(in.begin() + 2, in.end());
      }
      pollfd p{upstream_.fd, POLLIN, 0};
      poll(&p, 1, 1);
    }
    return std::nullopt;
  }
};

// Review 2026-12-06, finding 17 (issue 30, item 16): a query the guest sent
// over TCP goes upstream over TCP, so an answer too large for UDP arrives
// whole. The fake upstream answers UDP with TC=1 and TCP with 6000 bytes.
TEST_F(DnsForwarderTcpUpstreamTest, ATcpQueryGoesUpstreamOverTcp) {
  ASSERT_NE(fwd_, nullptr);
  TcpUpstream tcp_up(upstream_.addr);
  tcp_up.answer = [](const std::vector<uint8_t>& q) {
    std::vector<uint8_t> a = AnswerTo(q, 'T');
    a.resize(6000, 'T');
    return a;
  };
  const std::vector<uint8_t> q = QueryFor(0x4141, "big.test", 16);
  std::unique_ptr<tcp::TcpSocket> c = Ask(q);
  auto got = AnswerOn(*c, &tcp_up, [](const std::vector<uint8_t>& q) {
    std::vector<uint8_t> a = AnswerTo(q, 'U');
    a[2] |= 0x02;  // TC
    return a;
  });
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->size(), 6000u);
  EXPECT_EQ(wire::LoadBe16(got->data()), 0x4141);
  EXPECT_FALSE((*got)[2] & 0x02) << "truncated: it went over UDP";
  std::vector<uint8_t> want = AnswerTo(q, 'T');
  want.resize(6000, 'T');
  EXPECT_EQ(*got, want);
  EXPECT_EQ(fwd_->counters().answers_tcp, 1u);
  EXPECT_EQ(fwd_->pending(), 0u);
  // One connection upstream, closed after its answer.
  ASSERT_EQ(tcp_up.conns.size(), 1u);
  const absl::Time until = absl::Now() + absl::Seconds(2);
  while (!tcp_up.conns[0].eof && absl::Now() < until) {
    Run(absl::Milliseconds(1));
    tcp_up.Step();
  }
  EXPECT_TRUE(tcp_up.conns[0].eof);
}

// An upstream that takes the TCP query and never answers: the query times
// out and its connection is closed.
TEST_F(DnsForwarderTcpUpstreamTest, AnUnansweredTcpQueryTimesOut) {
  ASSERT_NE(fwd_, nullptr);
  TcpUpstream tcp_up(upstream_.addr);  // answer unset: reads only
  std::unique_ptr<tcp::TcpSocket> c = Ask(QueryFor(0x4343, "a.test"));
  const absl::Time until = absl::Now() + absl::Seconds(2);
  while ((tcp_up.conns.empty() || tcp_up.conns[0].in.empty()) &&
         absl::Now() < until) {
    Run(absl::Milliseconds(1));
    tcp_up.Step();
  }
  ASSERT_EQ(tcp_up.conns.size(), 1u);
  EXPECT_EQ(fwd_->pending(), 1u);
  Run(absl::Seconds(6));  // the fake clock past the 5 s timeout
  EXPECT_EQ(fwd_->pending(), 0u);
  EXPECT_EQ(fwd_->counters().timeouts, 1u);
  const absl::Time until2 = absl::Now() + absl::Seconds(2);
  while (!tcp_up.conns[0].eof && absl::Now() < until2) tcp_up.Step();
  EXPECT_TRUE(tcp_up.conns[0].eof);
}

// TCP connections upstream are bounded (max_tcp_clients): past it a TCP
// query gets SERVFAIL.
TEST_F(DnsForwarderTcpUpstreamTest, TcpConnectionsUpstreamAreBounded) {
  ASSERT_NE(fwd_, nullptr);
  fwd_.reset();
  DnsForwarderOptions o;
  o.listen = {SocketAddress{net_.b().v4(), 53}};
  o.upstreams = {upstream_.addr};
  o.max_tcp_clients = 1;
  auto f = DnsForwarder::Create(udp_, net_.b().tcp.get(), net_.b().chunks,
                                *loop_, o);
  ASSERT_TRUE(f.ok()) << f.status();
  fwd_ = *std::move(f);
  TcpUpstream tcp_up(upstream_.addr);  // never answers
  // One guest connection, two queries on it.
  std::unique_ptr<tcp::TcpSocket> c =
      net_.a().tcp->Open(transport::Family::kIpv4);
  ASSERT_TRUE(c->Connect({net_.b().v4(), 53}).ok());
  Run(absl::Milliseconds(10));
  std::vector<uint8_t> m;
  for (uint16_t id : {0x5151, 0x5252}) {
    const std::vector<uint8_t> q = QueryFor(id, "a.test");
    m.push_back(0);
    m.push_back(static_cast<uint8_t>(q.size()));
    m.insert(m.end(), q.begin(), q.end());
  }
  ASSERT_EQ(*c->Write(m), m.size());
  auto got = AnswerOn(*c, &tcp_up);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(wire::LoadBe16(got->data()), 0x5252);
  EXPECT_EQ(Rcode(*got), kServFail);
  EXPECT_EQ(fwd_->counters().upstream_tcp_full, 1u);
  EXPECT_EQ(fwd_->pending(), 1u);
}

// Item 16/18: nobody listens on the upstream's TCP port: the guest's TCP
// query gets SERVFAIL (rather than waiting for its own timeout).
TEST_F(DnsForwarderTcpUpstreamTest, ARefusedTcpUpstreamIsAnsweredServfail) {
  ASSERT_NE(fwd_, nullptr);
  const std::vector<uint8_t> q = QueryFor(0x4242, "a.test");
  std::unique_ptr<tcp::TcpSocket> c = Ask(q);
  auto got = AnswerOn(*c, nullptr);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(wire::LoadBe16(got->data()), 0x4242);
  EXPECT_EQ(Rcode(*got), kServFail);
  EXPECT_EQ(got->size(), q.size());  // the question repeated
  EXPECT_EQ(fwd_->counters().upstream_refused, 1u);
  EXPECT_EQ(fwd_->pending(), 0u);
}

// The policy over TCP: a denied name's NXDOMAIN comes back with its
// length prefix and no connection is made upstream; an allowed name's
// answer is filtered and pinned.
TEST_F(DnsForwarderTcpUpstreamTest, ThePolicyAppliesOverTcp) {
  ASSERT_NE(fwd_, nullptr);
  fwd_.reset();
  policy::PinTable pins;
  std::vector<Denied> denied;
  DnsForwarderOptions o = WithPolicy(MakePolicy(kAllowlist), &pins, &denied);
  o.listen = {SocketAddress{net_.b().v4(), 53}};
  o.upstreams = {upstream_.addr};
  auto f = DnsForwarder::Create(udp_, net_.b().tcp.get(), net_.b().chunks,
                                *loop_, o);
  ASSERT_TRUE(f.ok()) << f.status();
  fwd_ = *std::move(f);
  TcpUpstream tcp_up(upstream_.addr);
  tcp_up.answer = [](const std::vector<uint8_t>& q) {
    return AnswerWith(q, {ARecord("192.168.1.1"), ARecord("203.0.113.44")});
  };

  const std::vector<uint8_t> deny_q = QueryFor(0x6101, "evil.test");
  std::unique_ptr<tcp::TcpSocket> c1 = Ask(deny_q);
  auto got = AnswerOn(*c1, &tcp_up);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->size(), deny_q.size());
  EXPECT_EQ(wire::LoadBe16(got->data()), 0x6101);
  EXPECT_EQ(Rcode(*got), kNxDomain);
  EXPECT_TRUE(tcp_up.conns.empty());
  ASSERT_EQ(denied.size(), 1u);
  EXPECT_EQ(denied[0].qname, "evil.test");

  const std::vector<uint8_t> allow_q = QueryFor(0x6102, "api.allowed.test");
  std::unique_ptr<tcp::TcpSocket> c2 = Ask(allow_q);
  got = AnswerOn(*c2, &tcp_up);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(wire::LoadBe16(got->data()), 0x6102);
  EXPECT_EQ(Rcode(*got), 0);
  EXPECT_EQ(AnswerAddresses(*got), std::vector<std::string>{"203.0.113.44"});
  EXPECT_EQ(tcp_up.conns.size(), 1u);
  EXPECT_EQ(pins.Find(*IpAddress::Parse("203.0.113.44"), net_.now()),
            "api.allowed.test");
  EXPECT_FALSE(pins.Find(*IpAddress::Parse("192.168.1.1"), net_.now()));
  EXPECT_EQ(fwd_->counters().policy.records_stripped, 1u);
  EXPECT_EQ(fwd_->counters().answers_tcp, 1u);
}

}  // namespace
}  // namespace netstack::backend
