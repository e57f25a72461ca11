// The one error type of every wire-format parser.
//
// Parsers are total: for any byte string of any length they return either
// kOk (and fill a Repr) or one specific error below. The per-packet path
// turns these into drop reasons and counters; nothing here asserts or throws.
#ifndef NETSTACK_WIRE_ERROR_H_
#define NETSTACK_WIRE_ERROR_H_

#include <cstdint>
#include <string_view>

namespace netstack::wire {

enum class [[nodiscard]] WireError : uint8_t {
  kOk = 0,
  // Fewer bytes than the fixed header, or than a length field promises.
  kTruncated,
  // Version field is not the one this parser handles (IPv4 != 4, ...).
  kBadVersion,
  // Header length field (IPv4 IHL, TCP data offset) below the minimum or
  // beyond the buffer.
  kBadHeaderLength,
  // A total/payload length field disagrees with the header or the buffer.
  kBadLength,
  // An option's own length byte is invalid for its kind (< 2, wrong size).
  kBadOptionLength,
  // An option runs past the end of the option area.
  kOptionOverflow,
  // Checksum verification was requested and failed.
  kBadChecksum,
  // A field holds a value the format forbids (e.g. ARP hlen != 6).
  kMalformed,
  // Well-formed, but a variant this parser does not handle.
  kUnsupported,
  // IPv6 extension header chain is malformed or too long.
  kBadExtensionHeader,
};

constexpr std::string_view WireErrorName(WireError e) {
  switch (e) {
    case WireError::kOk:
      return "ok";
    case WireError::kTruncated:
      return "truncated";
    case WireError::kBadVersion:
      return "bad_version";
    case WireError::kBadHeaderLength:
      return "bad_header_length";
    case WireError::kBadLength:
      return "bad_length";
    case WireError::kBadOptionLength:
      return "bad_option_length";
    case WireError::kOptionOverflow:
      return "option_overflow";
    case WireError::kBadChecksum:
      return "bad_checksum";
    case WireError::kMalformed:
      return "malformed";
    case WireError::kUnsupported:
      return "unsupported";
    case WireError::kBadExtensionHeader:
      return "bad_extension_header";
  }
  return "unknown";
}

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_ERROR_H_
