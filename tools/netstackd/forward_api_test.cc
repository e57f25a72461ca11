#include "tools/netstackd/forward_api.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/runtime/port_forwards.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools {

using runtime::PortForwards;

namespace {

using bench::JsonValue;
using bench::ParseJson;

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

class ForwardApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = eventloop::EventLoop::Create();
    ASSERT_TRUE(l.ok());
    loop_ = *std::move(l);
    PortForwards::Options o;
    o.loop = loop_.get();
    forwards_ = std::make_unique<PortForwards>(o);  // a VM guest: no netns
    // Bazel's TEST_TMPDIR can be past sun_path's 108 bytes.
    char dir[] = "/tmp/nst-api-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/api";
    auto api = ForwardApi::Create(
        *loop_, *forwards_,
        [] { return std::string("a.b 1\nc.d text\nstack: x=2 y=3\n"); },
        path_);
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *std::move(api);
  }

  JsonValue Ask(const std::string& line) {
    absl::StatusOr<JsonValue> v = ParseJson(api_->Handle(line));
    EXPECT_TRUE(v.ok()) << line;
    return v.ok() ? *v : JsonValue();
  }
  std::string ErrorOf(const std::string& line) {
    const JsonValue v = Ask(line);
    EXPECT_EQ(v.GetBool("ok"), false) << line;
    return v.GetString("error").value_or("");
  }

  void TearDown() override {
    api_.reset();
    (void)unlink(path_.c_str());
    (void)rmdir(dir_.c_str());
  }

  std::unique_ptr<eventloop::EventLoop> loop_;
  std::unique_ptr<PortForwards> forwards_;
  std::string dir_;
  std::string path_;
  std::unique_ptr<ForwardApi> api_;
};

TEST_F(ForwardApiTest, BadRequestsAreAnsweredWithTheReason) {
  EXPECT_NE(ErrorOf("{").find("not JSON"), std::string::npos);
  EXPECT_EQ(ErrorOf("[1]"), "a request is a JSON object");
  EXPECT_NE(ErrorOf("{}").find("no \"op\""), std::string::npos);
  EXPECT_NE(ErrorOf("{\"op\":\"open\"}").find("unknown op 'open'"),
            std::string::npos);
  EXPECT_EQ(ErrorOf("{\"op\":\"add\",\"proto\":\"sctp\",\"spec\":\"80\"}"),
            "add: \"proto\" must be \"tcp\" or \"udp\"");
  EXPECT_EQ(ErrorOf("{\"op\":\"add\",\"proto\":\"tcp\"}"), "add: no \"spec\"");
  EXPECT_EQ(ErrorOf("{\"op\":\"add\",\"proto\":\"tcp\",\"spec\":\"80x\"}"),
            "-t 80x: bad host port '80x' (want 1-65535)");
  EXPECT_EQ(ErrorOf("{\"op\":\"remove\",\"id\":-1}"),
            "remove: \"id\" must be a forward's id");
  EXPECT_EQ(ErrorOf("{\"op\":\"remove\",\"id\":7}"), "no forward 7");
  // Through the stack, UDP needs the backend's flow table (none here).
  EXPECT_NE(ErrorOf(absl::StrCat("{\"op\":\"add\",\"proto\":\"udp\","
                                 "\"spec\":\"127.0.0.1/",
                                 FreePort(), "\"}"))
                .find("needs the backend's UDP flow table"),
            std::string::npos);
  EXPECT_EQ(api_->counters().requests, 10u);
  EXPECT_EQ(api_->counters().errors, 10u);
}

