// The services against a netstack client on the fake-clock two-stack
// network (netstack/tcp/tcp_test_util.h): host B runs the services, host A
// is the client. Covers what the kernel interop test cannot control:
// bounded memory when the client stops reading, idle timeouts, exact
// pipelining, and the error paths.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/tcp/tcp_test_util.h"
#include "netstack/udp/udp_layer.h"
#include "tools/netstackd/services/discard_service.h"
#include "tools/netstackd/services/echo_service.h"
#include "tools/netstackd/services/http_server.h"

namespace netstack::tools {
namespace {

using tcp::TcpSocket;
using transport::Family;
using transport::SocketAddress;

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s[i] = static_cast<char>(x);
  }
  return s;
}

void WriteFile(const std::string& path, const std::string& data) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = write(fd, data.data() + off, data.size() - off);
    ASSERT_GT(n, 0);
    off += static_cast<size_t>(n);
  }
  close(fd);
}

// A client connection on host A that keeps everything it reads.
struct Client {
  std::unique_ptr<TcpSocket> socket;
  std::string in;
  bool eof = false;
  bool error = false;

  // Reads what is there (up to `max` bytes in all, to play a slow reader).
  void ReadAvailable(size_t max = SIZE_MAX) {
    uint8_t buf[65536];
    while (!eof && !error && in.size() < max) {
      const size_t want = std::min(sizeof(buf), max - in.size());
      auto n = socket->Read(std::span<uint8_t>(buf, want));
      if (!n.ok()) {
        if (!transport::IsWouldBlock(n.status())) error = true;
        return;
      }
      if (*n == 0) {
        eof = true;
        return;
      }
      in.append(reinterpret_cast<char*>(buf), *n);
    }
  }
};

class ServicesTest : public ::testing::Test {
 protected:
  ServicesTest()
      : udp_a_(*net_.a().stack, net_.a().chunks, net_.a().packets,
               net_.a().notifier, 1),
        udp_b_(*net_.b().stack, net_.b().chunks, net_.b().packets,
               net_.b().notifier, 2),
        timers_(net_.now()) {
    ctx_.tcp = net_.b().tcp.get();
    ctx_.udp = &udp_b_;
    ctx_.timers = &timers_;
    ctx_.now = net_.now();
    root_ = ::testing::TempDir() + "/www_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    mkdir(root_.c_str(), 0755);
  }

  // What netstackd's turn-end hook does after the notifier ran.
  void AfterStep() {
    ctx_.now = net_.now();
    timers_.Advance(net_.now());
    for (auto& s : services_) s->Sweep();
  }

  bool RunUntil(const std::function<bool()>& done,
                Duration limit = absl::Seconds(30)) {
    return net_.RunUntil(
        [&] {
          AfterStep();
          return done();
        },
        limit);
  }

  void RunFor(Duration d) {
    RunUntil([] { return false; }, d);
  }

  HttpServer* StartHttp(Duration idle = absl::Seconds(60)) {
    HttpServerOptions o;
    o.root = root_;
    o.port = 80;
    o.idle_timeout = idle;
    o.send_date = false;
    auto s = HttpServer::Start(ctx_, o);
    EXPECT_TRUE(s.ok()) << s.status();
    HttpServer* raw = s->get();
    services_.push_back(std::move(*s));
    return raw;
  }

  Client Connect(uint16_t port, bool v6 = false) {
    Client c;
    c.socket = net_.a().tcp->Open(v6 ? Family::kIpv6 : Family::kIpv4);
    EXPECT_TRUE(
        c.socket->Connect({v6 ? net_.b().v6() : net_.b().v4(), port}).ok());
    EXPECT_TRUE(RunUntil(
        [&] { return c.socket->state() == tcp::TcpState::kEstablished; }));
    return c;
  }

  void Send(Client& c, const std::string& data) {
    size_t off = 0;
    ASSERT_TRUE(RunUntil([&] {
      while (off < data.size()) {
        auto n = c.socket->Write(std::span<const uint8_t>(
            reinterpret_cast<const uint8_t*>(data.data()) + off,
            data.size() - off));
        if (!n.ok()) return false;
        off += *n;
      }
      return true;
    }));
  }

  tcp::testing::Network net_;
  udp::UdpLayer udp_a_;
  udp::UdpLayer udp_b_;
  eventloop::TimerWheel timers_;
  ServiceContext ctx_;
  std::vector<std::unique_ptr<Service>> services_;
  std::string root_;
};

