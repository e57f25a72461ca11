// Test fixtures from real packet captures (testonly).
//
// tests/testdata/ holds pcap files of real Linux traffic (made by
// tests/testdata/make_captures.sh, see tests/testdata/README.md) and, for
// each X.pcap, X.tshark.tsv: tshark's decoding of every frame, one row per
// frame, used as the expected output of our own decoders.
//
// To use them from a test in any package:
//
//   cc_test(
//       name = "foo_test",
//       data = ["//tests:testdata"],
//       deps = ["//tests:pcap_fixture", ...],
//   )
//
//   auto frames = ReadPcap(TestDataPath("http_ipv4.pcap"));
//   ASSERT_TRUE(frames.ok()) << frames.status();
//   auto table = ReadTsharkTsv(TestDataPath("http_ipv4.tshark.tsv"));
//   ASSERT_TRUE(table.ok()) << table.status();
//   // (*frames)[i] is the frame tshark described in table->rows[i].
#ifndef NETSTACK_TESTS_PCAP_FIXTURE_H_
#define NETSTACK_TESTS_PCAP_FIXTURE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace netstack::testing {

// One record of a capture file.
struct CapturedFrame {
  absl::Time timestamp;
  // Length of the frame on the wire (pcap "len"); larger than bytes.size()
  // only if the capture's snaplen cut the frame short.
  uint32_t original_length = 0;
  // The captured bytes (pcap "caplen" of them), starting at the link-layer
  // header: for Ethernet captures, the destination MAC. No FCS.
  std::vector<uint8_t> bytes;

  bool truncated() const { return bytes.size() < original_length; }
};

// A whole capture file.
struct PcapCapture {
  int link_type = 0;  // DLT_* (libpcap), e.g. DLT_EN10MB == 1 for Ethernet.
  int snaplen = 0;
  std::vector<CapturedFrame> frames;
};

// Reads every frame of a pcap (or pcapng) file with libpcap.
// Errors: NotFound (or another errno-derived code) if the file cannot be
// opened; InvalidArgument if it is not a capture file libpcap understands;
// DataLoss if a record is cut short. Messages name the file.
absl::StatusOr<PcapCapture> ReadPcapFile(const std::string& path);

// ReadPcapFile, but only for Ethernet (DLT_EN10MB) captures, which all of
// tests/testdata is; any other link type gives InvalidArgument.
absl::StatusOr<std::vector<CapturedFrame>> ReadPcap(const std::string& path);

// Absolute path of tests/testdata/<file> in the test's Bazel runfiles:
// $TEST_SRCDIR/$TEST_WORKSPACE/tests/testdata/<file>. Outside `bazel test`
// falls back to $RUNFILES_DIR, then to <this binary>.runfiles. Does not check
// that the file exists (ReadPcap etc. report that).
std::string TestDataPath(std::string_view file);

// One frame as tshark decoded it: column name (a tshark field such as
// "tcp.seq_raw") -> value as printed by `tshark -T fields`. Every row holds
// every column of its table; a field absent from the frame is "" (e.g.
// "tcp.srcport" of an ARP frame). Values are tshark's text: decimal numbers,
// "0x0012"-style hex for flags/types, dotted/colon addresses.
using TsharkRow = std::map<std::string, std::string, std::less<>>;

struct TsharkTable {
  std::vector<std::string> columns;  // Header order.
  std::vector<TsharkRow> rows;       // rows[i] describes frame i + 1.
};

// Reads the output of `tshark -T fields -E header=y -E separator=/t ...`.
// Errors: errno-derived (NotFound ...) if the file cannot be read;
// InvalidArgument if the header is not a list of field names or a row has
// a different number of columns than the header (message has the line).
absl::StatusOr<TsharkTable> ReadTsharkTsv(const std::string& path);

// Convenience for TsharkRow values: decimal ("3076107966") or hex with a 0x
// prefix ("0x0012") -> number. nullopt for "" (absent field) and for
// anything else that is not a number that fits in 64 bits.
std::optional<uint64_t> ParseTsharkNumber(std::string_view value);

}  // namespace netstack::testing

#endif  // NETSTACK_TESTS_PCAP_FIXTURE_H_
