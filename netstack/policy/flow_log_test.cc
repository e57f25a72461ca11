#include "netstack/policy/flow_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::policy {
namespace {

using tools::bench::JsonValue;
using tools::bench::ParseJson;

const Instant kT0 = absl::UnixEpoch() + absl::Hours(1000);

std::string TestDir() {
  static int n = 0;
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/flow_log_",
                                 getpid(), "_", n++);
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

// Each line of `text` parsed; a line that does not parse fails the test.
std::vector<JsonValue> ParseLines(const std::string& text) {
  std::vector<JsonValue> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    absl::StatusOr<JsonValue> v =
        ParseJson(std::string_view(line.data(), line.size()));
    EXPECT_TRUE(v.ok()) << v.status() << ": " << line;
    if (v.ok()) out.push_back(*std::move(v));
  }
  return out;
}

FlowEvent Event(FlowEvent::Kind kind) {
  FlowEvent e;
  e.kind = kind;
  e.protocol = kTcp;
  e.guest = *transport::SocketAddress::Parse("10.0.2.100:41234");
  e.dst = *transport::SocketAddress::Parse("[2001:db8::7]:443");
  return e;
}

std::unique_ptr<FlowLog> OpenLog(const std::string& path, uint64_t max_bytes,
                                 uint32_t rate) {
  FlowLog::Options o;
  o.path = path;
  o.max_bytes = max_bytes;
  o.max_lines_per_second = rate;
  absl::StatusOr<std::unique_ptr<FlowLog>> log = FlowLog::Open(o, kT0);
  EXPECT_TRUE(log.ok()) << log.status();
  return log.ok() ? *std::move(log) : nullptr;
}

