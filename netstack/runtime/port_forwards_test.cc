// PortForwards on the spliced path with this process's own namespace as
// the guest's, on 127.0.0.1 only: a connection is relayed, a listener
// that cannot accept (out of fds) neither spins nor loses the client,
// clients past the connection limits are reset, a UDP forward's port
// cannot be shared by another socket, and a full table of UDP client
// flows makes room for a new client.
#include "netstack/runtime/port_forwards.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace netstack::runtime {
namespace {

uint16_t BoundPort(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

int Listen127() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(listen(fd, 16), 0);
  return fd;
}

int Connect127(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

class PortForwardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = eventloop::EventLoop::Create();
    ASSERT_TRUE(l.ok());
    loop_ = *std::move(l);
    netns_ = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(netns_, 0);
    guest_ = Listen127();
    // A free port for the forward's listener.
    const int probe = Listen127();
    host_port_ = BoundPort(probe);
    close(probe);
    PortForwards::Options o;
    o.loop = loop_.get();
    o.guest_netns_fd = netns_;
    o.path = ForwardPath::kSplice;
    fwd_ = std::make_unique<PortForwards>(o);
    ForwardRule r;
    r.bind = transport::IpAddress(wire::Ipv4Address::FromU32(0x7f000001));
    r.host_port = host_port_;
    r.guest_port = BoundPort(guest_);
    auto id = fwd_->Add("test", {r});
    ASSERT_TRUE(id.ok()) << id.status();
  }
  void TearDown() override {
    fwd_.reset();
    close(guest_);
    close(netns_);
  }
  void Turn(int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(loop_->RunOnce(absl::Milliseconds(10)).ok());
    }
  }
  // Relays one message client -> guest server; true when it arrived.
  bool Relayed(int client) {
    Turn(5);
    const int server = accept4(guest_, nullptr, nullptr, SOCK_NONBLOCK);
    if (server < 0) return false;
    EXPECT_EQ(write(client, "ping", 4), 4);
    char buf[8] = {};
    ssize_t n = -1;
    for (int i = 0; i < 50 && n <= 0; ++i) {
      Turn(1);
      n = read(server, buf, sizeof(buf));
    }
    close(server);
    return n == 4 && std::memcmp(buf, "ping", 4) == 0;
  }

  std::unique_ptr<eventloop::EventLoop> loop_;
  int netns_ = -1;
  int guest_ = -1;
  uint16_t host_port_ = 0;
  std::unique_ptr<PortForwards> fwd_;
};

TEST_F(PortForwardsTest, RelaysAConnection) {
  const int c = Connect127(host_port_);
  EXPECT_TRUE(Relayed(c));
  close(c);
  const ForwardInfo i = fwd_->List().at(0);
  EXPECT_EQ(i.counters.accepted, 1u);
  EXPECT_EQ(i.counters.accept_errors, 0u);
}

TEST_F(PortForwardsTest, OutOfFdsNeitherSpinsNorLosesTheClient) {
  const int c = Connect127(host_port_);  // waits in the backlog
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  // Every fd below the limit taken: accept() fails with EMFILE.
  rlimit low = old;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) {
    filler.push_back(fd);
  }
  ASSERT_EQ(errno, EMFILE);
  const uint64_t events0 = loop_->stats().events;
  Turn(30);  // about 300 ms, or 30 immediate wake-ups if it spun
  const uint64_t events = loop_->stats().events - events0;
  for (int fd : filler) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  ForwardInfo i = fwd_->List().at(0);
  EXPECT_GE(i.counters.accept_errors, 1u);
  // One failed accept per 100 ms pause, not one per turn.
  EXPECT_LE(events, 8u) << "the listener spun on EMFILE";
  EXPECT_EQ(i.counters.accepted, 0u);
  // With fds back, the client that waited is served.
  Turn(12);
  EXPECT_TRUE(Relayed(c));
  EXPECT_EQ(fwd_->List().at(0).counters.accepted, 1u);
  close(c);
}

// Whether the peer reset `fd` (its read fails with ECONNRESET), waiting
// up to a second for it.
bool WasReset(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 1000) != 1) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) < 0 && errno == ECONNRESET;
}

// Whether `fd` is still open: nothing to read, no error, no EOF.
bool StillOpen(int fd) {
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN;
}