TEST_F(ForwardApiTest, AddListRemove) {
  const uint16_t port = FreePort();
  const JsonValue added = Ask(absl::StrCat(
      "{\"op\":\"add\",\"proto\":\"tcp\",\"spec\":\"127.0.0.1/", port,
      ":80\"}"));
  ASSERT_EQ(added.GetBool("ok"), true);
  const int64_t id = added.GetInt("id").value_or(0);
  EXPECT_GT(id, 0);
  // The same port again: in use, named.
  EXPECT_NE(ErrorOf(absl::StrCat("{\"op\":\"add\",\"proto\":\"tcp\","
                                 "\"spec\":\"127.0.0.1/",
                                 port, "\"}"))
                .find("Address already in use"),
            std::string::npos);
  const JsonValue list = Ask("{\"op\":\"list\"}");
  const JsonValue* fw = list.Find("forwards");
  ASSERT_NE(fw, nullptr);
  ASSERT_EQ(fw->items().size(), 1u);
  const JsonValue& f = fw->items()[0];
  EXPECT_EQ(f.GetInt("id"), id);
  EXPECT_EQ(f.GetString("proto"), "tcp");
  EXPECT_EQ(f.GetString("spec"), absl::StrCat("127.0.0.1/", port, ":80"));
  EXPECT_EQ(f.GetString("path"), "stack");
  EXPECT_EQ(f.GetInt("listeners"), 1);
  ASSERT_NE(f.Find("counters"), nullptr);
  EXPECT_EQ(f.Find("counters")->GetInt("accepted"), 0);
  EXPECT_EQ(Ask(absl::StrCat("{\"op\":\"remove\",\"id\":", id, "}"))
                .GetBool("ok"),
            true);
  EXPECT_TRUE(Ask("{\"op\":\"list\"}").Find("forwards")->items().empty());
  // The port is free again.
  EXPECT_EQ(Ask(absl::StrCat("{\"op\":\"add\",\"proto\":\"tcp\","
                             "\"spec\":\"127.0.0.1/",
                             port, "\"}"))
                .GetBool("ok"),
            true);
}

TEST(ForwardApiCreate, ABadPathSaysWhy) {
  auto l = eventloop::EventLoop::Create();
  ASSERT_TRUE(l.ok());
  PortForwards::Options o;
  o.loop = l->get();
  PortForwards forwards(o);
  auto api = ForwardApi::Create(**l, forwards, nullptr, std::string(200, 'a'));
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.status().message().find("is 1 to 107 bytes"),
            std::string::npos);
  api = ForwardApi::Create(**l, forwards, nullptr, "/nonexistent-dir/api");
  ASSERT_FALSE(api.ok());
  // The directory is opened first (the file is removed through it).
  EXPECT_NE(api.status().message().find(
                "--forward-api: open directory '/nonexistent-dir'"),
            std::string::npos)
      << api.status();
}

TEST_F(ForwardApiTest, CountersAreNumbersWhereTheyAreNumbers) {
  const JsonValue v = Ask("{\"op\":\"counters\"}");
  const JsonValue* c = v.Find("counters");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->GetInt("a.b"), 1);
  EXPECT_EQ(c->GetString("c.d"), "text");
  EXPECT_EQ(c->GetInt("stack.x"), 2);
  EXPECT_EQ(c->GetInt("stack.y"), 3);
}

TEST_F(ForwardApiTest, TheSocketIsPrivateAndGoesWithTheApi) {
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600);
  // A second API on the same path is refused, and says why.
  auto again = ForwardApi::Create(*loop_, *forwards_, nullptr, path_);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("the file exists"),
            std::string::npos);
  api_.reset();
  EXPECT_NE(stat(path_.c_str(), &st), 0);
}

// Over the socket: two requests in one write, one split across writes,
// answered in order, one line each.
TEST_F(ForwardApiTest, LinesOverTheSocket) {
  const int c = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  std::memcpy(un.sun_path, path_.data(), path_.size());
  ASSERT_EQ(connect(c, reinterpret_cast<sockaddr*>(&un), sizeof(un)), 0);
  const std::string a = "{\"op\":\"list\"}\n{\"op\":\"nope\"}\n{\"op\":";
  ASSERT_EQ(write(c, a.data(), a.size()), static_cast<ssize_t>(a.size()));
  std::string got;
  auto read_lines = [&](int n) {
    for (int turn = 0; turn < 100 && std::count(got.begin(), got.end(),
                                                  '\n') < n;
         ++turn) {
      ASSERT_TRUE(loop_->RunOnce(absl::Milliseconds(50)).ok());
      char buf[4096];
      const ssize_t r = recv(c, buf, sizeof(buf), MSG_DONTWAIT);
      if (r > 0) got.append(buf, r);
    }
  };
  read_lines(2);
  EXPECT_EQ(got,
            "{\"ok\":true,\"forwards\":[]}\n"
            "{\"ok\":false,\"error\":\"unknown op 'nope' (add, remove, list, "
            "counters or policy)\"}\n");
  got.clear();
  const std::string b = "\"counters\"}\n";
  ASSERT_EQ(write(c, b.data(), b.size()), static_cast<ssize_t>(b.size()));
  read_lines(1);
  EXPECT_EQ(got.rfind("{\"ok\":true,\"counters\":{\"a.b\":1", 0), 0u) << got;
  close(c);
}

