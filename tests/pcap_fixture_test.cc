#include "tests/pcap_fixture.h"

#include <pcap/pcap.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netstack::testing {
namespace {

using ::testing::HasSubstr;

// Every .pcap in tests/testdata, without the extension.
const std::string kCaptures[] = {"http_ipv4", "http_ipv6", "icmp",
                                 "tcp_handshake_transfer",
                                 "tcp_lossy_transfer"};

// The columns make_captures.sh asks tshark for.
const std::vector<std::string> kExpectedColumns = {
    "frame.number",       "eth.src",
    "eth.dst",            "eth.type",
    "arp.opcode",         "arp.src.proto_ipv4",
    "arp.dst.proto_ipv4", "ip.src",
    "ip.dst",             "ip.proto",
    "ipv6.src",           "ipv6.dst",
    "ipv6.nxt",           "tcp.srcport",
    "tcp.dstport",        "tcp.seq_raw",
    "tcp.ack_raw",        "tcp.flags",
    "tcp.window_size_value", "tcp.len",
    "udp.srcport",        "udp.dstport",
    "icmp.type",          "icmpv6.type",
    "tcp.checksum.status",
};

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

void WriteFile(const std::string& path, std::string_view contents) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(contents.data(), 1, contents.size(), f),
            contents.size());
  ASSERT_EQ(std::fclose(f), 0);
}

std::string ReadRaw(const std::string& path) {
  std::string out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

std::string Mac(const std::vector<uint8_t>& b, size_t offset) {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", b[offset],
                         b[offset + 1], b[offset + 2], b[offset + 3],
                         b[offset + 4], b[offset + 5]);
}

// Value of `column` in every row of `table`, as numbers (absent -> skipped).
std::multiset<uint64_t> Numbers(const TsharkTable& table,
                                std::string_view column) {
  std::multiset<uint64_t> out;
  for (const TsharkRow& row : table.rows) {
    auto it = row.find(column);
    if (it == row.end()) {
      ADD_FAILURE() << "no column " << column;
      break;
    }
    if (auto n = ParseTsharkNumber(it->second)) out.insert(*n);
  }
  return out;
}

TEST(TestDataPathTest, PointsIntoRunfiles) {
  const std::string path = TestDataPath("icmp.pcap");
  EXPECT_TRUE(absl::EndsWith(path, "/netstack/tests/testdata/icmp.pcap"))
      << path;
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    EXPECT_TRUE(absl::StartsWith(path, srcdir)) << path;
  }
}

class CaptureTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string PcapPath() const {
    return TestDataPath(absl::StrCat(GetParam(), ".pcap"));
  }
  std::string TsvPath() const {
    return TestDataPath(absl::StrCat(GetParam(), ".tshark.tsv"));
  }
};

TEST_P(CaptureTest, FileHeaderIsEthernetFullSnaplen) {
  absl::StatusOr<PcapCapture> capture = ReadPcapFile(PcapPath());
  ASSERT_TRUE(capture.ok()) << capture.status();
  EXPECT_EQ(capture->link_type, DLT_EN10MB);
  EXPECT_GE(capture->snaplen, 65535);
}