// Past the per-forward and the total limit of spliced connections a client
// is accepted and reset at once (not left in the backlog) and counted; a
// connection that ends gives its slot back. Before, every client was
// spliced: each took two fds and, once the fds ran out, the guest's own
// flows failed (review 2026-12-06, finding 7).
TEST(PortForwardsLimits, ClientsPastALimitAreReset) {
  auto l = eventloop::EventLoop::Create();
  ASSERT_TRUE(l.ok());
  eventloop::EventLoop& loop = **l;
  const int netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(netns, 0);
  const int guest = Listen127();
  PortForwards::Options o;
  o.loop = &loop;
  o.guest_netns_fd = netns;
  o.path = ForwardPath::kSplice;
  o.max_conns = 3;
  o.max_conns_per_forward = 2;
  std::vector<int> clients;
  {
    PortForwards fwd(o);
    uint16_t ports[2];
    for (uint16_t& port : ports) {
      const int probe = Listen127();
      port = BoundPort(probe);
      close(probe);
      ForwardRule r;
      r.bind = transport::IpAddress(wire::Ipv4Address::FromU32(0x7f000001));
      r.host_port = port;
      r.guest_port = BoundPort(guest);
      ASSERT_TRUE(fwd.Add("test", {r}).ok());
    }
    auto turn = [&] {
      for (int i = 0; i < 5; ++i) {
        ASSERT_TRUE(loop.RunOnce(absl::Milliseconds(10)).ok());
      }
    };
    auto counters = [&](int i) { return fwd.List().at(i).counters; };
    // Three clients on the first forward: two spliced, the third reset.
    for (int i = 0; i < 3; ++i) clients.push_back(Connect127(ports[0]));
    turn();
    EXPECT_EQ(counters(0).accepted, 2u);
    EXPECT_EQ(counters(0).active, 2u);
    EXPECT_EQ(counters(0).refused_limit, 1u);
    EXPECT_TRUE(StillOpen(clients[0]));
    EXPECT_TRUE(StillOpen(clients[1]));
    EXPECT_TRUE(WasReset(clients[2]));
    // Two on the second: one fits the total of three.
    for (int i = 0; i < 2; ++i) clients.push_back(Connect127(ports[1]));
    turn();
    EXPECT_EQ(counters(1).accepted, 1u);
    EXPECT_EQ(counters(1).refused_limit, 1u);
    EXPECT_TRUE(StillOpen(clients[3]));
    EXPECT_TRUE(WasReset(clients[4]));
    // One of the first forward's ends (the client resets it): its slot
    // takes a new client of the second.
    const linger lg{1, 0};
    ASSERT_EQ(setsockopt(clients[0], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)),
              0);
    close(clients[0]);
    clients[0] = -1;
    turn();
    EXPECT_EQ(counters(0).active, 1u);
    clients.push_back(Connect127(ports[1]));
    turn();
    EXPECT_TRUE(StillOpen(clients[5]));
    EXPECT_EQ(counters(1).accepted, 2u);
    EXPECT_EQ(counters(1).active, 2u);
    EXPECT_EQ(counters(1).refused_limit, 1u);
    EXPECT_NE(fwd.FormatCounters().find("forward.1.refused_limit 1\n"),
              std::string::npos)
        << fwd.FormatCounters();
  }
  for (int fd : clients) {
    if (fd >= 0) close(fd);
  }
  close(guest);
  close(netns);
}

// Another socket with SO_REUSEADDR must not bind beside a -u forward's:
// for UDP, SO_REUSEADDR on both sockets is all the kernel asks before it
// lets them share a port, whoever owns them, and the newest one then gets
// the clients' datagrams (a local user took over a forward that way).
TEST(PortForwardsUdp, ThePortCannotBeShared) {
  auto l = eventloop::EventLoop::Create();
  ASSERT_TRUE(l.ok());
  const int netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(netns, 0);
  // A free UDP port.
  int probe = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const uint16_t port = BoundPort(probe);
  close(probe);
  PortForwards::Options o;
  o.loop = l->get();
  o.guest_netns_fd = netns;
  o.path = ForwardPath::kSplice;
  {
    PortForwards fwd(o);
    ForwardRule r;
    r.udp = true;
    r.host_port = port;  // no BIND_ADDR: 0.0.0.0 and [::]
    r.guest_port = 9;
    auto id = fwd.Add("test", {r});
    ASSERT_TRUE(id.ok()) << id.status();
    const int one = 1;
    struct Try {
      int family;
      const char* addr;
    };
    for (const Try& t : {Try{AF_INET, "0.0.0.0"}, Try{AF_INET, "127.0.0.1"},
                         Try{AF_INET6, "::"}}) {
      const int s = socket(t.family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      ASSERT_GE(s, 0);
      ASSERT_EQ(setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
      sockaddr_storage ss{};
      socklen_t len = 0;
      if (t.family == AF_INET) {
        auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        inet_pton(AF_INET, t.addr, &v4->sin_addr);
        len = sizeof(*v4);
      } else {
        ASSERT_EQ(setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)),
                  0);
        auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        inet_pton(AF_INET6, t.addr, &v6->sin6_addr);
        len = sizeof(*v6);
      }
      const int rc = bind(s, reinterpret_cast<sockaddr*>(&ss), len);
      const int err = errno;
      close(s);
      EXPECT_EQ(rc, -1) << t.addr << ":" << port
                        << " was bound beside the forward's socket";
      if (rc == -1) {
        EXPECT_EQ(err, EADDRINUSE) << t.addr;
      }
    }
  }
  close(netns);
}