// A client that sends a line past kMaxLine gets one error and is closed;
// the API keeps serving the others.
TEST_F(ForwardApiTest, AnOverlongLineClosesThatClientOnly) {
  auto dial = [&] {
    const int c = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    std::memcpy(un.sun_path, path_.data(), path_.size());
    EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&un), sizeof(un)), 0);
    return c;
  };
  const int bad = dial();
  const int good = dial();
  const std::string junk(ForwardApi::kMaxLine + 100, 'x');
  size_t sent = 0;
  std::string got;
  bool closed = false;
  for (int turn = 0; turn < 400 && !closed; ++turn) {
    if (sent < junk.size()) {
      const ssize_t w = send(bad, junk.data() + sent, junk.size() - sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) sent += w;
    }
    ASSERT_TRUE(loop_->RunOnce(absl::Milliseconds(10)).ok());
    char buf[4096];
    const ssize_t r = recv(bad, buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) got.append(buf, r);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) closed = true;
  }
  EXPECT_TRUE(closed);
  EXPECT_NE(got.find("request longer than 65536 bytes: closing"),
            std::string::npos)
      << got.substr(0, 200);
  const std::string req = "{\"op\":\"list\"}\n";
  ASSERT_EQ(write(good, req.data(), req.size()),
            static_cast<ssize_t>(req.size()));
  std::string answer;
  for (int turn = 0; turn < 100 && answer.find('\n') == std::string::npos;
       ++turn) {
    ASSERT_TRUE(loop_->RunOnce(absl::Milliseconds(10)).ok());
    char buf[256];
    const ssize_t r = recv(good, buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) answer.append(buf, r);
  }
  EXPECT_EQ(answer, "{\"ok\":true,\"forwards\":[]}\n");
  close(bad);
  close(good);
}

// The "policy" op without an egress policy (host mode): an error that says
// so, not a crash or an empty policy.
TEST_F(ForwardApiTest, PolicyWithoutHooksIsAnError) {
  EXPECT_EQ(ErrorOf(R"({"op":"policy"})"),
            "policy: no egress policy here (netstackd --backend, -- CMD or "
            "--netns-pid has one)");
}

// A stand-in for the daemon's hooks: takes lines "allow X" and "deny X",
// refuses anything else by its line, and counts one reset per deny.
struct FakePolicy {
  PolicySummary now{"open", {}};
  std::vector<std::string> texts;  // what replace was given
  PolicyHooks Hooks() {
    PolicyHooks h;
    h.get = [this] { return now; };
    h.replace = [this](std::string_view text) -> absl::StatusOr<uint64_t> {
      texts.emplace_back(text);
      PolicySummary next{"open", {}};
      uint64_t denies = 0;
      int n = 0;
      size_t start = 0;
      while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        const std::string line(text.substr(start, end - start));
        start = end + 1;
        ++n;
        if (line.rfind("allow ", 0) == 0) {
          next.mode = "allowlist";
        } else if (line.rfind("deny ", 0) == 0) {
          ++denies;
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", n, ": not a rule"));
        }
        next.rules.push_back(line);
      }
      now = next;
      return denies;
    };
    return h;
  }
};