TEST(FlowLogTest, EveryLineIsJsonWithTheDocumentedFields) {
  const std::string path = TestDir() + "/flows.log";
  std::unique_ptr<FlowLog> log = OpenLog(path, 1 << 20, 1000);
  ASSERT_NE(log, nullptr);

  FlowEvent opened = Event(FlowEvent::Kind::kOpened);
  opened.name = "example.com";
  opened.verdict.allow = true;
  opened.verdict.reason = Reason::kPinnedName;
  opened.rule = "allow tcp:example.com:443";
  log->Record(opened, kT0 + absl::Milliseconds(1));

  FlowEvent refused = Event(FlowEvent::Kind::kRefused);
  refused.protocol = kUdp;
  refused.dst = *transport::SocketAddress::Parse("169.254.169.254:80");
  refused.verdict.allow = false;
  refused.verdict.reason = Reason::kMetadata;
  log->Record(refused, kT0 + absl::Milliseconds(2));

  FlowEvent closed = Event(FlowEvent::Kind::kClosed);
  closed.name = "example.com";
  closed.bytes_out = 1234;
  closed.bytes_in = 56789;
  closed.duration = absl::Milliseconds(1500);
  log->Record(closed, kT0 + absl::Milliseconds(3));

  // A name from the guest's query, with what JSON must escape.
  FlowEvent dns = Event(FlowEvent::Kind::kDnsDenied);
  dns.protocol = kUdp;
  dns.dst = *transport::SocketAddress::Parse("10.0.2.3:53");
  const std::string hostile = "a\"b\\c\n\x01\xff.example";
  dns.name = hostile;
  dns.verdict.allow = false;
  dns.verdict.reason = Reason::kNotAllowed;
  log->Record(dns, kT0 + absl::Milliseconds(4));

  FlowEvent ping = Event(FlowEvent::Kind::kRefused);
  ping.protocol = kIcmp;
  ping.dst = *transport::SocketAddress::Parse("192.0.2.1:0");
  ping.verdict.allow = false;
  ping.verdict.reason = Reason::kDenyRule;
  ping.rule = "deny 192.0.2.0/24";
  log->Record(ping, kT0 + absl::Milliseconds(5));
  log->Flush();

  const std::string text = ReadFile(path);
  ASSERT_EQ(std::count(text.begin(), text.end(), '\n'), 5) << text;
  std::vector<JsonValue> lines = ParseLines(text);
  ASSERT_EQ(lines.size(), 5u) << text;
  const std::regex rfc3339(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
  for (const JsonValue& v : lines) {
    ASSERT_TRUE(v.is_object());
    for (const char* key :
         {"time", "event", "proto", "src", "dst", "verdict", "reason"}) {
      EXPECT_TRUE(v.GetString(key).has_value()) << key << " in " << text;
    }
    EXPECT_TRUE(v.GetInt("port").has_value()) << text;
    EXPECT_TRUE(std::regex_match(v.GetString("time").value_or(""), rfc3339))
        << v.GetString("time").value_or("");
    EXPECT_EQ(v.Find("dropped"), nullptr) << text;
  }
  EXPECT_EQ(lines[0].GetString("event"), "opened");
  EXPECT_EQ(lines[0].GetString("proto"), "tcp");
  EXPECT_EQ(lines[0].GetString("src"), "10.0.2.100:41234");
  EXPECT_EQ(lines[0].GetString("dst"), "2001:db8::7");
  EXPECT_EQ(lines[0].GetInt("port"), 443);
  EXPECT_EQ(lines[0].GetString("name"), "example.com");
  EXPECT_EQ(lines[0].GetString("verdict"), "allow");
  EXPECT_EQ(lines[0].GetString("reason"), "pinned_name");
  EXPECT_EQ(lines[0].GetString("rule"), "allow tcp:example.com:443");
  EXPECT_EQ(lines[0].Find("bytes_out"), nullptr);

  EXPECT_EQ(lines[1].GetString("event"), "refused");
  EXPECT_EQ(lines[1].GetString("proto"), "udp");
  EXPECT_EQ(lines[1].GetString("dst"), "169.254.169.254");
  EXPECT_EQ(lines[1].GetInt("port"), 80);
  EXPECT_EQ(lines[1].GetString("verdict"), "deny");
  EXPECT_EQ(lines[1].GetString("reason"), "metadata");
  EXPECT_EQ(lines[1].Find("name"), nullptr);
  EXPECT_EQ(lines[1].Find("rule"), nullptr);

  EXPECT_EQ(lines[2].GetString("event"), "closed");
  EXPECT_EQ(lines[2].GetInt("bytes_out"), 1234);
  EXPECT_EQ(lines[2].GetInt("bytes_in"), 56789);
  EXPECT_EQ(lines[2].GetInt("duration_ms"), 1500);

  EXPECT_EQ(lines[3].GetString("event"), "dns_denied");
  EXPECT_EQ(lines[3].GetString("reason"), "not_allowed");
  // Every byte is there, the ones past ASCII as U+00XX.
  EXPECT_EQ(lines[3].GetString("name"),
            "a\"b\\c\n\x01\xc3\xbf.example");

  EXPECT_EQ(lines[4].GetString("proto"), "icmp");
  EXPECT_EQ(lines[4].GetInt("port"), 0);
  EXPECT_EQ(lines[4].GetString("rule"), "deny 192.0.2.0/24");

  // The time is the loop's clock moved to the wall clock once: 1 ms apart.
  EXPECT_NE(lines[0].GetString("time"), lines[1].GetString("time"));
  EXPECT_EQ(log->counters().lines, 5u);
  EXPECT_EQ(log->counters().dropped_rate, 0u);
  EXPECT_EQ(log->counters().write_errors, 0u);
}

TEST(FlowLogTest, NothingReachesTheFileBeforeFlushUnlessTheBufferFills) {
  const std::string path = TestDir() + "/flows.log";
  std::unique_ptr<FlowLog> log = OpenLog(path, 64 << 20, 1000000);
  ASSERT_NE(log, nullptr);
  log->Record(Event(FlowEvent::Kind::kOpened), kT0);
  EXPECT_EQ(FileSize(path), 0u);
  log->Flush();
  const uint64_t one = FileSize(path);
  EXPECT_GT(one, 0u);
  // 64 KiB of lines is written without a Flush.
  for (int i = 0; i < 2000; ++i) {
    log->Record(Event(FlowEvent::Kind::kOpened), kT0 + absl::Microseconds(i));
  }
  EXPECT_GE(FileSize(path), 64u * 1024);
  EXPECT_LT(FileSize(path), 2000 * one);
}

TEST(FlowLogTest, RotationKeepsAtMostTwiceTheCapOnDisk) {
  const std::string dir = TestDir();
  const std::string path = dir + "/flows.log";
  constexpr uint64_t kMax = 4096;
  std::unique_ptr<FlowLog> log = OpenLog(path, kMax, 1000000);
  ASSERT_NE(log, nullptr);
  uint64_t longest = 0;
  for (int i = 0; i < 10000; ++i) {
    FlowEvent e = Event(FlowEvent::Kind::kRefused);
    e.dst.port = static_cast<uint16_t>(i);
    log->Record(e, kT0 + absl::Milliseconds(i));
    if (i % 7 == 0) log->Flush();  // a loop turn now and then
    const uint64_t on_disk = FileSize(path) + FileSize(path + ".1");
    ASSERT_LE(on_disk, 2 * kMax) << "after line " << i;
  }
  log->Flush();
  const std::string current = ReadFile(path);
  const std::string previous = ReadFile(path + ".1");
  for (absl::string_view l : absl::StrSplit(current + previous, '\n')) {
    longest = std::max<uint64_t>(longest, l.size() + 1);
  }
  EXPECT_LE(current.size(), kMax);
  EXPECT_LE(previous.size(), kMax);
  EXPECT_GT(previous.size(), kMax - longest);  // rotated when full
  EXPECT_GT(log->counters().rotations, 100u);
  EXPECT_EQ(FileSize(path + ".2"), 0u);  // one rotation only
  // Both files hold whole lines, and the newest line is the last one.
  std::vector<JsonValue> lines = ParseLines(current);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().GetInt("port"), 9999);
  EXPECT_FALSE(ParseLines(previous).empty());
  EXPECT_EQ(log->counters().lines, 10000u);
  EXPECT_EQ(log->counters().write_errors, 0u);
}