// -u client flows on the socket path when the table is full: a forward
// on 127.0.0.1 to a "guest" UDP socket on 127.0.0.1 that the test reads
// and answers by hand (only datagrams that start with "real"), with a
// table of 4 flows and a fake clock. Before, a full table refused every
// new client until a flow had been idle for --udp-timeout: 40 ports of
// one host, never answered, locked real clients out for 180 s (second
// review of issue #30, finding 5).
class PortForwardsUdpTable : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = eventloop::EventLoop::Create({}, [this] { return now_; });
    ASSERT_TRUE(l.ok());
    loop_ = *std::move(l);
    netns_ = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(netns_, 0);
    guest_ = BindUdp127(0);
    PortForwards::Options o;
    o.loop = loop_.get();
    o.guest_netns_fd = netns_;
    o.path = ForwardPath::kSplice;
    o.max_udp_flows = 4;
    o.udp_idle_timeout = absl::Seconds(180);
    fwd_ = std::make_unique<PortForwards>(o);
    for (uint16_t& port : host_ports_) {
      const int probe = BindUdp127(0);
      port = BoundPort(probe);
      close(probe);
      ForwardRule r;
      r.udp = true;
      r.bind = transport::IpAddress(wire::Ipv4Address::FromU32(0x7f000001));
      r.host_port = port;
      r.guest_port = BoundPort(guest_);
      auto id = fwd_->Add("test", {r});
      ASSERT_TRUE(id.ok()) << id.status();
    }
  }
  void TearDown() override {
    fwd_.reset();
    for (const auto& [name, fd] : clients_) close(fd);
    close(guest_);
    close(netns_);
  }

  static int BindUdp127(uint16_t port) {
    const int fd =
        socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    return fd;
  }

  void Turn(int n = 3) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(loop_->RunOnce(absl::Milliseconds(5)).ok());
    }
  }

  // The guest reads what reached it and echoes the datagrams marked
  // "real"; the flood's it leaves unanswered.
  void Serve() {
    char buf[64];
    sockaddr_storage from;
    for (;;) {
      socklen_t len = sizeof(from);
      const ssize_t n = recvfrom(guest_, buf, sizeof(buf), MSG_DONTWAIT,
                                 reinterpret_cast<sockaddr*>(&from), &len);
      if (n < 0) return;
      if (n >= 4 && std::memcmp(buf, "real", 4) == 0) {
        EXPECT_EQ(
            sendto(guest_, buf, n, 0, reinterpret_cast<sockaddr*>(&from), len),
            n);
      }
    }
  }

  // Client `name` (a socket of its own, made on first use) sends one
  // datagram to forward `forward` (0 or 1); `real`: marked to be
  // answered. True if the answer came back.
  bool Send(const std::string& name, bool real = true, int forward = 0) {
    int& fd = clients_[name];
    if (fd == 0) {
      fd = BindUdp127(0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(host_ports_[forward]);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    }
    const std::string text = (real ? "real " : "flood ") + name;
    EXPECT_EQ(send(fd, text.data(), text.size(), 0),
              static_cast<ssize_t>(text.size()));
    Turn();
    Serve();
    Turn();
    char buf[64];
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    return n == static_cast<ssize_t>(text.size()) &&
           std::memcmp(buf, text.data(), n) == 0;
  }

  ForwardCounters Counters(int forward = 0) {
    return fwd_->List().at(forward).counters;
  }

  Instant now_ = absl::UnixEpoch() + absl::Hours(1);
  std::unique_ptr<eventloop::EventLoop> loop_;
  int netns_ = -1;
  int guest_ = -1;
  uint16_t host_ports_[2] = {};
  std::map<std::string, int> clients_;
  std::unique_ptr<PortForwards> fwd_;
};