TEST_F(ForwardApiTest, PolicyGetShowsTheModeAndRules) {
  FakePolicy fake;
  fake.now = {"allowlist", {"allow example.com", "deny 10.0.0.0/8"}};
  api_->SetPolicyHooks(fake.Hooks());
  EXPECT_EQ(api_->Handle(R"({"op":"policy"})"),
            R"({"ok":true,"policy":{"mode":"allowlist","rules":)"
            R"(["allow example.com","deny 10.0.0.0/8"]}})");
  EXPECT_TRUE(fake.texts.empty()) << "a get replaced the policy";
}

TEST_F(ForwardApiTest, PolicyReplaceTakesRulesOneALine) {
  FakePolicy fake;
  api_->SetPolicyHooks(fake.Hooks());
  const JsonValue v = Ask(
      R"({"op":"policy","replace":["allow example.com","deny 10.0.0.0/8",)"
      R"("deny 192.0.2.1"]})");
  ASSERT_EQ(v.GetBool("ok"), true);
  ASSERT_EQ(fake.texts.size(), 1u);
  EXPECT_EQ(fake.texts[0],
            "allow example.com\ndeny 10.0.0.0/8\ndeny 192.0.2.1\n");
  EXPECT_EQ(v.GetInt("reset"), 2);
  const JsonValue* p = v.Find("policy");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->GetString("mode"), "allowlist");
  const JsonValue* rules = p->Find("rules");
  ASSERT_NE(rules, nullptr);
  ASSERT_EQ(rules->items().size(), 3u);
  EXPECT_EQ(rules->items()[2].string(), "deny 192.0.2.1");
  // An empty list is a policy too: no rule from the API.
  const JsonValue empty = Ask(R"({"op":"policy","replace":[]})");
  EXPECT_EQ(empty.GetBool("ok"), true);
  EXPECT_EQ(fake.texts.back(), "");
  EXPECT_EQ(empty.Find("policy")->GetString("mode"), "open");
}

TEST_F(ForwardApiTest, PolicyReplaceTakesAFilesText) {
  FakePolicy fake;
  api_->SetPolicyHooks(fake.Hooks());
  const JsonValue v =
      Ask(R"({"op":"policy","file":"allow a.example\ndeny b.example"})");
  ASSERT_EQ(v.GetBool("ok"), true) << v.GetString("error").value_or("");
  ASSERT_EQ(fake.texts.size(), 1u);
  EXPECT_EQ(fake.texts[0], "allow a.example\ndeny b.example");
  EXPECT_EQ(v.GetInt("reset"), 1);
}

TEST_F(ForwardApiTest, PolicyReplaceErrorsChangeNothing) {
  FakePolicy fake;
  fake.now = {"allowlist", {"allow example.com"}};
  api_->SetPolicyHooks(fake.Hooks());
  EXPECT_EQ(ErrorOf(R"({"op":"policy","replace":"allow x"})"),
            "policy: \"replace\" is an array of rules (\"allow RULE\", "
            "\"deny RULE\", \"egress none\")");
  EXPECT_EQ(ErrorOf(R"({"op":"policy","replace":["allow x",7]})"),
            "policy: each \"replace\" item is one rule, a string");
  // One item may not smuggle in a second line.
  EXPECT_EQ(ErrorOf(R"({"op":"policy","replace":["allow x\ndeny y"]})"),
            "policy: each \"replace\" item is one rule, a string");
  EXPECT_EQ(ErrorOf(R"({"op":"policy","file":["allow x"]})"),
            "policy: \"file\" is a policy file's text, a string");
  EXPECT_EQ(ErrorOf(R"({"op":"policy","replace":[],"file":""})"),
            "policy: \"replace\" or \"file\", not both");
  EXPECT_TRUE(fake.texts.empty()) << "a bad request reached replace";
  // The hook's own refusal, named by its line.
  EXPECT_EQ(ErrorOf(R"({"op":"policy","replace":["allow x","bogus"]})"),
            "policy: line 2: not a rule");
  EXPECT_EQ(api_->Handle(R"({"op":"policy"})"),
            R"({"ok":true,"policy":{"mode":"allowlist","rules":)"
            R"(["allow example.com"]}})");
  EXPECT_EQ(api_->counters().errors, 6u);
}

}  // namespace
}  // namespace netstack::tools
