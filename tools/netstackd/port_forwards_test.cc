// PortForwards on the spliced path with this process's own namespace as
// the guest's, on 127.0.0.1 only: a connection is relayed, a listener
// that cannot accept (out of fds) neither spins nor loses the client,
// clients past the connection limits are reset, and a UDP forward's port
// cannot be shared by another socket.
#include "tools/netstackd/port_forwards.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace netstack::tools {
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

}  // namespace
}  // namespace netstack::tools
