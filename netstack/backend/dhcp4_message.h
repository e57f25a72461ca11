// DHCPv4 messages (RFC 2131 section 2, options RFC 2132): a parsed
// representation with Parse (hostile input: every malformed message is
// one Dhcp4ParseError) and Emit.
//
//   0 op | htype | hlen | hops      4 xid
//   8 secs | flags                 12 ciaddr  16 yiaddr  20 siaddr
//  24 giaddr  28 chaddr (16)  44 sname (64)  108 file (128)
// 236 magic cookie 99.130.83.99   240 options (code, len, value...; 0 pad,
//     255 end)
//
// Guarantee of Parse: the fixed part is all there, htype is Ethernet (1)
// with hlen 6, the cookie is right, every option lies inside the message,
// the options this server reads have their RFC 2132 length, and there is
// exactly one known message type. Options in `file`/`sname` (option 52,
// overload) are not read: a server needs none of them.
#ifndef NETSTACK_BACKEND_DHCP4_MESSAGE_H_
#define NETSTACK_BACKEND_DHCP4_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "netstack/wire/address.h"

namespace netstack::backend {

enum class Dhcp4MessageType : uint8_t {
  kDiscover = 1,
  kOffer = 2,
  kRequest = 3,
  kDecline = 4,
  kAck = 5,
  kNak = 6,
  kRelease = 7,
  kInform = 8,
};
const char* Dhcp4MessageTypeName(Dhcp4MessageType t);
inline constexpr size_t kDhcp4MessageTypes = 9;  // index by the value

// X(enumerator, "name")
#define NETSTACK_DHCP4_PARSE_ERRORS(X)                  \
  X(kTruncated, "truncated")                            \
  X(kBadHtype, "bad_htype")                             \
  X(kBadHlen, "bad_hlen")                               \
  X(kBadMagicCookie, "bad_magic_cookie")                \
  X(kOptionOverrun, "option_overrun")                   \
  X(kBadOptionLength, "bad_option_length")              \
  X(kMissingMessageType, "missing_message_type")        \
  X(kUnknownMessageType, "unknown_message_type")

enum class Dhcp4ParseError : uint8_t {
  kOk,
#define NETSTACK_DHCP4_ENUM(e, name) e,
  NETSTACK_DHCP4_PARSE_ERRORS(NETSTACK_DHCP4_ENUM)
#undef NETSTACK_DHCP4_ENUM
};

enum class Dhcp4Op : uint8_t { kBootRequest = 1, kBootReply = 2 };

struct Dhcp4Message {
  static constexpr size_t kFixedLen = 236;
  static constexpr size_t kOptionsOffset = 240;  // after the cookie
  static constexpr uint32_t kMagicCookie = 0x63825363;
  static constexpr uint16_t kBroadcastFlag = 0x8000;
  // RFC 1542 3.3 / RFC 2131: some clients drop a reply shorter than a
  // BOOTP message; Emit pads to this.
  static constexpr size_t kMinEmitLen = 300;
  static constexpr size_t kMaxEmitLen = 576 - 20 - 8;  // RFC 2131 2

  uint8_t op = 0;  // Dhcp4Op, not checked by Parse
  uint8_t hops = 0;
  uint32_t xid = 0;
  uint16_t secs = 0;
  uint16_t flags = 0;
  wire::Ipv4Address ciaddr, yiaddr, siaddr, giaddr;
  wire::MacAddress chaddr;
  Dhcp4MessageType type = Dhcp4MessageType::kDiscover;  // option 53
  // Options; the first of a repeated one is kept.
  std::optional<wire::Ipv4Address> subnet_mask;     // 1
  std::optional<wire::Ipv4Address> router;          // 3 (first listed)
  std::optional<wire::Ipv4Address> dns;             // 6 (first listed)
  std::optional<uint16_t> mtu;                      // 26
  std::optional<wire::Ipv4Address> requested_ip;    // 50
  std::optional<uint32_t> lease_time;               // 51 (seconds)
  std::optional<wire::Ipv4Address> server_id;       // 54
  std::optional<uint16_t> max_message_size;         // 57
  std::optional<uint32_t> renewal_time;             // 58 (T1)
  std::optional<uint32_t> rebinding_time;           // 59 (T2)

  bool broadcast() const { return (flags & kBroadcastFlag) != 0; }

  [[nodiscard]] static Dhcp4ParseError Parse(std::span<const uint8_t> bytes,
                                             Dhcp4Message& out);
  // Bytes Emit writes: the fixed part, cookie, the options present, end,
  // padding to kMinEmitLen.
  size_t BufferLen() const;
  // Writes BufferLen() bytes into `out` (which must hold them); returns
  // the count. sname and file are zero.
  size_t Emit(std::span<uint8_t> out) const;
};

const char* Dhcp4ParseErrorName(Dhcp4ParseError e);
// kOk plus the errors: the size of an array indexed by Dhcp4ParseError.
inline constexpr size_t kDhcp4ParseErrorCount =
    1
#define NETSTACK_DHCP4_COUNT(e, name) +1
    NETSTACK_DHCP4_PARSE_ERRORS(NETSTACK_DHCP4_COUNT)
#undef NETSTACK_DHCP4_COUNT
    ;

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_DHCP4_MESSAGE_H_
