// ControlApi (--control): the requests the conformance suite sends, each
// answered as tools/netstackd/control_api.h says, against two stacks on
// an in-memory wire (tcp::testing::Network, fake clock). Each host has a
// ControlApi, so both ends of a connection are driven through requests.
#include "tools/netstackd/control_api.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/tcp/tcp_test_util.h"
#include "netstack/udp/udp_layer.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools {
namespace {

using bench::JsonValue;
using bench::ParseJson;

class ControlApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = eventloop::EventLoop::Create();
    ASSERT_TRUE(l.ok());
    loop_ = *std::move(l);
    // Bazel's TEST_TMPDIR can be past sun_path's 108 bytes.
    char dir[] = "/tmp/nst-ctl-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    tcp::testing::Host& a = net_.a();
    tcp::testing::Host& b = net_.b();
    udp_a_ = std::make_unique<udp::UdpLayer>(*a.stack, a.chunks, a.packets,
                                             a.notifier, 1);
    udp_b_ = std::make_unique<udp::UdpLayer>(*b.stack, b.chunks, b.packets,
                                             b.notifier, 2);
    auto api = ControlApi::Create(
        *loop_, *a.tcp, *udp_a_,
        [] { return std::string("a.b 1\nc.d text\ntcp: x=2 y=3\n"); },
        dir_ + "/a");
    ASSERT_TRUE(api.ok()) << api.status();
    a_ = *std::move(api);
    api = ControlApi::Create(*loop_, *b.tcp, *udp_b_, nullptr, dir_ + "/b");
    ASSERT_TRUE(api.ok()) << api.status();
    b_ = *std::move(api);
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    (void)rmdir(dir_.c_str());
  }

  JsonValue Ask(ControlApi& api, const std::string& line) {
    absl::StatusOr<JsonValue> v = ParseJson(api.Handle(line, net_.now()));
    EXPECT_TRUE(v.ok()) << line;
    return v.ok() ? *v : JsonValue();
  }
  // The reply of a call that must succeed.
  JsonValue Ok(ControlApi& api, const std::string& line) {
    JsonValue v = Ask(api, line);
    EXPECT_EQ(v.GetBool("ok"), true) << line << " -> "
                                     << v.GetString("error").value_or("");
    return v;
  }
  // The errno of a call that must fail (and its message, in `why`).
  int64_t Errno(ControlApi& api, const std::string& line,
                std::string* why = nullptr) {
    const JsonValue v = Ask(api, line);
    EXPECT_EQ(v.GetBool("ok"), false) << line;
    if (why != nullptr) *why = v.GetString("error").value_or("");
    return v.GetInt("errno").value_or(0);
  }
  int64_t Fd(ControlApi& api, const std::string& line) {
    return Ok(api, line).GetInt("fd").value_or(-1);
  }
  // Runs the wire until `line` stops failing with EAGAIN; its reply.
  JsonValue Wait(ControlApi& api, const std::string& line) {
    JsonValue v;
    EXPECT_TRUE(net_.RunUntil([&] {
      v = Ask(api, line);
      return v.GetInt("errno").value_or(0) != EAGAIN;
    })) << line;
    return v;
  }

  tcp::testing::Network net_;
  std::unique_ptr<udp::UdpLayer> udp_a_;
  std::unique_ptr<udp::UdpLayer> udp_b_;
  std::unique_ptr<eventloop::EventLoop> loop_;
  std::string dir_;
  std::unique_ptr<ControlApi> a_;
  std::unique_ptr<ControlApi> b_;
};

