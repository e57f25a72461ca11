// slirp4netns's API socket as netstackd serves it: the exact request and
// reply shapes Podman and rootlesskit depend on, what a careless or
// hostile client gets, and the wire (one request per connection).
#include "tools/netstackd/slirp4netns_api.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/runtime/port_forwards.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools {
namespace {

using bench::JsonValue;
using bench::ParseJson;
using runtime::PortForwards;

const wire::Ipv4Address kGuest = *wire::Ipv4Address::Parse("10.0.2.100");

// A port nobody listens on (bound, read, closed).
uint16_t FreePort() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  (void)getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

bool Listening(uint16_t port) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  const bool ok = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(s);
  return ok;
}

class Slirp4netnsApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = eventloop::EventLoop::Create();
    ASSERT_TRUE(l.ok());
    loop_ = *std::move(l);
    PortForwards::Options o;
    o.loop = loop_.get();
    forwards_ = std::make_unique<PortForwards>(o);
    char dir[] = "/tmp/nst-s4api-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/api.sock";
    auto api = Slirp4netnsApi::Create(*loop_, *forwards_, path_, kGuest);
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *std::move(api);
  }
  void TearDown() override {
    api_.reset();
    EXPECT_NE(access(path_.c_str(), F_OK), 0) << "the socket file stayed";
    (void)unlink(path_.c_str());
    (void)rmdir(dir_.c_str());
  }

  std::string AddTcp(uint16_t host_port, const std::string& host_addr = "127.0.0.1") {
    return api_->Handle(absl::StrCat(
        R"({"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":")",
        host_addr, R"(","host_port":)", host_port,
        R"(,"guest_addr":"","guest_port":80}})"));
  }

  // A client as Podman and rootlesskit are: connect, write, (optionally)
  // end writing, then read until EOF while the loop runs.
  std::string Ask(const std::string& request, bool end_writing = true,
                  size_t pieces = 1) {
    const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    std::memcpy(un.sun_path, path_.data(), path_.size());
    EXPECT_EQ(connect(s, reinterpret_cast<sockaddr*>(&un), sizeof(un)), 0);
    const size_t step = (request.size() + pieces - 1) / pieces;
    for (size_t off = 0; off < request.size(); off += step) {
      EXPECT_GT(write(s, request.data() + off,
                      std::min(step, request.size() - off)),
                0);
      EXPECT_TRUE(loop_->RunOnce(absl::Milliseconds(10)).ok());
    }
    if (end_writing) shutdown(s, SHUT_WR);
    fcntl(s, F_SETFL, O_NONBLOCK);
    std::string reply;
    for (int i = 0; i < 200; ++i) {
      EXPECT_TRUE(loop_->RunOnce(absl::Milliseconds(10)).ok());
      char buf[8192];
      const ssize_t n = read(s, buf, sizeof(buf));
      if (n == 0) break;  // the server's shutdown: the reply is whole
      if (n > 0) reply.append(buf, static_cast<size_t>(n));
    }
    close(s);
    return reply;
  }

  std::unique_ptr<eventloop::EventLoop> loop_;
  std::unique_ptr<PortForwards> forwards_;
  std::unique_ptr<Slirp4netnsApi> api_;
  std::string dir_, path_;
};

TEST_F(Slirp4netnsApiTest, AddListRemoveHaveSlirp4netnsShapes) {
  const uint16_t port = FreePort();
  EXPECT_EQ(AddTcp(port), R"({"return":{"id":1}})");
  EXPECT_TRUE(Listening(port));
  // No host_addr: 0.0.0.0, as in slirp4netns (this test's forwards have
  // no backend, so no UDP).
  const uint16_t port2 = FreePort();
  EXPECT_EQ(api_->Handle(absl::StrCat(
                R"({"execute":"add_hostfwd","arguments":{"proto":"tcp",)",
                R"("host_port":)", port2, R"(,"guest_port":53}})")),
            R"({"return":{"id":2}})");
  EXPECT_EQ(api_->Handle(R"({"execute":"list_hostfwd"})"),
            absl::StrCat(R"({"entries":[{"id":1,"proto":"tcp","host_addr":)",
                         R"("127.0.0.1","host_port":)", port,
                         R"(,"guest_addr":"10.0.2.100","guest_port":80},)",
                         R"({"id":2,"proto":"tcp","host_addr":"0.0.0.0",)",
                         R"("host_port":)", port2,
                         R"(,"guest_addr":"10.0.2.100","guest_port":53}]})"));
  EXPECT_EQ(api_->Handle(R"({"execute":"remove_hostfwd","arguments":{"id":1}})"),
            R"({"return":{}})");
  EXPECT_FALSE(Listening(port));
  EXPECT_EQ(forwards_->List().size(), 1u);
}