TEST(FlowLogTest, AFileAlreadyPastTheCapIsRotatedAtTheFirstLine) {
  const std::string path = TestDir() + "/flows.log";
  {
    std::ofstream old(path);
    old << std::string(10000, 'x') << "\n";
  }
  std::unique_ptr<FlowLog> log = OpenLog(path, 4096, 1000);
  ASSERT_NE(log, nullptr);
  log->Record(Event(FlowEvent::Kind::kOpened), kT0);
  log->Flush();
  EXPECT_EQ(FileSize(path + ".1"), 10001u);
  EXPECT_EQ(ParseLines(ReadFile(path)).size(), 1u);
  EXPECT_EQ(log->counters().rotations, 1u);
}

TEST(FlowLogTest, AFloodIsCutToTheRateAndCounted) {
  const std::string path = TestDir() + "/flows.log";
  constexpr uint32_t kRate = 1000;
  std::unique_ptr<FlowLog> log = OpenLog(path, 64 << 20, kRate);
  ASSERT_NE(log, nullptr);
  // 100,000 denied attempts within one second.
  constexpr int kAttempts = 100000;
  for (int i = 0; i < kAttempts; ++i) {
    FlowEvent e = Event(FlowEvent::Kind::kRefused);
    e.verdict.allow = false;
    e.verdict.reason = Reason::kNotAllowed;
    log->Record(e, kT0 + absl::Microseconds(10 * i));
    if (i % 100 == 0) log->Flush();
  }
  log->Flush();
  const FlowLogCounters c = log->counters();
  // The bucket starts full (a second's burst) and refills over the
  // second: at most twice the rate, and at least the rate.
  EXPECT_GE(c.lines, kRate);
  EXPECT_LE(c.lines, 2 * kRate + 1);
  EXPECT_EQ(c.lines + c.dropped_rate, static_cast<uint64_t>(kAttempts));
  std::vector<JsonValue> lines = ParseLines(ReadFile(path));
  EXPECT_EQ(lines.size(), c.lines);
  // Every drop is reported by the line after it: all of them once a line
  // follows the flood.
  FlowEvent after = Event(FlowEvent::Kind::kRefused);
  log->Record(after, kT0 + absl::Seconds(3));
  log->Flush();
  lines = ParseLines(ReadFile(path));
  uint64_t reported = 0;
  for (const JsonValue& v : lines) reported += v.GetInt("dropped").value_or(0);
  EXPECT_EQ(reported, c.dropped_rate);
  EXPECT_GT(lines.back().GetInt("dropped").value_or(0), 0);
}

TEST(FlowLogTest, AWriteErrorIsCountedAndNotFatal) {
  // /dev/full: every write fails with ENOSPC.
  FlowLog::Options o;
  o.path = "/dev/full";
  absl::StatusOr<std::unique_ptr<FlowLog>> log = FlowLog::Open(o, kT0);
  ASSERT_TRUE(log.ok()) << log.status();
  (*log)->Record(Event(FlowEvent::Kind::kOpened), kT0);
  (*log)->Flush();
  EXPECT_EQ((*log)->counters().write_errors, 1u);
  (*log)->Record(Event(FlowEvent::Kind::kClosed), kT0 + absl::Seconds(1));
  (*log)->Flush();
  EXPECT_EQ((*log)->counters().write_errors, 2u);
  EXPECT_EQ((*log)->counters().lines, 2u);
  EXPECT_THAT((*log)->FormatCounters(),
              testing::HasSubstr("flow_log.write_errors 2\n"));
}

TEST(FlowLogTest, OpenFailsOnADirectoryThatDoesNotExist) {
  FlowLog::Options o;
  o.path = TestDir() + "/no/such/dir/flows.log";
  absl::StatusOr<std::unique_ptr<FlowLog>> log = FlowLog::Open(o, kT0);
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(std::string(log.status().message()),
              testing::HasSubstr("no/such/dir"));
}

}  // namespace
}  // namespace netstack::policy
