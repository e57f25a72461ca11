#include "netstack/wire/ipv4.h"

#include <cstring>

namespace netstack::wire {
namespace {

constexpr uint8_t kEol = static_cast<uint8_t>(Ipv4OptionType::kEndOfList);
constexpr uint8_t kNop = static_cast<uint8_t>(Ipv4OptionType::kNop);

// Whether `len` (type and length bytes included) is acceptable for an
// option of kind `type`. Only kinds whose size the RFCs fix are checked;
// unknown kinds need just the generic minimum of 2.
bool OptionLengthValid(uint8_t type, uint8_t len) {
  if (len < 2) return false;
  switch (static_cast<Ipv4OptionType>(type)) {
    case Ipv4OptionType::kRecordRoute:
    case Ipv4OptionType::kLooseSourceRoute:
    case Ipv4OptionType::kStrictSourceRoute:
      // Type, length, pointer, then route data (RFC 791 section 3.1).
      return len >= 3;
    case Ipv4OptionType::kTimestamp:
      // Type, length, pointer, overflow/flags (RFC 791 section 3.1).
      return len >= 4;
    case Ipv4OptionType::kStreamId:
      // Fixed at 4 (RFC 791 section 3.1).
      return len == 4;
    case Ipv4OptionType::kRouterAlert:
      // Fixed at 4 (RFC 2113 section 2.1).
      return len == 4;
    default:
      return true;
  }
}

}  // namespace

WireError CheckIpv4Options(std::span<const uint8_t> options) {
  size_t pos = 0;
  while (pos < options.size()) {
    const uint8_t type = options[pos];
    // RFC 791: End of Option List marks the end of all options; what
    // follows, up to the header length, is padding and is not examined.
    if (type == kEol) return WireError::kOk;
    if (type == kNop) {
      ++pos;
      continue;
    }
    // A multi-byte option needs at least its length byte inside the area.
    if (options.size() - pos < 2) return WireError::kOptionOverflow;
    const uint8_t len = options[pos + 1];
    if (!OptionLengthValid(type, len)) return WireError::kBadOptionLength;
    if (len > options.size() - pos) return WireError::kOptionOverflow;
    pos += len;
  }
  return WireError::kOk;
}

bool Ipv4OptionReader::Next(Ipv4Option& out) {
  if (pos_ >= options_.size()) return false;
  const uint8_t type = options_[pos_];
  if (type == kEol) return false;
  if (type == kNop) {
    out = Ipv4Option{type, {}};
    ++pos_;
    return true;
  }
  // Defensive on an unchecked area: stop rather than read out of bounds
  // or loop forever on a zero length.
  if (options_.size() - pos_ < 2) return false;
  const uint8_t len = options_[pos_ + 1];
  if (len < 2 || len > options_.size() - pos_) return false;
  out = Ipv4Option{type, options_.subspan(pos_ + 2, len - 2)};
  pos_ += len;
  return true;
}

bool Ipv4OptionBytes::Assign(std::span<const uint8_t> bytes) {
  if (bytes.size() > kCapacity) return false;
  if (!bytes.empty()) std::memcpy(bytes_.data(), bytes.data(), bytes.size());
  len_ = static_cast<uint8_t>(bytes.size());
  return true;
}

WireError Ipv4Repr::Parse(const Ipv4Packet& packet, Ipv4Repr& out) {
  if (WireError e = packet.Check(); e != WireError::kOk) return e;
  out.src = packet.Source();
  out.dst = packet.Destination();
  out.protocol = packet.Protocol();
  out.ttl = packet.Ttl();
  out.dscp_ecn = packet.DscpEcn();
  out.ident = packet.Ident();
  out.dont_fragment = packet.DontFragment();
  out.more_fragments = packet.MoreFragments();
  out.fragment_offset = packet.FragOffsetBytes();
  out.payload_len =
      static_cast<uint16_t>(packet.TotalLength() - packet.HeaderLen());
  // Check() bounded the header to 60 bytes, so the area fits kCapacity.
  if (!out.options.Assign(packet.Options())) return WireError::kBadHeaderLength;
  return WireError::kOk;
}

void Ipv4Repr::Emit(MutableIpv4Packet packet) const {
  const size_t header_len = HeaderLen();
  packet.SetVersionAndIhl(static_cast<uint8_t>(header_len / 4));
  packet.SetDscpEcn(dscp_ecn);
  packet.SetTotalLength(static_cast<uint16_t>(TotalLen()));
  packet.SetIdent(ident);
  uint16_t flags_frag = static_cast<uint16_t>((fragment_offset / 8) &
                                              Ipv4Packet::kFragOffsetMask);
  if (dont_fragment) flags_frag |= Ipv4Packet::kFlagDontFragment;
  if (more_fragments) flags_frag |= Ipv4Packet::kFlagMoreFragments;
  packet.SetFlagsAndFragOffset(flags_frag);
  packet.SetTtl(ttl);
  packet.SetProtocol(protocol);
  packet.SetSource(src);
  packet.SetDestination(dst);
  // data() + offset rather than operator[]: with no options the offset is
  // the end of a header-sized buffer.
  uint8_t* opts = packet.bytes().data() + Ipv4Packet::kMinHeaderLen;
  const std::span<const uint8_t> raw = options.span();
  if (!raw.empty()) std::memcpy(opts, raw.data(), raw.size());
  // RFC 791: "The internet header padding ... is zero."
  const size_t padding = header_len - Ipv4Packet::kMinHeaderLen - raw.size();
  if (padding != 0) std::memset(opts + raw.size(), 0, padding);
  packet.FillHeaderChecksum();
}

}  // namespace netstack::wire