TEST_F(Slirp4netnsApiTest, EveryBadRequestGetsTheErrorShape) {
  auto desc = [&](const std::string& req) {
    absl::StatusOr<JsonValue> v = ParseJson(api_->Handle(req));
    EXPECT_TRUE(v.ok()) << req;
    if (!v.ok()) return std::string();
    const JsonValue* e = v->Find("error");
    EXPECT_NE(e, nullptr) << req;
    EXPECT_EQ(v->members().size(), 1u) << req;
    return e != nullptr ? e->GetString("desc").value_or("") : "";
  };
  const std::string add = R"({"execute":"add_hostfwd","arguments":)";
  EXPECT_EQ(desc("{not json"), "bad request: cannot parse JSON");
  EXPECT_EQ(desc("[1,2]"), "bad request: json_object() failed");
  EXPECT_EQ(desc(R"({"arguments":{}})"), "bad request: no execute found");
  EXPECT_EQ(desc(R"({"execute":"reboot"})"), "bad request: unknown execute");
  // slirp4netns 1.2.0 crashes on this one (strcmp(NULL, ...)).
  EXPECT_EQ(desc(add + R"({"host_port":8080,"guest_port":80}})"),
            "bad request: add_hostfwd: bad arguments.proto");
  EXPECT_EQ(desc(add + R"({"proto":"sctp","host_port":8080,"guest_port":80}})"),
            "bad request: add_hostfwd: bad arguments.proto");
  EXPECT_EQ(desc(add + R"({"proto":"tcp","host_addr":"nowhere",)"
                       R"("host_port":8080,"guest_port":80}})"),
            "bad request: add_hostfwd: bad arguments.host_addr");
  for (const char* port : {"0", "65536", "80.5", "\"80\"", "-1"}) {
    EXPECT_EQ(desc(absl::StrCat(add, R"({"proto":"tcp","host_port":)", port,
                                R"(,"guest_port":80}})")),
              "bad request: add_hostfwd: bad arguments.host_port")
        << port;
    EXPECT_EQ(desc(absl::StrCat(add, R"({"proto":"tcp","host_port":8080,)",
                                R"("guest_port":)", port, "}}")),
              "bad request: add_hostfwd: bad arguments.guest_port")
        << port;
  }
  EXPECT_EQ(desc(add + R"({"proto":"tcp","host_port":8080,)"
                       R"("guest_addr":"10.0.2.15","guest_port":80}})"),
            "bad request: add_hostfwd: bad arguments.guest_addr (the guest "
            "is 10.0.2.100)");
  EXPECT_EQ(desc(R"({"execute":"remove_hostfwd","arguments":{"id":"1"}})"),
            "bad request: remove_hostfwd: bad arguments.id");
  EXPECT_EQ(desc(R"({"execute":"remove_hostfwd","arguments":{"id":7}})"),
            "bad request: remove_hostfwd: no forward with id 7");
  // A port already taken: the error, and nothing half-added.
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(s, 1), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string taken = AddTcp(ntohs(a.sin_port));
  close(s);
  EXPECT_NE(taken.find(R"({"error":{"desc":"bad request: add_hostfwd: )"),
            std::string::npos)
      << taken;
  EXPECT_EQ(api_->Handle(R"({"execute":"list_hostfwd"})"), R"({"entries":[]})");
  EXPECT_EQ(api_->counters().errors, 21u);
}

TEST_F(Slirp4netnsApiTest, AnIpv6HostAddressIsAnExtension) {
  const uint16_t port = FreePort();
  EXPECT_EQ(AddTcp(port, "::1"), R"({"return":{"id":1}})");
  EXPECT_NE(api_->Handle(R"({"execute":"list_hostfwd"})").find(
                R"("host_addr":"::1")"),
            std::string::npos);
}

TEST_F(Slirp4netnsApiTest, OneRequestPerConnectionOverTheSocket) {
  const uint16_t port = FreePort();
  // Podman's and rootlesskit's way: JSON and a newline, then end writing.
  EXPECT_EQ(Ask(absl::StrCat(
                R"({"execute":"add_hostfwd","arguments":{"proto":"tcp",)",
                R"("host_addr":"127.0.0.1","host_port":)", port,
                R"(,"guest_port":80}})", "\n")),
            R"({"return":{"id":1}})");
  // `echo -n ... | nc -U` without -N: no newline, the write end stays open.
  EXPECT_EQ(Ask(R"({"execute":"list_hostfwd"})", /*end_writing=*/false)
                .substr(0, 12),
            R"({"entries":[)");
  // A request that arrives in pieces is read whole.
  EXPECT_EQ(Ask(R"({"execute":"remove_hostfwd","arguments":{"id":1}})",
                /*end_writing=*/false, /*pieces=*/3),
            R"({"return":{}})");
  EXPECT_EQ(Ask(std::string(5000, ' ') + "{}"),
            R"({"error":{"desc":"bad request: too large message"}})");
  EXPECT_EQ(Ask("{\"execute\":"),  // EOF after half a request
            R"({"error":{"desc":"bad request: cannot parse JSON"}})");
  EXPECT_EQ(api_->counters().connections, 5u);
  EXPECT_EQ(api_->counters().too_large, 1u);
}

TEST_F(Slirp4netnsApiTest, AStaleSocketIsReplacedAndAnyOtherFileIsNot) {
  api_.reset();  // as if killed: put a socket file back at the path
  const int s = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  std::memcpy(un.sun_path, path_.data(), path_.size());
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&un), sizeof(un)), 0);
  close(s);
  auto api = Slirp4netnsApi::Create(*loop_, *forwards_, path_, kGuest);
  ASSERT_TRUE(api.ok()) << api.status();
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  api->reset();
  const int f = open(path_.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(f, 0);
  close(f);
  auto refused = Slirp4netnsApi::Create(*loop_, *forwards_, path_, kGuest);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("exists and is not a socket"),
            std::string::npos);
  EXPECT_EQ(access(path_.c_str(), F_OK), 0);  // left alone
  ASSERT_EQ(unlink(path_.c_str()), 0);
}

}  // namespace
}  // namespace netstack::tools