TEST_F(ControlApiTest, BadRequestsAreAnsweredWithAnErrno) {
  std::string why;
  EXPECT_EQ(Errno(*a_, "{", &why), EINVAL);
  EXPECT_EQ(why, "a request is one JSON object");
  EXPECT_EQ(Errno(*a_, "[1]"), EINVAL);
  EXPECT_EQ(Errno(*a_, "{}", &why), EINVAL);
  EXPECT_EQ(why, "no \"op\"");
  EXPECT_EQ(Errno(*a_, R"({"op":"dance"})", &why), EINVAL);
  EXPECT_EQ(why, "unknown op 'dance'");
  EXPECT_EQ(Errno(*a_, R"({"op":"send","fd":99,"data":"00"})", &why), EBADF);
  EXPECT_EQ(why, "no such fd");
  EXPECT_EQ(Errno(*a_, R"({"op":"close"})"), EBADF);
  EXPECT_EQ(Errno(*a_, R"({"op":"socket","family":5,"proto":"tcp"})"),
            EAFNOSUPPORT);
  EXPECT_EQ(Errno(*a_, R"({"op":"socket","family":4,"proto":"sctp"})"),
            EPROTONOSUPPORT);
  const int64_t u = Fd(*a_, R"({"op":"socket","family":4,"proto":"udp"})");
  const int64_t t = Fd(*a_, R"({"op":"socket","family":4,"proto":"tcp"})");
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"listen","fd":)", u, "}")),
            EOPNOTSUPP);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"info","fd":)", u, "}")),
            EOPNOTSUPP);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"bind","fd":)", t,
                                    R"(,"addr":"10.0.0.1.5","port":1})")),
            EINVAL);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"shutdown","fd":)", t,
                                    R"(,"how":"sideways"})")),
            EINVAL);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"setsockopt","fd":)", t,
                                    R"(,"opt":"tos","value":1})"),
                  &why),
            ENOPROTOOPT);
  EXPECT_EQ(why, "setsockopt: unknown 'tos'");
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"setsockopt","fd":)", t,
                                    R"(,"opt":"linger","value":1,"seconds":5})")),
            ENOPROTOOPT);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"getsockopt","fd":)", t,
                                    R"(,"opt":"rcvbuf"})")),
            ENOPROTOOPT);
  // A TCP call the stack refuses gives the stack's errno: recv before
  // connect.
  EXPECT_NE(Errno(*a_, absl::StrCat(R"({"op":"recv","fd":)", t, "}")), 0);
  EXPECT_EQ(a_->requests(), 18u);
  EXPECT_EQ(a_->errors(), 16u);
}

TEST_F(ControlApiTest, LimitsAreRefused) {
  const int64_t t = Fd(*a_, R"({"op":"socket","family":4,"proto":"tcp"})");
  const std::string fd = absl::StrCat(R"("fd":)", t);
  // Bad hex, a send past kMaxIo, an empty send, a recv past kMaxIo.
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"send",)", fd, R"(,"data":"abc"})")),
            EINVAL);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"send",)", fd, R"(,"data":"zz"})")),
            EINVAL);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"send",)", fd, R"(,"size":)",
                                    ControlApi::kMaxIo + 1, "}")),
            EINVAL);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"send",)", fd, R"(,"size":0})")),
            EINVAL);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"recv",)", fd, R"(,"len":)",
                                    ControlApi::kMaxIo + 1, "}")),
            EINVAL);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"listen",)", fd,
                                    R"(,"backlog":-1})")),
            EINVAL);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"setsockopt",)", fd,
                                    R"(,"opt":"rcvbuf","value":0})")),
            EINVAL);
  // kMaxSockets at once, then EMFILE; a reset frees them all.
  for (size_t i = a_->sockets(); i < ControlApi::kMaxSockets; ++i) {
    Fd(*a_, R"({"op":"socket","family":6,"proto":"udp"})");
  }
  EXPECT_EQ(Errno(*a_, R"({"op":"socket","family":4,"proto":"udp"})"), EMFILE);
  Ok(*a_, R"({"op":"reset"})");
  EXPECT_EQ(a_->sockets(), 0u);
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"poll",)", fd, "}")), EBADF);
}

// Over the socket: a line past kMaxLine draws EMSGSIZE and closes that
// client (JsonLinesServer's framing, with ControlApi's answer).
TEST_F(ControlApiTest, AnOverlongLineOverTheSocket) {
  const int c = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  const std::string path = dir_ + "/a";
  std::memcpy(un.sun_path, path.data(), path.size());
  ASSERT_EQ(connect(c, reinterpret_cast<sockaddr*>(&un), sizeof(un)), 0);
  const std::string junk =
      "{\"op\":\"reset\"}\n" + std::string(ControlApi::kMaxLine + 100, 'x');
  size_t sent = 0;
  std::string got;
  bool closed = false;
  for (int turn = 0; turn < 1000 && !closed; ++turn) {
    if (sent < junk.size()) {
      const ssize_t w = send(c, junk.data() + sent, junk.size() - sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) sent += w;
    }
    ASSERT_TRUE(loop_->RunOnce(absl::Milliseconds(5)).ok());
    char buf[4096];
    const ssize_t r = recv(c, buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) got.append(buf, r);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) closed = true;
  }
  EXPECT_TRUE(closed);
  EXPECT_EQ(got,
            "{\"ok\":true}\n"
            "{\"ok\":false,\"errno\":90,\"error\":\"request too long\"}\n");
  EXPECT_EQ(a_->errors(), 1u);
  close(c);
}

