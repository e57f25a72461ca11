#include "tools/netstackd/json_lines_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "netstack/eventloop/event_loop.h"

namespace netstack::tools {
namespace {

class JsonLinesServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = eventloop::EventLoop::Create();
    ASSERT_TRUE(l.ok());
    loop_ = *std::move(l);
    // Bazel's TEST_TMPDIR can be past sun_path's 108 bytes.
    char dir[] = "/tmp/nst-jls-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/s";
    auto s = JsonLinesServer::Create(*loop_, path_, Options());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  void TearDown() override {
    server_.reset();
    (void)unlink(path_.c_str());
    (void)rmdir(dir_.c_str());
  }

  // An echo server with small limits: "line" -> "[line]".
  JsonLinesServer::Options Options() {
    JsonLinesServer::Options o;
    o.flag = "--test";
    o.max_line = 100;
    o.max_output = 1000;
    o.max_clients = 2;
    o.handle = [this](std::string_view line, Instant) {
      seen_.emplace_back(line);
      return "[" + std::string(line) + "]";
    };
    o.too_long = [] { return std::string("too long"); };
    return o;
  }

  int Dial() {
    const int c = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    std::memcpy(un.sun_path, path_.data(), path_.size());
    EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&un), sizeof(un)), 0);
    return c;
  }
  void Send(int c, const std::string& s) {
    ASSERT_EQ(send(c, s.data(), s.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(s.size()));
  }
  // Runs the loop until `n` lines came back on `c` (or it closed);
  // `closed` says whether it did.
  std::string ReadLines(int c, int n, bool* closed = nullptr) {
    std::string got;
    bool eof = false;
    for (int turn = 0; turn < 200 && !eof &&
                       std::count(got.begin(), got.end(), '\n') < n;
         ++turn) {
      EXPECT_TRUE(loop_->RunOnce(absl::Milliseconds(10)).ok());
      char buf[4096];
      const ssize_t r = recv(c, buf, sizeof(buf), MSG_DONTWAIT);
      if (r > 0) got.append(buf, r);
      if (r == 0 || (r < 0 && errno == ECONNRESET)) eof = true;
    }
    if (closed != nullptr) *closed = eof;
    return got;
  }

  std::unique_ptr<eventloop::EventLoop> loop_;
  std::string dir_;
  std::string path_;
  std::vector<std::string> seen_;
  std::unique_ptr<JsonLinesServer> server_;
};

// Two lines in one write, one split across writes, CRLF, and an empty
// line (skipped): answered in order, one line each.
TEST_F(JsonLinesServerTest, FramesLines) {
  const int c = Dial();
  Send(c, "a\nb\r\n\nc");
  EXPECT_EQ(ReadLines(c, 2), "[a]\n[b]\n");
  Send(c, "d\n");
  EXPECT_EQ(ReadLines(c, 1), "[cd]\n");
  EXPECT_EQ(seen_, (std::vector<std::string>{"a", "b", "cd"}));
  EXPECT_EQ(server_->connections(), 1u);
  close(c);
}

// A line past max_line gets too_long() and the client is closed; the
// other client is still served.
TEST_F(JsonLinesServerTest, AnOverlongLineClosesThatClientOnly) {
  const int bad = Dial();
  const int good = Dial();
  Send(bad, "ok\n" + std::string(150, 'x'));
  bool closed = false;
  EXPECT_EQ(ReadLines(bad, 5, &closed), "[ok]\ntoo long\n");
  EXPECT_TRUE(closed);
  Send(good, "still\n");
  EXPECT_EQ(ReadLines(good, 1), "[still]\n");
  close(bad);
  close(good);
}