TEST_F(PortForwardsUdpTable, AFullTableEvictsAnUnansweredFlow) {
  ASSERT_TRUE(Send("a"));
  // Six ports that the guest never answers: the fourth to sixth each
  // evict the least recently active unanswered flow, never "a".
  for (int i = 0; i < 6; ++i) {
    EXPECT_FALSE(Send(absl::StrCat("flood", i), /*real=*/false));
  }
  EXPECT_TRUE(Send("b")) << fwd_->FormatCounters();
  EXPECT_TRUE(Send("a"));  // its flow is still open
  const ForwardCounters c = Counters();
  EXPECT_EQ(c.accepted, 8u);
  EXPECT_EQ(c.active, 4u);
  EXPECT_EQ(c.udp_evicted_unreplied, 4u);
  EXPECT_EQ(c.udp_evicted_replied, 0u);
  EXPECT_EQ(c.udp_refused_limit, 0u);
  const std::string text = fwd_->FormatCounters();
  EXPECT_NE(text.find("forward.1.udp_evicted_unreplied 4\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("forward.1.udp_evicted_replied 0\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("forward.1.udp_expired_unreplied 0\n"), std::string::npos)
      << text;
}

TEST_F(PortForwardsUdpTable, EveryFlowAnsweredTheLeastRecentlyActiveGoes) {
  for (const char* name : {"a", "b", "c", "d"}) ASSERT_TRUE(Send(name));
  ASSERT_TRUE(Send("b"));  // "a" is now the least recently active
  EXPECT_TRUE(Send("e")) << fwd_->FormatCounters();
  for (const char* name : {"b", "c", "d", "e"}) EXPECT_TRUE(Send(name));
  EXPECT_EQ(Counters().accepted, 5u);  // b..e kept their flows
  EXPECT_TRUE(Send("a"));              // back, it evicts "b"
  const ForwardCounters c = Counters();
  EXPECT_EQ(c.accepted, 6u);
  EXPECT_EQ(c.udp_evicted_replied, 2u);
  EXPECT_EQ(c.udp_evicted_unreplied, 0u);
  EXPECT_EQ(c.udp_refused_limit, 0u);
}

// The table is every -u forward's: a flood on one makes room for a real
// client of another.
TEST_F(PortForwardsUdpTable, EvictionCrossesForwards) {
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(Send(absl::StrCat("flood", i), /*real=*/false, 0));
  }
  EXPECT_TRUE(Send("a", /*real=*/true, 1)) << fwd_->FormatCounters();
  EXPECT_EQ(Counters(0).udp_evicted_unreplied, 1u);
  EXPECT_EQ(Counters(0).active, 3u);
  EXPECT_EQ(Counters(1).accepted, 1u);
  EXPECT_EQ(Counters(1).udp_refused_limit, 0u);
}

// An unanswered flow closes after 30 s, as conntrack's UNREPLIED entry
// does; an answered one after the idle timeout.
TEST_F(PortForwardsUdpTable, AnUnansweredFlowClosesAfter30Seconds) {
  ASSERT_TRUE(Send("a"));
  EXPECT_FALSE(Send("flood", /*real=*/false));
  now_ += absl::Seconds(29);
  Turn();
  EXPECT_EQ(Counters().active, 2u);
  now_ += absl::Seconds(2);
  Turn();
  ForwardCounters c = Counters();
  EXPECT_EQ(c.active, 1u) << fwd_->FormatCounters();
  EXPECT_EQ(c.udp_expired, 1u);
  EXPECT_EQ(c.udp_expired_unreplied, 1u);
  EXPECT_TRUE(Send("a"));  // still open: no new flow
  EXPECT_EQ(Counters().accepted, 2u);
  now_ += absl::Seconds(179);
  Turn();
  EXPECT_EQ(Counters().active, 1u);
  now_ += absl::Seconds(2);
  Turn();
  c = Counters();
  EXPECT_EQ(c.active, 0u);
  EXPECT_EQ(c.udp_expired, 2u);
  EXPECT_EQ(c.udp_expired_unreplied, 1u);
}

}  // namespace
}  // namespace netstack::runtime