TEST_F(ControlApiTest, CountersAreTheNumericLines) {
  const JsonValue v = Ok(*a_, R"({"op":"counters"})");
  const JsonValue* c = v.Find("counters");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->GetInt("a.b"), 1);
  EXPECT_EQ(c->Find("c.d"), nullptr);  // not a number: left out
  EXPECT_EQ(c->GetInt("tcp.x"), 2);
  EXPECT_EQ(c->GetInt("tcp.y"), 3);
  // Without a counter source, an empty object.
  EXPECT_EQ(b_->Handle(R"({"op":"counters"})", net_.now()),
            R"({"ok":true,"counters":{}})");
}

// listen, connect, accept, send and recv both ways, info, shutdown,
// end of stream, close; then UDP sendto/recv.
TEST_F(ControlApiTest, TcpAndUdpBetweenTwoStacks) {
  const std::string a_ip = net_.a().v4().ToString();
  const int64_t l = Fd(*a_, R"({"op":"socket","family":4,"proto":"tcp"})");
  Ok(*a_, absl::StrCat(R"({"op":"bind","fd":)", l, R"(,"addr":")", a_ip,
                       R"(","port":7000})"));
  Ok(*a_, absl::StrCat(R"({"op":"listen","fd":)", l, R"(,"backlog":4})"));
  EXPECT_EQ(Errno(*a_, absl::StrCat(R"({"op":"accept","fd":)", l, "}")),
            EAGAIN);
  const int64_t c = Fd(*b_, R"({"op":"socket","family":4,"proto":"tcp"})");
  Ok(*b_, absl::StrCat(R"({"op":"setsockopt","fd":)", c,
                       R"(,"opt":"nodelay","value":1})"));
  Ok(*b_, absl::StrCat(R"({"op":"connect","fd":)", c, R"(,"addr":")", a_ip,
                       R"(","port":7000})"));
  const JsonValue acc = Wait(*a_, absl::StrCat(R"({"op":"accept","fd":)", l,
                                               "}"));
  ASSERT_EQ(acc.GetBool("ok"), true);
  const int64_t s = acc.GetInt("fd").value_or(-1);
  EXPECT_EQ(acc.GetString("addr"), net_.b().v4().ToString());
  EXPECT_EQ(Ok(*b_, absl::StrCat(R"({"op":"poll","fd":)", c, "}"))
                .GetBool("writable"),
            true);
  const JsonValue info = Ok(*a_, absl::StrCat(R"({"op":"info","fd":)", s, "}"));
  EXPECT_EQ(info.GetString("state"), "ESTABLISHED");
  EXPECT_EQ(info.GetBool("timestamps"), true);

  EXPECT_EQ(Ok(*b_, absl::StrCat(R"({"op":"send","fd":)", c,
                                 R"(,"data":"68656c6c6f"})"))
                .GetInt("n"),
            5);
  JsonValue r = Wait(*a_, absl::StrCat(R"({"op":"recv","fd":)", s,
                                       R"(,"len":100})"));
  EXPECT_EQ(r.GetString("data"), "68656c6c6f");  // "hello"
  EXPECT_EQ(Ok(*a_, absl::StrCat(R"({"op":"send","fd":)", s,
                                 R"(,"size":30})"))
                .GetInt("n"),
            30);
  r = Wait(*b_, absl::StrCat(R"({"op":"recv","fd":)", c, R"(,"len":30})"));
  EXPECT_EQ(r.GetInt("n"), 30);
  EXPECT_EQ(r.GetString("data")->substr(0, 6), "616263");  // "abc"...

  // b shuts its side: a reads end of stream, is in CLOSE-WAIT.
  Ok(*b_, absl::StrCat(R"({"op":"shutdown","fd":)", c, R"(,"how":"wr"})"));
  r = Wait(*a_, absl::StrCat(R"({"op":"recv","fd":)", s, "}"));
  EXPECT_EQ(r.GetInt("n"), 0);
  EXPECT_EQ(Ok(*a_, absl::StrCat(R"({"op":"info","fd":)", s, "}"))
                .GetString("state"),
            "CLOSE_WAIT");
  Ok(*a_, absl::StrCat(R"({"op":"close","fd":)", s, "}"));
  r = Wait(*b_, absl::StrCat(R"({"op":"recv","fd":)", c, "}"));
  EXPECT_EQ(r.GetInt("n"), 0);
  EXPECT_EQ(Ok(*b_, absl::StrCat(R"({"op":"getsockopt","fd":)", c,
                                 R"(,"opt":"error"})"))
                .GetInt("value"),
            0);
  Ok(*b_, absl::StrCat(R"({"op":"close","fd":)", c, "}"));
  EXPECT_EQ(Errno(*b_, absl::StrCat(R"({"op":"close","fd":)", c, "}")), EBADF);

  // UDP: a datagram from b to a's bound socket, and the answer back.
  const int64_t ua = Fd(*a_, R"({"op":"socket","family":4,"proto":"udp"})");
  Ok(*a_, absl::StrCat(R"({"op":"bind","fd":)", ua, R"(,"addr":")", a_ip,
                       R"(","port":7001})"));
  const int64_t ub = Fd(*b_, R"({"op":"socket","family":4,"proto":"udp"})");
  Ok(*b_, absl::StrCat(R"({"op":"sendto","fd":)", ub,
                       R"(,"data":"7171","addr":")", a_ip,
                       R"(","port":7001})"));
  r = Wait(*a_, absl::StrCat(R"({"op":"recv","fd":)", ua, "}"));
  EXPECT_EQ(r.GetString("data"), "7171");
  EXPECT_EQ(r.GetString("addr"), net_.b().v4().ToString());
  const int64_t port = r.GetInt("port").value_or(0);
  Ok(*a_, absl::StrCat(R"({"op":"sendto","fd":)", ua, R"(,"data":"72","addr":")",
                       net_.b().v4().ToString(), R"(","port":)", port, "}"));
  r = Wait(*b_, absl::StrCat(R"({"op":"recv","fd":)", ub, "}"));
  EXPECT_EQ(r.GetString("data"), "72");
}

