#include "tools/tcp_benchmark/iperf3_protocol.h"

#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools::bench::iperf3 {
namespace {

std::string Length(uint32_t n) {
  return std::string{static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)};
}

TEST(Cookie, Has36CharactersAndANul) {
  std::mt19937_64 rng(1);
  const std::string c = MakeCookie(rng);
  EXPECT_EQ(c.size(), 37u);
  EXPECT_EQ(c.back(), '\0');
  EXPECT_TRUE(IsWellFormedCookie(c));
  EXPECT_NE(MakeCookie(rng), c);
}

TEST(Cookie, RejectsMalformed) {
  EXPECT_FALSE(IsWellFormedCookie(std::string(36, 'a')));          // short
  EXPECT_FALSE(IsWellFormedCookie(std::string(37, 'a')));          // no NUL
  EXPECT_FALSE(IsWellFormedCookie(std::string(36, '\x01') + '\0'));  // binary
  EXPECT_FALSE(IsWellFormedCookie("GET / HTTP/1.1\r\nHost: x\r\n\r\n12345678"));
}

TEST(StreamIds, FollowIperf3) {
  EXPECT_EQ(StreamId(0), 1);
  EXPECT_EQ(StreamId(1), 3);
  EXPECT_EQ(StreamId(2), 4);
}

TEST(FrameReader, CutsStatesAndJsonAcrossPartialReads) {
  const std::string wire = EncodeState(kParamExchange) +
                           EncodeJsonMessage("{\"a\":1}") +
                           EncodeState(kTestEnd);
  FrameReader r;
  // Byte by byte: nothing comes out before it is whole.
  r.Append(wire.substr(0, 1));
  EXPECT_EQ(r.TakeState(), kParamExchange);
  for (size_t i = 1; i < wire.size() - 1; ++i) {
    absl::StatusOr<std::optional<JsonValue>> j = r.TakeJson();
    ASSERT_TRUE(j.ok());
    EXPECT_FALSE(j->has_value()) << i;
    r.Append(wire.substr(i, 1));
  }
  absl::StatusOr<std::optional<JsonValue>> j = r.TakeJson();
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE(j->has_value());
  EXPECT_EQ((*j)->GetInt("a"), 1);
  EXPECT_EQ(r.TakeState(), std::nullopt);
  r.Append(wire.substr(wire.size() - 1));
  EXPECT_EQ(r.TakeState(), kTestEnd);
}

TEST(FrameReader, RejectsBadLengths) {
  for (uint32_t bad : {0u, kMaxJsonMessage + 1, 0xffffffffu}) {
    FrameReader r;
    r.Append(Length(bad) + "{}");
    EXPECT_FALSE(r.TakeJson().ok()) << bad;
  }
}

TEST(FrameReader, RejectsBadAndTruncatedJson) {
  FrameReader bad;
  bad.Append(EncodeJsonMessage("{\"tcp\":tru}"));
  EXPECT_FALSE(bad.TakeJson().ok());
  // The length claims more than the JSON: the whole message is read and
  // then fails to parse as it would if truncated on the wire.
  FrameReader truncated;
  truncated.Append(Length(9) + "{\"a\":1");
  absl::StatusOr<std::optional<JsonValue>> pending = truncated.TakeJson();
  ASSERT_TRUE(pending.ok());
  EXPECT_FALSE(pending->has_value());  // still waiting for 3 bytes
  truncated.Append("   ");
  EXPECT_FALSE(truncated.TakeJson().ok());
}

TEST(FrameReader, ServerErrorCarriesTwoInts) {
  FrameReader r;
  r.Append(EncodeServerError(kErrProtocol, 22));
  EXPECT_EQ(r.TakeState(), kServerError);
  EXPECT_EQ(r.TakeInt32(), kErrProtocol);
  EXPECT_EQ(r.TakeInt32(), 22);
}

TEST(Params, RoundTripAndIperf3Text) {
  TestParams p;
  p.duration = 2.5;
  p.parallel = 3;
  p.reverse = true;
  p.congestion = "reno";
  absl::StatusOr<JsonValue> j = ParseJson(EncodeParams(p));
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->GetInt("time"), 3);  // iperf3 reads an int: rounded up
  absl::StatusOr<TestParams> back = DecodeParams(*j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->tcp);
  EXPECT_TRUE(back->reverse);
  EXPECT_EQ(back->parallel, 3);
  EXPECT_EQ(back->len, 131072);
  EXPECT_EQ(back->congestion, "reno");
}

TEST(Params, RejectsWrongTypesAndRanges) {
  for (const char* bad :
       {"[]", R"({"tcp":true,"parallel":0})", R"({"tcp":true,"parallel":1e9})",
        R"({"tcp":true,"time":"10"})", R"({"tcp":true,"len":-1})",
        R"({"tcp":true,"time":1.5})"}) {
    absl::StatusOr<JsonValue> j = ParseJson(bad);
    ASSERT_TRUE(j.ok()) << bad;
    EXPECT_FALSE(DecodeParams(*j).ok()) << bad;
  }
}

TEST(Results, RoundTripAndStockIperf3Quirks) {
  TestResults r;
  r.cpu_util_total = 12.5;
  r.sender_has_retransmits = 1;
  r.streams.push_back({1, 1000, 2, 0, 1.5});
  r.streams.push_back({3, 2000, 0, 0, 1.5});
  absl::StatusOr<JsonValue> j = ParseJson(EncodeResults(r));
  ASSERT_TRUE(j.ok());
  absl::StatusOr<TestResults> back = DecodeResults(*j);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->streams.size(), 2u);
  EXPECT_EQ(back->streams[1].id, 3);
  EXPECT_EQ(back->streams[1].bytes, 2000u);
  EXPECT_EQ(back->streams[0].retransmits, 2u);

  // What iperf3 3.12 sends as a receiver (captured).
  absl::StatusOr<JsonValue> stock = ParseJson(
      R"({"cpu_util_total":48.02,"cpu_util_user":1.51,"cpu_util_system":46.5,)"
      R"("sender_has_retransmits":18446744073709551615,"congestion_used":"bbr",)"
      R"("streams":[{"id":1,"bytes":1023279104,"retransmits":)"
      R"(18446744073709551615,"jitter":0,"errors":0,"packets":0,)"
      R"("start_time":0,"end_time":1.00019}]})");
  ASSERT_TRUE(stock.ok());
  absl::StatusOr<TestResults> s = DecodeResults(*stock);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->sender_has_retransmits, -1);
  EXPECT_EQ(s->streams[0].bytes, 1023279104u);
  EXPECT_EQ(s->streams[0].retransmits, 0u);
}

TEST(Results, RejectsMissingFields) {
  for (const char* bad :
       {R"({"streams":[]})",
        R"({"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":0})",
        R"({"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":0,"streams":[{"id":1}]})",
        R"({"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":0,"streams":[{"id":1,"bytes":-5}]})",
        R"({"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":0,"streams":{}})"}) {
    absl::StatusOr<JsonValue> j = ParseJson(bad);
    ASSERT_TRUE(j.ok()) << bad;
    EXPECT_FALSE(DecodeResults(*j).ok()) << bad;
  }
}

}  // namespace
}  // namespace netstack::tools::bench::iperf3