// Splits `data` into complete responses (Content-Length framing).
struct Response {
  std::string head;
  std::string body;
};
std::vector<Response> SplitResponses(const std::string& data) {
  std::vector<Response> out;
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t end = data.find("\r\n\r\n", pos);
    if (end == std::string::npos) break;
    Response r;
    r.head = data.substr(pos, end + 4 - pos);
    const size_t cl = r.head.find("Content-Length: ");
    size_t len = 0;
    if (cl != std::string::npos) len = std::stoul(r.head.substr(cl + 16));
    if (end + 4 + len > data.size()) break;
    r.body = data.substr(end + 4, len);
    out.push_back(r);
    pos = end + 4 + len;
  }
  return out;
}

TEST_F(ServicesTest, HttpGetHeadKeepAliveBothFamilies) {
  const std::string blob = Pattern(3 << 20, 1);
  WriteFile(root_ + "/blob.bin", blob);
  WriteFile(root_ + "/a.txt", "hello\n");
  HttpServer* http = StartHttp();
  for (bool v6 : {false, true}) {
    Client c = Connect(80, v6);
    Send(c, "GET /blob.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_TRUE(RunUntil([&] {
      c.ReadAvailable();
      return SplitResponses(c.in).size() == 1;
    })) << c.in.size();
    auto r = SplitResponses(c.in);
    EXPECT_NE(r[0].head.find("HTTP/1.1 200 OK\r\n"), std::string::npos);
    EXPECT_NE(r[0].head.find("Content-Type: application/octet-stream"),
              std::string::npos);
    EXPECT_NE(r[0].head.find("Connection: keep-alive"), std::string::npos);
    EXPECT_TRUE(r[0].body == blob);
    // Same connection: HEAD, then a 404, then a GET.
    c.in.clear();
    Send(c, "HEAD /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_TRUE(RunUntil([&] {
      c.ReadAvailable();
      return c.in.find("\r\n\r\n") != std::string::npos;
    }));
    EXPECT_NE(c.in.find("Content-Length: 6\r\n"), std::string::npos);
    EXPECT_TRUE(c.in.ends_with("\r\n\r\n")) << "HEAD must have no body";
    c.in.clear();
    Send(c,
         "GET /missing HTTP/1.1\r\nHost: x\r\n\r\nGET /a.txt HTTP/1.1\r\nHost: "
         "x\r\n\r\n");
    ASSERT_TRUE(RunUntil([&] {
      c.ReadAvailable();
      return SplitResponses(c.in).size() == 2;
    }));
    r = SplitResponses(c.in);
    EXPECT_NE(r[0].head.find("404 Not Found"), std::string::npos);
    EXPECT_EQ(r[1].body, "hello\n");
    EXPECT_FALSE(c.eof);
  }
  EXPECT_EQ(http->counters().connections, 2u);
  EXPECT_EQ(http->counters().requests, 8u);
  EXPECT_EQ(http->counters().status_4xx, 2u);
}

TEST_F(ServicesTest, HttpPipelinedInOrderAndConnectionClose) {
  WriteFile(root_ + "/one", "1111");
  WriteFile(root_ + "/two", Pattern(200000, 2));
  WriteFile(root_ + "/three", "333");
  StartHttp();
  Client c = Connect(80);
  // Pipelined, and split at awkward places across writes.
  const std::string reqs =
      "GET /one HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /two HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /three HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
      "GET /one HTTP/1.1\r\nHost: x\r\n\r\n";  // after close: ignored
  Send(c, reqs.substr(0, 10));
  RunFor(absl::Milliseconds(5));
  Send(c, reqs.substr(10));
  ASSERT_TRUE(RunUntil([&] {
    c.ReadAvailable();
    return c.eof || c.error;
  }));
  EXPECT_TRUE(c.eof) << "the server closes after Connection: close";
  auto r = SplitResponses(c.in);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].body, "1111");
  EXPECT_TRUE(r[1].body == Pattern(200000, 2));
  EXPECT_EQ(r[2].body, "333");
  EXPECT_NE(r[2].head.find("Connection: close"), std::string::npos);
}

