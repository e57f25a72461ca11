// pcap_inspect's decoder and its renderings (tools/pcap_inspect/decode.h,
// format.h): a capture is untrusted input, and DecodeFrame is documented
// total. An input is a record header as a pcap file gives it (frame
// number, seconds, microseconds, wire length: 4 bytes each), then the
// frame's bytes. Checked:
//   - decoding is deterministic (the same frame renders the same twice);
//   - the decode is consistent: an error names its layer and only an error
//     does; a transport Repr only with its protocol number; at most one
//     transport; the transport payload inside the frame;
//   - FormatJson is valid UTF-8, and one JSON object (read back with
//     tcp_benchmark's independent JSON reader) whose frame, len and caplen
//     are the record's; with an IP layer, its "ip".version is 4 or 6;
//   - FormatLine is one line of printable ASCII.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "tools/pcap_inspect/decode.h"
#include "tools/pcap_inspect/format.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools {
namespace {

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // cut short
    for (size_t k = 1; k <= n; ++k) {
      const uint8_t d = static_cast<uint8_t>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates, past U+10FFFF (RFC 3629 section 3).
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) ||
        (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp < 0xe000)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

void CheckConsistent(const DecodedFrame& f, size_t frame_len) {
  FUZZ_CHECK((f.error == wire::WireError::kOk) == f.error_layer.empty());
  FUZZ_CHECK(!(f.ipv4 && f.ipv6));
  FUZZ_CHECK(!(f.ipv6_ext && !f.ipv6));
  FUZZ_CHECK(!((f.ipv4 || f.ipv6 || f.arp) && !f.eth));
  const int transports = (f.tcp ? 1 : 0) + (f.udp ? 1 : 0) +
                         (f.icmpv4 ? 1 : 0) + (f.icmpv6 ? 1 : 0);
  FUZZ_CHECK(transports <= 1);
  if (transports == 1) {
    FUZZ_CHECK(f.l4_protocol.has_value());
    FUZZ_CHECK(!f.non_first_fragment);
  }
  if (f.tcp) FUZZ_CHECK(*f.l4_protocol == 6);
  if (f.udp) FUZZ_CHECK(*f.l4_protocol == 17);
  if (f.icmpv4) FUZZ_CHECK(*f.l4_protocol == 1 && f.ipv4);
  if (f.icmpv6) FUZZ_CHECK(*f.l4_protocol == 58 && f.ipv6);
  FUZZ_CHECK(f.l4_payload_len <= frame_len);
  if (f.l4_checksum_valid) FUZZ_CHECK(transports == 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  FrameMeta meta;
  meta.number = in.U32();
  const uint32_t sec = in.U32();
  const uint32_t usec = in.U32() % 1'000'000;
  meta.timestamp = sec + usec / 1e6;
  meta.wire_len = in.U32();
  const auto frame = in.Rest();
  meta.caplen = static_cast<uint32_t>(frame.size());

  const DecodedFrame f = DecodeFrame(frame);
  CheckConsistent(f, frame.size());
  const std::string json = FormatJson(meta, f);
  const std::string line = FormatLine(meta, f);
  const DecodedFrame g = DecodeFrame(frame);
  FUZZ_CHECK(FormatJson(meta, g) == json);
  FUZZ_CHECK(FormatLine(meta, g) == line);

  FUZZ_CHECK(ValidUtf8(json));
  absl::StatusOr<bench::JsonValue> v = bench::ParseJson(json);
  FUZZ_CHECK(v.ok());
  FUZZ_CHECK(v->is_object());
  FUZZ_CHECK(v->GetInt("frame") == static_cast<int64_t>(meta.number));
  FUZZ_CHECK(v->GetInt("len") == static_cast<int64_t>(meta.wire_len));
  FUZZ_CHECK(v->GetInt("caplen") == static_cast<int64_t>(meta.caplen));
  if (f.ipv4 || f.ipv6) {
    const bench::JsonValue* ip = v->Find("ip");
    FUZZ_CHECK(ip != nullptr);
    FUZZ_CHECK(ip->GetInt("version") == (f.ipv4 ? 4 : 6));
  }
  for (const char c : line) FUZZ_CHECK(c >= 0x20 && c < 0x7f);
  return 0;
}

}  // namespace netstack::tools
