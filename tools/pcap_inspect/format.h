// Text and JSON renderings of a DecodedFrame.
#ifndef NETSTACK_TOOLS_PCAP_INSPECT_FORMAT_H_
#define NETSTACK_TOOLS_PCAP_INSPECT_FORMAT_H_

#include <cstdint>
#include <string>

#include "tools/pcap_inspect/decode.h"

namespace netstack::tools {

struct FrameMeta {
  uint64_t number = 0;    // 1-based, as tshark's frame.number
  double timestamp = 0;   // seconds since the epoch
  uint32_t caplen = 0;    // bytes captured
  uint32_t wire_len = 0;  // bytes on the wire
};

// One line: "3 0.000123 10.9.0.1:44312 > 10.9.0.2:80 TCP [SA] seq=..."
std::string FormatLine(const FrameMeta& meta, const DecodedFrame& frame);

// One JSON object with the fields the parsers found.
std::string FormatJson(const FrameMeta& meta, const DecodedFrame& frame);

}  // namespace netstack::tools

#endif  // NETSTACK_TOOLS_PCAP_INSPECT_FORMAT_H_