// Past max_clients a connection is closed at accept, and counted; a
// closed client's slot is free again.
TEST_F(JsonLinesServerTest, ClientsPastTheLimitAreRefused) {
  const int a = Dial();
  const int b = Dial();
  Send(a, "1\n");
  Send(b, "2\n");
  EXPECT_EQ(ReadLines(a, 1), "[1]\n");
  EXPECT_EQ(ReadLines(b, 1), "[2]\n");
  const int c = Dial();
  bool closed = false;
  EXPECT_EQ(ReadLines(c, 1, &closed), "");
  EXPECT_TRUE(closed);
  EXPECT_EQ(server_->refused_connections(), 1u);
  EXPECT_EQ(server_->clients(), 2u);
  close(a);
  close(c);
  for (int i = 0; i < 20 && server_->clients() > 1; ++i) {
    ASSERT_TRUE(loop_->RunOnce(absl::Milliseconds(10)).ok());
  }
  EXPECT_EQ(server_->clients(), 1u);
  const int d = Dial();
  Send(d, "3\n");
  EXPECT_EQ(ReadLines(d, 1), "[3]\n");
  close(b);
  close(d);
}

// A client that sends its requests and shuts its side still gets every
// answer, then is closed.
TEST_F(JsonLinesServerTest, AnswersAClientThatShutItsEnd) {
  const int c = Dial();
  Send(c, "x\ny\n");
  ASSERT_EQ(shutdown(c, SHUT_WR), 0);
  bool closed = false;
  EXPECT_EQ(ReadLines(c, 3, &closed), "[x]\n[y]\n");
  EXPECT_TRUE(closed);
  close(c);
}

