// pcap_inspect: decodes every frame of a pcap file with netstack/wire.
//
//   pcap_inspect [--json] FILE...
//
// One line per packet, or with --json a JSON array with one object per
// packet (one object per line). A frame our parsers reject is printed with
// the layer and reason, and decoding carries on. A file that cannot be read
// as a pcap (or pcapng) with Ethernet frames is an error: a message on
// stderr and exit status 1, after the other files are done.
#include <pcap/pcap.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "tools/common/cli.h"
#include "tools/pcap_inspect/decode.h"
#include "tools/pcap_inspect/format.h"

ABSL_FLAG(bool, json, false,
          "Print a JSON array with one object per packet instead of lines.");
ABSL_FLAG(bool, summary, false,
          "After the packets, print to stderr how many frames were read, "
          "how many per innermost decoded layer, how many failed to decode "
          "per layer and reason, and how many IPv4 and transport checksums "
          "did not verify.");

namespace netstack::tools {
namespace {

struct FileStats {
  uint64_t frames = 0;
  uint64_t errors = 0;
  // Frames by the innermost layer that decoded ("tcp", "udp", "arp",
  // "ipv6-fragment", ...), and failures by "layer: reason".
  std::map<std::string, uint64_t> by_layer;
  std::map<std::string, uint64_t> by_error;
  // TCP/UDP/ICMP checksums that did not verify (a sender's partial,
  // offloaded checksum shows up here too).
  uint64_t bad_l4_checksums = 0;
  uint64_t bad_ipv4_checksums = 0;
};

std::string InnermostLayer(const DecodedFrame& f) {
  if (f.tcp) return "tcp";
  if (f.udp) return "udp";
  if (f.icmpv4) return "icmpv4";
  if (f.icmpv6) return "icmpv6";
  if (f.non_first_fragment) return f.ipv4 ? "ipv4-fragment" : "ipv6-fragment";
  if (f.ipv4) return "ipv4";
  if (f.ipv6) return "ipv6";
  if (f.arp) return "arp";
  if (f.eth) return "ethernet";
  return "none";
}

void Count(const DecodedFrame& frame, FileStats& stats) {
  ++stats.frames;
  ++stats.by_layer[InnermostLayer(frame)];
  if (frame.error != wire::WireError::kOk) {
    ++stats.errors;
    ++stats.by_error[std::string(frame.error_layer) + ": " +
                     std::string(wire::WireErrorName(frame.error))];
  }
  if (frame.l4_checksum_valid.has_value() && !*frame.l4_checksum_valid) {
    ++stats.bad_l4_checksums;
  }
  if (frame.ipv4 && !frame.ipv4_checksum_valid) ++stats.bad_ipv4_checksums;
}

void PrintSummary(const FileStats& stats) {
  std::fprintf(stderr, "pcap_inspect: %llu frames, %llu failed to decode\n",
               static_cast<unsigned long long>(stats.frames),
               static_cast<unsigned long long>(stats.errors));
  for (const auto& [layer, n] : stats.by_layer) {
    std::fprintf(stderr, "  layer %s %llu\n", layer.c_str(),
                 static_cast<unsigned long long>(n));
  }
  for (const auto& [reason, n] : stats.by_error) {
    std::fprintf(stderr, "  failed %s %llu\n", reason.c_str(),
                 static_cast<unsigned long long>(n));
  }
  std::fprintf(stderr, "  bad ipv4 header checksums %llu\n",
               static_cast<unsigned long long>(stats.bad_ipv4_checksums));
  std::fprintf(stderr,
               "  bad transport checksums %llu (a frame captured before a "
               "checksum offload completed it counts here)\n",
               static_cast<unsigned long long>(stats.bad_l4_checksums));
}

// Decodes one file; returns false (after printing why) if it is not a
// readable Ethernet capture.
bool InspectFile(const std::string& path, bool json, bool& first_json,
                 FileStats& stats) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  pcap_t* pcap = pcap_open_offline(path.c_str(), errbuf);
  if (pcap == nullptr) {
    std::fprintf(stderr, "pcap_inspect: %s: not a readable pcap file: %s\n",
                 path.c_str(), errbuf);
    return false;
  }
  const int linktype = pcap_datalink(pcap);
  if (linktype != DLT_EN10MB) {
    std::fprintf(stderr,
                 "pcap_inspect: %s: link type %s (%d) is not Ethernet; only "
                 "Ethernet captures are supported\n",
                 path.c_str(), pcap_datalink_val_to_name(linktype), linktype);
    pcap_close(pcap);
    return false;
  }
  pcap_pkthdr* hdr = nullptr;
  const u_char* data = nullptr;
  int rc;
  uint64_t number = 0;
  double first_ts = -1;
  while ((rc = pcap_next_ex(pcap, &hdr, &data)) == 1) {
    FrameMeta meta;
    meta.number = ++number;
    meta.timestamp = static_cast<double>(hdr->ts.tv_sec) +
                     static_cast<double>(hdr->ts.tv_usec) / 1e6;
    // Lines show time since the file's first frame, as tshark does; JSON
    // keeps the absolute capture time.
    if (first_ts < 0) first_ts = meta.timestamp;
    if (!json) meta.timestamp -= first_ts;
    meta.caplen = hdr->caplen;
    meta.wire_len = hdr->len;
    const DecodedFrame frame =
        DecodeFrame(std::span<const uint8_t>(data, hdr->caplen));
    Count(frame, stats);
    if (json) {
      std::printf("%s%s\n", first_json ? "[" : ",",
                  FormatJson(meta, frame).c_str());
      first_json = false;
    } else {
      std::printf("%s\n", FormatLine(meta, frame).c_str());
    }
  }
  bool ok = true;
  if (rc == PCAP_ERROR) {
    // A capture cut short (e.g. the writer was killed) still gave us every
    // complete record; say so and fail.
    std::fprintf(stderr, "pcap_inspect: %s: read error after %llu frames: %s\n",
                 path.c_str(), static_cast<unsigned long long>(number),
                 pcap_geterr(pcap));
    ok = false;
  }
  pcap_close(pcap);
  return ok;
}

// --help: the usage line, what it prints, its two flags.
HelpPage PcapInspectHelpPage() {
  HelpPage page;
  page.tool = "pcap_inspect";
  page.dashed_names = false;  // no name with a '_' or '-' to spell
  page.usage = "usage: pcap_inspect [--json] [--summary] FILE...\n";
  page.description =
      "Decodes every frame of pcap files with netstack's wire parsers. "
      "Prints one line per packet (frame number, time, addresses, ports, "
      "TCP flags/seq/ack/window/options, payload length, checksum status), "
      "or with --json one JSON array of objects. Frames the parsers reject "
      "are printed with the failing layer and reason.";
  page.groups = {
      {"Output", "to change what is printed, and where.",
       {"--json", "--summary"}},
  };
  page.exit_status =
      "Exit status:\n"
      "  0    every file was read, or --help\n"
      "  1    a file was not a readable Ethernet pcap\n"
      "  2    bad usage\n";
  page.flags_dir = "tools/pcap_inspect/";
  return page;
}

}  // namespace
}  // namespace netstack::tools

int main(int argc, char** argv) {
  netstack::tools::SetHelpPage(netstack::tools::PcapInspectHelpPage());
  std::vector<char*> args =
      netstack::tools::ParseCommandLineOrExit("pcap_inspect", argc, argv);
  if (args.size() < 2) {
    std::fprintf(stderr,
                 "pcap_inspect: no input file\nusage: pcap_inspect [--json] "
                 "[--summary] FILE...  (see --help)\n");
    return 2;
  }
  const bool json = absl::GetFlag(FLAGS_json);
  bool first_json = true;
  bool all_ok = true;
  netstack::tools::FileStats stats;
  for (size_t i = 1; i < args.size(); ++i) {
    all_ok &= netstack::tools::InspectFile(args[i], json, first_json, stats);
  }
  if (json) std::printf(first_json ? "[]\n" : "]\n");
  if (absl::GetFlag(FLAGS_summary)) netstack::tools::PrintSummary(stats);
  std::fflush(stdout);
  return all_ok ? 0 : 1;
}
