#include "tools/tcp_benchmark/json.h"

#include <string>

#include "gtest/gtest.h"

namespace netstack::tools::bench {
namespace {

TEST(JsonReader, ParsesIperf3Parameters) {
  absl::StatusOr<JsonValue> v = ParseJson(
      R"({"tcp":true,"omit":0,"time":10,"parallel":2,"reverse":true,)"
      R"("len":131072,"client_version":"3.12"})");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->GetBool("tcp"), true);
  EXPECT_EQ(v->GetInt("time"), 10);
  EXPECT_EQ(v->GetInt("parallel"), 2);
  EXPECT_EQ(v->GetString("client_version"), "3.12");
  EXPECT_EQ(v->GetInt("missing"), std::nullopt);
  EXPECT_EQ(v->GetString("time"), std::nullopt);  // wrong type
}

TEST(JsonReader, NumbersEscapesNesting) {
  absl::StatusOr<JsonValue> v = ParseJson(
      " {\"a\": [1, -2.5e3, 0.125, true, false, null, {}],"
      " \"s\": \"q\\\"\\\\\\/\\n\\u00e9\\ud83d\\ude00\"} \n");
  ASSERT_TRUE(v.ok()) << v.status();
  const JsonValue* a = v->Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->items().size(), 7u);
  EXPECT_EQ(a->items()[1].number(), -2500);
  EXPECT_EQ(a->items()[2].number(), 0.125);
  EXPECT_TRUE(a->items()[5].is_null());
  EXPECT_TRUE(a->items()[6].is_object());
  EXPECT_EQ(v->GetString("s"), "q\"\\/\n\xc3\xa9\xf0\x9f\x98\x80");
}

TEST(JsonReader, HugeUnsignedIsANumberButNotAnInt) {
  // iperf3 3.12 writes -1 as 2^64 - 1.
  absl::StatusOr<JsonValue> v = ParseJson(R"({"r":18446744073709551615})");
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->GetNumber("r").has_value());
  EXPECT_EQ(v->GetInt("r"), std::nullopt);
}

TEST(JsonReader, RejectsMalformedInput) {
  for (const char* bad :
       {"", "{", "}", "{\"a\":}", "{\"a\" 1}", "{\"a\":1,}", "[1,]", "[1 2]",
        "{a:1}", "\"unterminated", "01x", "-", "1.", "1e", "tru", "nul",
        "{\"a\":1} x", "\"\\x\"", "\"\\u12\"", "\"a\nb\"", "NaN", "Infinity",
        "{\"a\":1}{"}) {
    EXPECT_FALSE(ParseJson(bad).ok()) << bad;
  }
}

TEST(JsonReader, RejectsANumberPastADoublesRange) {
  // strtod makes 1e400 infinity, which JSON cannot write back: the writer
  // would say null, and a results document with one would not decode
  // again. A peer's 1e400 is an error here, as NaN and Infinity are.
  for (const char* bad : {"1e400", "-1e400", "[73709E51615]",
                          "{\"cpu_util_system\":1E309}"}) {
    absl::StatusOr<JsonValue> v = ParseJson(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_NE(v.status().message().find("out of range"), std::string::npos)
        << v.status();
  }
  // The largest double is fine, and so is underflow: it rounds to zero or
  // to a subnormal.
  for (const char* fine : {"1e-400", "1.7976931348623157e308", "4.9e-324"}) {
    EXPECT_TRUE(ParseJson(fine).ok()) << fine;
  }
}

TEST(JsonReader, LimitsNesting) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  absl::StatusOr<JsonValue> v = ParseJson(deep);
  EXPECT_FALSE(v.ok());
  const std::string ok = std::string(kJsonMaxDepth - 1, '[') +
                         std::string(kJsonMaxDepth - 1, ']');
  EXPECT_TRUE(ParseJson(ok).ok());
}

TEST(JsonWriter, WritesCompactJsonThatReadsBack) {
  JsonWriter w;
  w.BeginObject();
  w.Key("id").Int(-3);
  w.Key("bytes").Uint(18446744073709551615u);
  w.Key("x").Double(0.1);
  w.Key("inf").Double(1.0 / 0.0);
  w.Key("ok").Bool(true);
  w.Key("s").String("a\"b\\c\n\x01");
  w.Key("list").BeginArray().Int(1).Int(2).BeginObject().EndObject().EndArray();
  w.Key("n").Null();
  w.EndObject();
  EXPECT_EQ(w.text(),
            "{\"id\":-3,\"bytes\":18446744073709551615,\"x\":0.1,\"inf\":null,"
            "\"ok\":true,\"s\":\"a\\\"b\\\\c\\n\\u0001\",\"list\":[1,2,{}],"
            "\"n\":null}");
  absl::StatusOr<JsonValue> back = ParseJson(w.text());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->GetNumber("x"), 0.1);
  EXPECT_EQ(back->GetString("s"), "a\"b\\c\n\x01");
}

}  // namespace
}  // namespace netstack::tools::bench
