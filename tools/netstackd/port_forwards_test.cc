// PortForwards on the spliced path with this process's own namespace as
// the guest's, on 127.0.0.1 only: a connection is relayed, and a listener
// that cannot accept (out of fds) neither spins nor loses the client.
#include "tools/netstackd/port_forwards.h"

#include <fcntl.h>
#include <netinet/in.h>
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

}  // namespace
}  // namespace netstack::tools
