#include "tools/tcp_benchmark/client_result.h"

#include "gtest/gtest.h"

namespace netstack::tools::bench {
namespace {

constexpr char kObject[] =
    R"({"role":"client","stack":"netstack","reverse":true,"bytes":1250000000,)"
    R"("seconds":2.0,"gbps":5.0,"retransmits":3,"sender_cpu_util":41.5,)"
    R"("receiver_cpu_util":12})";

TEST(ClientResultTest, ParsesTheContractObject) {
  absl::StatusOr<ClientResult> r = ParseClientResult(kObject);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stack, "netstack");
  EXPECT_TRUE(r->reverse);
  EXPECT_EQ(r->bytes, 1250000000u);
  EXPECT_DOUBLE_EQ(r->seconds, 2.0);
  EXPECT_DOUBLE_EQ(r->gbps, 5.0);
  EXPECT_EQ(r->retransmits, 3);
  EXPECT_DOUBLE_EQ(r->sender_cpu_util, 41.5);
  EXPECT_DOUBLE_EQ(r->receiver_cpu_util, 12);
}

TEST(ClientResultTest, TakesTheLastObjectAfterOtherOutput) {
  const std::string text =
      std::string("warming up\n{\"gbps\":1}\n") + kObject + "\n";
  absl::StatusOr<ClientResult> r = ParseClientResult(text);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->gbps, 5.0);
}

TEST(ClientResultTest, AcceptsAPrettyPrintedObject) {
  absl::StatusOr<ClientResult> r = ParseClientResult(
      "{\n  \"stack\": \"kernel\",\n  \"reverse\": false,\n  \"bytes\": 10,\n"
      "  \"seconds\": 1e0,\n  \"gbps\": 8e-8,\n  \"retransmits\": -1,\n"
      "  \"sender_cpu_util\": 0,\n  \"receiver_cpu_util\": 0\n}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stack, "kernel");
  EXPECT_FALSE(r->reverse);
  EXPECT_EQ(r->retransmits, -1);
  EXPECT_DOUBLE_EQ(r->gbps, 8e-8);
}

TEST(ClientResultTest, NamesAMissingKey) {
  absl::StatusOr<ClientResult> r =
      ParseClientResult(R"({"bytes":1,"seconds":1,"retransmits":0})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("\"gbps\""), std::string::npos)
      << r.status();
}

TEST(ClientResultTest, RejectsNoObjectAndBrokenOnes) {
  EXPECT_FALSE(ParseClientResult("").ok());
  EXPECT_FALSE(ParseClientResult("iperf3: error\n").ok());
  EXPECT_FALSE(ParseClientResult(R"({"gbps":1)").ok());
  EXPECT_FALSE(ParseClientResult(R"({"gbps":})").ok());
  EXPECT_FALSE(ParseClientResult(R"({"gbps":"fast","bytes":1})").ok());
}

TEST(FlatJsonTest, UnescapesStringsAndKeepsScalarsAsText) {
  absl::StatusOr<FlatJson> j =
      ParseFlatJsonObject(R"({"a":"x\"y\\z","b":null,"c":true, "d" : 1.5e3 })");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["a"], "x\"y\\z");
  EXPECT_EQ((*j)["b"], "null");
  EXPECT_EQ((*j)["c"], "true");
  EXPECT_EQ((*j)["d"], "1.5e3");
}

TEST(FlatJsonTest, RefusesNesting) {
  EXPECT_FALSE(ParseFlatJsonObject(R"({"a":{"b":1}})").ok());
  EXPECT_FALSE(ParseFlatJsonObject(R"({"a":[1]})").ok());
  EXPECT_FALSE(ParseFlatJsonObject(R"({"a":1} trailing)").ok());
}

}  // namespace
}  // namespace netstack::tools::bench