TEST_F(ServicesTest, HttpErrorsClose) {
  StartHttp();
  struct Case {
    std::string request;
    std::string status;
  };
  std::vector<Case> cases = {
      {"GET /../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request"},
      {"GET /%2e%2e/x HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request"},
      {"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n", "405 Method Not Allowed"},
      {"GET / HTTP/1.1\r\nHost: x\r\nX: " + std::string(17000, 'a') +
           "\r\n\r\n",
       "413 Content Too Large"},
      {"GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n",
       "414 URI Too Long"},
      {"GET / HTTP/2.0\r\n\r\n", "505 HTTP Version Not Supported"},
  };
  for (const Case& k : cases) {
    Client c = Connect(80);
    Send(c, k.request);
    ASSERT_TRUE(RunUntil([&] {
      c.ReadAvailable();
      return c.in.find("\r\n\r\n") != std::string::npos &&
             (k.status.starts_with("405") || c.eof);
    })) << k.status
        << ": " << c.in;
    EXPECT_TRUE(c.in.starts_with("HTTP/1.1 " + k.status + "\r\n")) << c.in;
    if (k.status.starts_with("405")) {
      EXPECT_NE(c.in.find("Allow: GET, HEAD\r\n"), std::string::npos);
    }
  }
}

TEST_F(ServicesTest, HttpFlowControlBoundsWhatIsQueued) {
  const std::string blob = Pattern(24 << 20, 3);
  WriteFile(root_ + "/big", blob);
  HttpServer* http = StartHttp();
  Client c = Connect(80);
  Send(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
  // The client reads nothing for a while: the server may only have put
  // into the socket what fits its send buffer and the client's window.
  RunFor(absl::Seconds(2));
  const uint64_t queued = http->counters().body_bytes;
  const tcp::ConnectionOptions& o = net_.a().tcp->options().connection;
  EXPECT_LE(queued, uint64_t{o.send_buffer} + o.max_receive_buffer +
                        HttpServer::kFileChunkBytes);
  EXPECT_LT(queued, blob.size());
  // Then it reads everything.
  ASSERT_TRUE(RunUntil(
      [&] {
        c.ReadAvailable();
        return SplitResponses(c.in).size() == 1;
      },
      absl::Seconds(120)));
  EXPECT_TRUE(SplitResponses(c.in)[0].body == blob);
}

TEST_F(ServicesTest, HttpIdleTimeout) {
  HttpServer* http = StartHttp(absl::Seconds(5));
  Client c = Connect(80);
  RunFor(absl::Seconds(6));
  ASSERT_TRUE(RunUntil([&] {
    c.ReadAvailable();
    return c.eof;
  }));
  EXPECT_EQ(http->counters().idle_timeouts, 1u);
  EXPECT_EQ(http->open_connections(), 0u);
}

TEST_F(ServicesTest, HttpRootMustBeADirectory) {
  HttpServerOptions o;
  o.root = root_ + "/does-not-exist";
  EXPECT_TRUE(absl::IsNotFound(HttpServer::Start(ctx_, o).status()));
  WriteFile(root_ + "/file", "x");
  o.root = root_ + "/file";
  EXPECT_FALSE(HttpServer::Start(ctx_, o).ok());
}

TEST_F(ServicesTest, EchoWithFlowControl) {
  auto echo = EchoService::Start(ctx_, 7);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EchoService* e = echo->get();
  services_.push_back(std::move(*echo));
  Client c = Connect(7, /*v6=*/true);
  const std::string data = Pattern(16 << 20, 4);
  size_t off = 0;
  // Write as much as the client's send buffer takes, reading nothing.
  RunUntil(
      [&] {
        while (off < data.size()) {
          auto n = c.socket->Write(std::span<const uint8_t>(
              reinterpret_cast<const uint8_t*>(data.data()) + off,
              data.size() - off));
          if (!n.ok()) break;
          off += *n;
        }
        return false;
      },
      absl::Seconds(2));
  // Echo stopped reading when its writes would block: it holds at most
  // its own 64 KiB beyond what the TCP buffers hold.
  const tcp::ConnectionOptions& o = net_.a().tcp->options().connection;
  EXPECT_LE(e->counters().tcp_bytes, uint64_t{o.send_buffer} +
                                         o.max_receive_buffer +
                                         EchoService::kBufferBytes);
  EXPECT_LT(off, data.size()) << "the client should have been blocked";
  // Now read while writing the rest, then half-close.
  bool shut = false;
  ASSERT_TRUE(RunUntil(
      [&] {
        while (off < data.size()) {
          auto n = c.socket->Write(std::span<const uint8_t>(
              reinterpret_cast<const uint8_t*>(data.data()) + off,
              data.size() - off));
          if (!n.ok()) break;
          off += *n;
        }
        if (off == data.size() && !shut) {
          shut = c.socket->Shutdown(false, true).ok();
        }
        c.ReadAvailable();
        return c.eof;
      },
      absl::Seconds(120)));
  EXPECT_EQ(c.in.size(), data.size());
  EXPECT_TRUE(c.in == data);
  EXPECT_EQ(e->counters().tcp_bytes, data.size());
  EXPECT_EQ(e->open_connections(), 0u);
}

TEST_F(ServicesTest, DiscardCountsAndClosesOnEof) {
  auto discard = DiscardService::Start(ctx_, 9);
  ASSERT_TRUE(discard.ok());
  DiscardService* d = discard->get();
  services_.push_back(std::move(*discard));
  Client c = Connect(9);
  Send(c, Pattern(5 << 20, 5));
  ASSERT_TRUE(c.socket->Shutdown(false, true).ok());
  ASSERT_TRUE(RunUntil([&] {
    c.ReadAvailable();
    return c.eof;
  }));
  EXPECT_TRUE(c.in.empty());
  EXPECT_EQ(d->counters().tcp_bytes, 5u << 20);
  EXPECT_EQ(d->open_connections(), 0u);
}

TEST_F(ServicesTest, UdpEchoAndDiscard) {
  auto echo = EchoService::Start(ctx_, 7);
  auto discard = DiscardService::Start(ctx_, 9);
  ASSERT_TRUE(echo.ok() && discard.ok());
  EchoService* e = echo->get();
  DiscardService* d = discard->get();
  services_.push_back(std::move(*echo));
  services_.push_back(std::move(*discard));
  for (bool v6 : {false, true}) {
    auto s = udp_a_.Open(v6 ? Family::kIpv6 : Family::kIpv4);
    const transport::IpAddress server = v6 ? net_.b().v6() : net_.b().v4();
    // Resolve the neighbour first: a 45-fragment datagram does not fit the
    // queue of packets waiting for ARP/NDP (stack.h: bounded on purpose).
    const uint8_t ping = 0;
    ASSERT_TRUE(
        s->SendTo(std::span<const uint8_t>(&ping, 1), {server, 7}, net_.now())
            .ok());
    ASSERT_TRUE(RunUntil([&] {
      uint8_t b[8];
      return s->RecvFrom(std::span<uint8_t>(b)).ok();
    }));
    std::vector<std::string> sent;
    for (size_t size : {size_t{1}, size_t{1400}, size_t{8000}, size_t{65000}}) {
      sent.push_back(Pattern(size, static_cast<uint32_t>(size)));
      ASSERT_TRUE(
          s->SendTo(
               std::span<const uint8_t>(
                   reinterpret_cast<const uint8_t*>(sent.back().data()), size),
               {server, 7}, net_.now())
              .ok());
      ASSERT_TRUE(
          s->SendTo(
               std::span<const uint8_t>(
                   reinterpret_cast<const uint8_t*>(sent.back().data()), size),
               {server, 9}, net_.now())
              .ok());
    }
    std::vector<std::string> got;
    ASSERT_TRUE(RunUntil([&] {
      std::vector<uint8_t> buf(70000);
      while (true) {
        auto r = s->RecvFrom(std::span<uint8_t>(buf));
        if (!r.ok()) break;
        EXPECT_EQ(r->from.port, 7);
        got.emplace_back(reinterpret_cast<char*>(buf.data()), r->bytes);
      }
      return got.size() == sent.size();
    }));
    EXPECT_EQ(got, sent);
  }
  EXPECT_EQ(e->counters().udp_datagrams, 10u);  // with the two pings
  EXPECT_EQ(d->counters().udp_datagrams, 8u);
}

TEST_F(ServicesTest, PortInUse) {
  auto echo = EchoService::Start(ctx_, 7);
  ASSERT_TRUE(echo.ok());
  auto again = DiscardService::Start(ctx_, 7);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(transport::ErrnoOf(again.status()), EADDRINUSE) << again.status();
  EXPECT_NE(again.status().message().find("TCP 0.0.0.0:7"), std::string::npos)
      << again.status();
}

}  // namespace
}  // namespace netstack::tools