// linger 0 makes close an abort: the peer's recv fails (ECONNRESET); a
// reset aborts whatever is left.
TEST_F(ControlApiTest, LingerZeroCloseAborts) {
  const std::string a_ip = net_.a().v4().ToString();
  const int64_t l = Fd(*a_, R"({"op":"socket","family":4,"proto":"tcp"})");
  Ok(*a_, absl::StrCat(R"({"op":"bind","fd":)", l, R"(,"addr":")", a_ip,
                       R"(","port":7002})"));
  Ok(*a_, absl::StrCat(R"({"op":"listen","fd":)", l, "}"));
  const int64_t c = Fd(*b_, R"({"op":"socket","family":4,"proto":"tcp"})");
  Ok(*b_, absl::StrCat(R"({"op":"connect","fd":)", c, R"(,"addr":")", a_ip,
                       R"(","port":7002})"));
  const int64_t s =
      Wait(*a_, absl::StrCat(R"({"op":"accept","fd":)", l, "}"))
          .GetInt("fd")
          .value_or(-1);
  Ok(*a_, absl::StrCat(R"({"op":"setsockopt","fd":)", s,
                       R"(,"opt":"linger","value":1,"seconds":0})"));
  Ok(*a_, absl::StrCat(R"({"op":"close","fd":)", s, "}"));
  const JsonValue r = Wait(*b_, absl::StrCat(R"({"op":"recv","fd":)", c, "}"));
  EXPECT_EQ(r.GetBool("ok"), false);
  EXPECT_EQ(r.GetInt("errno"), ECONNRESET);
  Ok(*a_, R"({"op":"reset"})");
  EXPECT_EQ(a_->sockets(), 0u);
}

}  // namespace
}  // namespace netstack::tools