// A client that never reads is closed once max_output bytes wait.
TEST_F(JsonLinesServerTest, AClientThatDoesNotReadIsClosed) {
  const int c = Dial();
  std::string line;
  for (int i = 0; i < 20; ++i) line += std::string(90, 'q') + "\n";
  bool dropped = false;
  for (int i = 0; i < 2000 && !dropped; ++i) {
    if (send(c, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
        errno != EAGAIN) {
      dropped = true;
    }
    ASSERT_TRUE(loop_->RunOnce(absl::Milliseconds(1)).ok());
    dropped = dropped || server_->clients() == 0;
  }
  EXPECT_TRUE(dropped);
  EXPECT_EQ(server_->clients(), 0u);
  close(c);
}

// Many requests in one write: every one is answered, in order, but at
// most max_lines_per_wakeup of them per loop turn; the rest wait in the
// server (not in the socket) and are answered on the next turns, also
// after the client has shut its end.
TEST_F(JsonLinesServerTest, ManyLinesInOneWriteAreAnsweredAFewPerTurn) {
  server_.reset();
  JsonLinesServer::Options o = Options();
  o.max_lines_per_wakeup = 4;
  o.max_output = 100000;
  auto s = JsonLinesServer::Create(*loop_, path_, std::move(o));
  ASSERT_TRUE(s.ok()) << s.status();
  server_ = *std::move(s);
  const int c = Dial();
  std::string requests;
  std::string want;
  for (int i = 0; i < 50; ++i) {
    absl::StrAppend(&requests, i, "\n");
    absl::StrAppend(&want, "[", i, "]\n");
  }
  Send(c, requests);
  ASSERT_EQ(shutdown(c, SHUT_WR), 0);
  std::string got;
  size_t most = 0;
  bool closed = false;
  for (int turn = 0; turn < 100 && !closed; ++turn) {
    const size_t before = seen_.size();
    ASSERT_TRUE(loop_->RunOnce(absl::Milliseconds(10)).ok());
    most = std::max(most, seen_.size() - before);
    char buf[4096];
    ssize_t r;
    while ((r = recv(c, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
      got.append(buf, r);
    }
    if (r == 0) closed = true;
  }
  EXPECT_EQ(got, want);
  EXPECT_TRUE(closed);
  EXPECT_EQ(seen_.size(), 50u);
  EXPECT_LE(most, 4u) << "lines handled in one turn";
  close(c);
}

// The review's flood (2026-12-06, finding 12): one client writes 200 KiB
// of short requests whose answers are long, and never reads. The answers
// waiting for it stay within max_output plus one answer (they used to
// pile up by the tens of MB within one wake-up), each turn handles at
// most max_lines_per_wakeup of its lines, another client is answered on
// the turn after it asks, and the flooder is closed, counted, once
// max_output waits for it.
TEST_F(JsonLinesServerTest, AFloodOfRequestsIsBoundedPerTurnAndInMemory) {
  server_.reset();
  constexpr size_t kAnswer = 500;
  constexpr size_t kBudget = 8;
  JsonLinesServer::Options o = Options();
  o.max_output = 16 * 1024;
  o.max_line = 100;
  o.max_lines_per_wakeup = kBudget;
  size_t floods = 0;
  o.handle = [&](std::string_view line, Instant) {
    if (line == "c") {
      ++floods;
      return std::string(kAnswer, 'x');
    }
    return "[" + std::string(line) + "]";
  };
  const size_t max_output = o.max_output;
  auto s = JsonLinesServer::Create(*loop_, path_, std::move(o));
  ASSERT_TRUE(s.ok()) << s.status();
  server_ = *std::move(s);
  const int flooder = Dial();
  const int other = Dial();
  std::string flood;
  while (flood.size() < 200 * 1024) flood += "c\n";
  size_t sent = 0;
  int asked_at = -1;
  int answered_at = -1;
  size_t most_per_turn = 0;
  std::string other_got;
  for (int turn = 0; turn < 5000 && (answered_at < 0 || server_->clients() > 1);
       ++turn) {
    if (sent < flood.size()) {
      const ssize_t n = send(flooder, flood.data() + sent, flood.size() - sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
    }
    if (turn == 3) {
      Send(other, "b\n");
      asked_at = turn;
    }
    const size_t before = floods;
    ASSERT_TRUE(loop_->RunOnce(absl::Milliseconds(1)).ok());
    most_per_turn = std::max(most_per_turn, floods - before);
    char buf[256];
    const ssize_t r = recv(other, buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) other_got.append(buf, r);
    if (answered_at < 0 && other_got == "[b]\n") answered_at = turn;
  }
  EXPECT_LE(server_->output_high_water(), max_output + kAnswer + 1);
  EXPECT_LE(most_per_turn, kBudget) << "lines handled in one turn";
  EXPECT_EQ(answered_at, asked_at) << "the other client waited";
  EXPECT_EQ(server_->clients(), 1u) << "the flooder is still served";
  EXPECT_EQ(server_->closed_slow_clients(), 1u);
  close(flooder);
  close(other);
}

// A client the peer check refuses is closed at accept, unanswered, and
// counted (not as a connection); the others are served.
TEST_F(JsonLinesServerTest, APeerCheckRefusesAtAccept) {
  bool refuse = true;
  int checked = 0;
  server_->SetPeerCheck([&](int fd) {
    ++checked;
    return refuse ? absl::PermissionDeniedError("not you") : absl::OkStatus();
  });
  const int stranger = Dial();
  Send(stranger, "let me in\n");
  bool closed = false;
  EXPECT_EQ(ReadLines(stranger, 1, &closed), "");
  EXPECT_TRUE(closed);
  EXPECT_EQ(server_->refused_peers(), 1u);
  EXPECT_EQ(server_->connections(), 0u);
  EXPECT_TRUE(seen_.empty());
  refuse = false;
  const int owner = Dial();
  Send(owner, "me\n");
  EXPECT_EQ(ReadLines(owner, 1), "[me]\n");
  EXPECT_EQ(checked, 2);
  EXPECT_EQ(server_->refused_peers(), 1u);
  EXPECT_EQ(server_->connections(), 1u);
  close(stranger);
  close(owner);
}

TEST_F(JsonLinesServerTest, TheSocketIsPrivateAndGoesWithTheServer) {
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600);
  auto again = JsonLinesServer::Create(*loop_, path_, Options());
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find(
                absl::StrCat("--test: bind ", path_, " (the file exists")),
            std::string::npos)
      << again.status();
  server_.reset();
  EXPECT_NE(stat(path_.c_str(), &st), 0);
}

TEST_F(JsonLinesServerTest, ABadPathSaysWhy) {
  auto s = JsonLinesServer::Create(*loop_, std::string(200, 'a'), Options());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--test '"), std::string::npos);
  EXPECT_NE(s.status().message().find("is 1 to 107 bytes"), std::string::npos);
}

}  // namespace
}  // namespace netstack::tools
