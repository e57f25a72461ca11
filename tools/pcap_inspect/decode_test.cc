#include "tools/pcap_inspect/decode.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/wire/testing.h"
#include "tools/pcap_inspect/format.h"

namespace netstack::tools {
namespace {

using wire::WireError;
using wire::testing::Hex;

// A Linux SYN over IPv4 (10.9.0.1:40000 -> 10.9.0.2:80), an ARP request
// and an IPv6 neighbor solicitation, all captured on a veth pair with
// checksum offload off.
const std::vector<uint8_t> kSyn = Hex(
    "f2e4fd57c446fe984dae36de08004500003cfe074000400628a00a0900010a090002"
    "9c40005094dcdc5a00000000a002faf0ac3a0000020405b40402080a042d7acb0000"
    "000001030307");
const std::vector<uint8_t> kArp = Hex(
    "fffffffffffffe984dae36de08060001080006040001fe984dae36de0a0900010000"
    "000000000a090002");
const std::vector<uint8_t> kNs = Hex(
    "3333ff000002fe984dae36de86dd6000000000203afffd0000090000000000000000"
    "00000001ff0200000000000000000001ff0000028700fc6000000000fd0000090000"
    "000000000000000000020101fe984dae36de");

TEST(DecodeTest, TcpSyn) {
  const DecodedFrame f = DecodeFrame(kSyn);
  ASSERT_EQ(f.error, WireError::kOk);
  ASSERT_TRUE(f.ipv4 && f.tcp);
  EXPECT_EQ(f.ipv4->src.ToString(), "10.9.0.1");
  EXPECT_TRUE(f.ipv4_checksum_valid);
  EXPECT_EQ(f.tcp->src_port, 40000);
  EXPECT_EQ(f.tcp->dst_port, 80);
  EXPECT_EQ(f.tcp->seq, 0x94dcdc5au);
  EXPECT_EQ(TcpFlagString(f.tcp->flags), "S");
  EXPECT_EQ(f.tcp->mss, 1460);
  EXPECT_EQ(f.tcp->window_scale, 7);
  EXPECT_EQ(f.l4_checksum_valid, true);
  const std::string line = FormatLine({11, 0.5, 74, 74}, f);
  EXPECT_EQ(line,
            "11 0.500000 IPv4 10.9.0.1.40000 > 10.9.0.2.80 TCP [S] "
            "seq=2497502298 ack=0 win=64240 len=0 "
            "[mss 1460,sackOK,TS 70089419 0,wscale 7] csum ok");
  const std::string json = FormatJson({11, 0.5, 74, 74}, f);
  EXPECT_NE(json.find("\"tcp\":{\"src_port\":40000,\"dst_port\":80,"
                      "\"seq\":2497502298,\"ack\":0,\"flags\":\"S\","
                      "\"flags_raw\":2,\"window\":64240,\"options\":{"
                      "\"mss\":1460,\"wscale\":7,\"sack_permitted\":true,"
                      "\"ts\":[70089419,0]},\"payload_len\":0,"
                      "\"checksum_valid\":true}"),
            std::string::npos)
      << json;
}

TEST(DecodeTest, CorruptedChecksumIsReportedNotDropped) {
  auto bad = kSyn;
  bad.back() ^= 0x01;  // window scale 7 -> 6, TCP checksum now wrong
  const DecodedFrame f = DecodeFrame(bad);
  ASSERT_EQ(f.error, WireError::kOk);
  EXPECT_EQ(f.l4_checksum_valid, false);
  EXPECT_NE(FormatLine({1, 0, 74, 74}, f).find("csum BAD"), std::string::npos);
}

TEST(DecodeTest, ArpAndNeighborSolicitation) {
  DecodedFrame arp = DecodeFrame(kArp);
  ASSERT_EQ(arp.error, WireError::kOk);
  ASSERT_TRUE(arp.arp);
  EXPECT_EQ(FormatLine({9, 0, 42, 42}, arp),
            "9 0.000000 ARP who-has 10.9.0.2 tell 10.9.0.1");
  DecodedFrame ns = DecodeFrame(kNs);
  ASSERT_EQ(ns.error, WireError::kOk);
  ASSERT_TRUE(ns.icmpv6);
  EXPECT_EQ(ns.l4_checksum_valid, true);
  EXPECT_NE(FormatLine({20, 0, 86, 86}, ns)
                .find("neighbor solicitation who-has fd00:9::2"),
            std::string::npos);
}

TEST(DecodeTest, RejectedFrameNamesLayerAndReason) {
  auto bad = kSyn;
  bad[14] = 0x44;  // IHL 4
  DecodedFrame f = DecodeFrame(bad);
  EXPECT_EQ(f.error, WireError::kBadHeaderLength);
  EXPECT_EQ(f.error_layer, "ipv4");
  EXPECT_TRUE(f.eth.has_value());
  EXPECT_FALSE(f.tcp.has_value());
  const std::string line = FormatLine({1, 0, 74, 74}, f);
  EXPECT_NE(line.find("ERROR ipv4: bad_header_length"), std::string::npos)
      << line;
  EXPECT_NE(FormatJson({1, 0, 74, 74}, f)
                .find("\"error\":{\"layer\":\"ipv4\","
                      "\"reason\":\"bad_header_length\"}"),
            std::string::npos);

  auto bad_tcp = kSyn;
  bad_tcp[14 + 20 + 12] = 0x40;  // data offset 4
  f = DecodeFrame(bad_tcp);
  EXPECT_EQ(f.error, WireError::kBadHeaderLength);
  EXPECT_EQ(f.error_layer, "tcp");
}

// Every prefix, and many random mutations, of real frames decode to a
// result without crashing (ASan/UBSan watch the reads).
TEST(DecodeTest, TotalOnTruncationsAndMutations) {
  std::mt19937 rng(7);
  size_t errors = 0, decoded = 0;
  for (const auto* frame : {&kSyn, &kArp, &kNs}) {
    for (size_t len = 0; len <= frame->size(); ++len) {
      std::vector<uint8_t> prefix(frame->begin(), frame->begin() + len);
      prefix.shrink_to_fit();
      const DecodedFrame f = DecodeFrame(prefix);
      (f.error == WireError::kOk ? decoded : errors)++;
      if (len < 14) {
        EXPECT_EQ(f.error_layer, "ethernet");
      }
    }
    for (int i = 0; i < 20000; ++i) {
      std::vector<uint8_t> m = *frame;
      const int flips = 1 + rng() % 4;
      for (int j = 0; j < flips; ++j) m[rng() % m.size()] ^= 1u << (rng() % 8);
      m.resize(rng() % (m.size() + 1));
      m.shrink_to_fit();
      const DecodedFrame f = DecodeFrame(m);
      (f.error == WireError::kOk ? decoded : errors)++;
      (void)FormatJson({1, 0, 1, 1}, f);
      (void)FormatLine({1, 0, 1, 1}, f);
    }
  }
  // Both outcomes occur: the mutations reach the parsers' error paths.
  EXPECT_GT(errors, 1000u);
  EXPECT_GT(decoded, 1000u);
}

}  // namespace
}  // namespace netstack::tools