TEST_P(CaptureTest, FramesMatchTsharkRows) {
  absl::StatusOr<std::vector<CapturedFrame>> frames = ReadPcap(PcapPath());
  ASSERT_TRUE(frames.ok()) << frames.status();
  absl::StatusOr<TsharkTable> table = ReadTsharkTsv(TsvPath());
  ASSERT_TRUE(table.ok()) << table.status();

  EXPECT_EQ(table->columns, kExpectedColumns);
  ASSERT_FALSE(frames->empty());
  ASSERT_EQ(frames->size(), table->rows.size());

  for (size_t i = 0; i < frames->size(); ++i) {
    SCOPED_TRACE(absl::StrCat(GetParam(), " frame ", i + 1));
    const CapturedFrame& frame = (*frames)[i];
    const TsharkRow& row = table->rows[i];
    // 42 = Ethernet + ARP, the smallest frame Linux sends (no padding on
    // veth, and no FCS in captures); 1514 = Ethernet + 1500-byte MTU.
    EXPECT_GE(frame.bytes.size(), 42u);
    EXPECT_LE(frame.bytes.size(), 1514u);
    EXPECT_EQ(frame.original_length, frame.bytes.size());
    EXPECT_FALSE(frame.truncated());
    if (i > 0) {
      EXPECT_GE(frame.timestamp, (*frames)[i - 1].timestamp);
    }

    EXPECT_EQ(row.at("frame.number"), std::to_string(i + 1));
    ASSERT_GE(frame.bytes.size(), 14u);
    EXPECT_EQ(row.at("eth.dst"), Mac(frame.bytes, 0));
    EXPECT_EQ(row.at("eth.src"), Mac(frame.bytes, 6));
    EXPECT_EQ(row.at("eth.type"),
              absl::StrFormat("0x%02x%02x", frame.bytes[12], frame.bytes[13]));
    // Checksum offload was off during capture: every TCP checksum is real.
    if (!row.at("tcp.srcport").empty()) {
      EXPECT_EQ(row.at("tcp.checksum.status"), "1");  // 1 = good.
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCaptures, CaptureTest,
                         ::testing::ValuesIn(kCaptures),
                         [](const auto& info) {
                           return info.param;
                         });

// What later tests rely on each capture to contain.
class HttpCaptureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HttpCaptureTest, HasResolutionHandshakeDataAndFin) {
  const bool v6 = GetParam() == "http_ipv6";
  absl::StatusOr<TsharkTable> table =
      ReadTsharkTsv(TestDataPath(absl::StrCat(GetParam(), ".tshark.tsv")));
  ASSERT_TRUE(table.ok()) << table.status();

  if (v6) {
    const auto types = Numbers(*table, "icmpv6.type");
    EXPECT_EQ(types.count(135), 1u) << "NDP neighbour solicitation";
    EXPECT_EQ(types.count(136), 1u) << "NDP neighbour advertisement";
    EXPECT_TRUE(Numbers(*table, "eth.type").count(0x86dd));
  } else {
    const auto opcodes = Numbers(*table, "arp.opcode");
    EXPECT_EQ(opcodes.count(1), 1u) << "ARP request";
    EXPECT_EQ(opcodes.count(2), 1u) << "ARP reply";
  }

  int syn = 0, syn_ack = 0, client_fin = 0, server_fin = 0, data_segments = 0;
  uint64_t server_bytes = 0;
  for (const TsharkRow& row : table->rows) {
    if (row.at("tcp.srcport").empty()) continue;
    EXPECT_EQ(row.at(v6 ? "ipv6.nxt" : "ip.proto"), "6");
    const uint64_t flags = ParseTsharkNumber(row.at("tcp.flags")).value();
    const bool from_server = row.at("tcp.srcport") == "80";
    const uint64_t len = ParseTsharkNumber(row.at("tcp.len")).value();
    if (flags == 0x002) ++syn;
    if (flags == 0x012) ++syn_ack;
    if (flags & 0x001) ++(from_server ? server_fin : client_fin);
    if (from_server) {
      server_bytes += len;
      if (len > 1000) ++data_segments;
    }
  }
  EXPECT_EQ(syn, 1);
  EXPECT_EQ(syn_ack, 1);
  EXPECT_EQ(client_fin, 1);
  EXPECT_EQ(server_fin, 1);
  EXPECT_GE(data_segments, 4);          // 6000-byte body, MSS ~1440.
  EXPECT_GT(server_bytes, 6000u);       // Body plus response headers.
}

INSTANTIATE_TEST_SUITE_P(Http, HttpCaptureTest,
                         ::testing::Values(std::string("http_ipv4"),
                                           std::string("http_ipv6")),
                         [](const auto& info) {
                           return info.param;
                         });

TEST(IcmpCaptureTest, HasBothFamiliesEchoes) {
  absl::StatusOr<TsharkTable> table =
      ReadTsharkTsv(TestDataPath("icmp.tshark.tsv"));
  ASSERT_TRUE(table.ok()) << table.status();
  const auto icmp = Numbers(*table, "icmp.type");
  EXPECT_EQ(icmp.count(8), 2u) << "echo request";
  EXPECT_EQ(icmp.count(0), 2u) << "echo reply";
  const auto icmpv6 = Numbers(*table, "icmpv6.type");
  EXPECT_EQ(icmpv6.count(128), 2u) << "echo request";
  EXPECT_EQ(icmpv6.count(129), 2u) << "echo reply";
  EXPECT_EQ(icmpv6.count(135), 1u) << "neighbour solicitation";
  EXPECT_EQ(icmpv6.count(136), 1u) << "neighbour advertisement";
  EXPECT_EQ(Numbers(*table, "arp.opcode").size(), 2u);
}

// --- Errors -------------------------------------------------------------

TEST(ReadPcapTest, MissingFileIsNotFound) {
  const std::string path = TestDataPath("no_such_capture.pcap");
  absl::StatusOr<std::vector<CapturedFrame>> frames = ReadPcap(path);
  ASSERT_FALSE(frames.ok());
  EXPECT_EQ(frames.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(frames.status().message(), HasSubstr(path));
}

TEST(ReadPcapTest, TextFilesAreNotPcap) {
  for (const std::string& path :
       {TestDataPath("README.md"), TestDataPath("icmp.tshark.tsv")}) {
    SCOPED_TRACE(path);
    absl::StatusOr<std::vector<CapturedFrame>> frames = ReadPcap(path);
    ASSERT_FALSE(frames.ok());
    EXPECT_EQ(frames.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(frames.status().message(), HasSubstr(path));
    EXPECT_THAT(frames.status().message(), HasSubstr("not a pcap"));
  }
}

TEST(ReadPcapTest, EmptyFileIsNotPcap) {
  const std::string path = TempPath("empty.pcap");
  WriteFile(path, "");
  absl::StatusOr<PcapCapture> capture = ReadPcapFile(path);
  ASSERT_FALSE(capture.ok());
  EXPECT_EQ(capture.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReadPcapTest, HeaderOnlyFileHasNoFrames) {
  const std::string full = ReadRaw(TestDataPath("icmp.pcap"));
  ASSERT_GT(full.size(), 24u);
  const std::string path = TempPath("header_only.pcap");
  WriteFile(path, std::string_view(full).substr(0, 24));
  absl::StatusOr<PcapCapture> capture = ReadPcapFile(path);
  ASSERT_TRUE(capture.ok()) << capture.status();
  EXPECT_EQ(capture->link_type, DLT_EN10MB);
  EXPECT_TRUE(capture->frames.empty());
}

TEST(ReadPcapTest, CutShortFileIsDataLoss) {
  const std::string full = ReadRaw(TestDataPath("icmp.pcap"));
  ASSERT_GT(full.size(), 24u + 16u + 10u);
  const std::string path = TempPath("cut_short.pcap");
  WriteFile(path, std::string_view(full).substr(0, full.size() - 10));
  absl::StatusOr<PcapCapture> capture = ReadPcapFile(path);
  ASSERT_FALSE(capture.ok());
  EXPECT_EQ(capture.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(capture.status().message(), HasSubstr(path));
  EXPECT_THAT(capture.status().message(), HasSubstr("frame"));
}

TEST(ReadPcapTest, NonEthernetLinkTypeRejectedByReadPcapOnly) {
  std::string bytes = ReadRaw(TestDataPath("icmp.pcap"));
  ASSERT_GT(bytes.size(), 24u);
  // Little-endian pcap header; the link type is the last 4 bytes.
  // LINKTYPE_RAW (101): packets start at the IP header.
  bytes[20] = 101;
  bytes[21] = bytes[22] = bytes[23] = 0;
  const std::string path = TempPath("raw_ip.pcap");
  WriteFile(path, bytes);

  absl::StatusOr<PcapCapture> capture = ReadPcapFile(path);
  ASSERT_TRUE(capture.ok()) << capture.status();
  EXPECT_NE(capture->link_type, DLT_EN10MB);
  EXPECT_EQ(capture->frames.size(), 12u);

  absl::StatusOr<std::vector<CapturedFrame>> frames = ReadPcap(path);
  ASSERT_FALSE(frames.ok());
  EXPECT_EQ(frames.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(frames.status().message(), HasSubstr("not Ethernet"));
}

TEST(ReadTsharkTsvTest, MissingFileIsNotFound) {
  const std::string path = TestDataPath("no_such.tshark.tsv");
  absl::StatusOr<TsharkTable> table = ReadTsharkTsv(path);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(table.status().message(), HasSubstr(path));
}

TEST(ReadTsharkTsvTest, BinaryAndProseAreRejected) {
  for (const std::string& path :
       {TestDataPath("icmp.pcap"), TestDataPath("README.md")}) {
    SCOPED_TRACE(path);
    absl::StatusOr<TsharkTable> table = ReadTsharkTsv(path);
    ASSERT_FALSE(table.ok());
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(table.status().message(), HasSubstr("header"));
  }
}

TEST(ReadTsharkTsvTest, RaggedRowNamesItsLine) {
  const std::string path = TempPath("ragged.tsv");
  WriteFile(path, "frame.number\tip.src\n1\t10.0.0.1\n2\n");
  absl::StatusOr<TsharkTable> table = ReadTsharkTsv(path);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(table.status().message(), HasSubstr("line 3"));
}

TEST(ReadTsharkTsvTest, EmptyFileAndDuplicateColumnsAreRejected) {
  const std::string empty = TempPath("empty.tsv");
  WriteFile(empty, "");
  EXPECT_EQ(ReadTsharkTsv(empty).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string dup = TempPath("dup.tsv");
  WriteFile(dup, "ip.src\tip.src\n");
  EXPECT_EQ(ReadTsharkTsv(dup).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ReadTsharkTsvTest, EmptyValuesAndNoTrailingNewline) {
  const std::string path = TempPath("small.tsv");
  WriteFile(path, "frame.number\ttcp.srcport\tarp.opcode\n1\t\t1\n2\t80\t");
  absl::StatusOr<TsharkTable> table = ReadTsharkTsv(path);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->rows.size(), 2u);
  EXPECT_EQ(table->rows[0].at("tcp.srcport"), "");
  EXPECT_EQ(table->rows[0].at("arp.opcode"), "1");
  EXPECT_EQ(table->rows[1].at("tcp.srcport"), "80");
  EXPECT_EQ(table->rows[1].at("arp.opcode"), "");
  EXPECT_EQ(table->rows[1].size(), 3u);
}

TEST(ParseTsharkNumberTest, DecimalAndHex) {
  EXPECT_EQ(ParseTsharkNumber("0"), 0u);
  EXPECT_EQ(ParseTsharkNumber("3076107966"), 3076107966u);
  EXPECT_EQ(ParseTsharkNumber("0x0012"), 0x12u);
  EXPECT_EQ(ParseTsharkNumber("0x86dd"), 0x86ddu);
  EXPECT_EQ(ParseTsharkNumber("18446744073709551615"), UINT64_MAX);
  for (std::string_view bad : {"", "0x", "-1", "+1", " 1", "1 ", "10.9.0.1",
                               "abc", "0x12g", "18446744073709551616"}) {
    EXPECT_EQ(ParseTsharkNumber(bad), std::nullopt) << "\"" << bad << "\"";
  }
}

}  // namespace
}  // namespace netstack::testing
