#include "netstack/wire/icmpv6.h"

#include <cstring>

namespace netstack::wire {
namespace {

using Layout = NdpOptionLayout;

constexpr uint8_t kSourceLinkLayer =
    static_cast<uint8_t>(NdpOptionType::kSourceLinkLayerAddress);
constexpr uint8_t kTargetLinkLayer =
    static_cast<uint8_t>(NdpOptionType::kTargetLinkLayerAddress);
constexpr uint8_t kPrefixInformation =
    static_cast<uint8_t>(NdpOptionType::kPrefixInformation);
constexpr uint8_t kMtu = static_cast<uint8_t>(NdpOptionType::kMtu);

// RFC 4291 section 2.3: a prefix length is at most 128 bits.
constexpr uint8_t kMaxPrefixLength = 128;

// Size an option of a known type must have, or 0 for types with no fixed
// size here.
size_t KnownOptionLen(uint8_t type) {
  switch (type) {
    case kSourceLinkLayer:
    case kTargetLinkLayer:
      return Layout::kLinkLayerLen;
    case kPrefixInformation:
      return Layout::kPrefixInformationLen;
    case kMtu:
      return Layout::kMtuLen;
    default:
      return 0;
  }
}

// Fills `out` from an option area that CheckNdpOptions accepted.
void ParseNdpOptions(std::span<const uint8_t> area, NdpOptions& out) {
  out = NdpOptions{};
  NdpOptionReader reader(area);
  NdpOption option;
  while (reader.Next(option)) {
    const uint8_t* p = option.bytes.data();
    switch (option.type) {
      case kSourceLinkLayer:
        if (!out.source_link_layer) {
          out.source_link_layer =
              MacAddress::FromBytes(p + Layout::kLinkLayerAddressOffset);
        }
        break;
      case kTargetLinkLayer:
        if (!out.target_link_layer) {
          out.target_link_layer =
              MacAddress::FromBytes(p + Layout::kLinkLayerAddressOffset);
        }
        break;
      case kMtu:
        if (!out.mtu) out.mtu = LoadBe32(p + Layout::kMtuOffset);
        break;
      case kPrefixInformation: {
        NdpPrefixInformation info;
        info.prefix_length = p[Layout::kPrefixLengthOffset];
        const uint8_t flags = p[Layout::kPrefixFlagsOffset];
        info.on_link = (flags & Layout::kOnLinkFlag) != 0;
        info.autonomous = (flags & Layout::kAutonomousFlag) != 0;
        info.valid_lifetime = LoadBe32(p + Layout::kValidLifetimeOffset);
        info.preferred_lifetime =
            LoadBe32(p + Layout::kPreferredLifetimeOffset);
        info.prefix = Ipv6Address::FromBytes(p + Layout::kPrefixOffset);
        if (!out.prefixes.push_back(info) && out.prefixes_ignored < 255) {
          ++out.prefixes_ignored;
        }
        break;
      }
      default:
        break;  // RFC 4861 section 4: unknown options are ignored.
    }
  }
}

void EmitLinkLayerOption(uint8_t type, const MacAddress& mac, uint8_t* p) {
  p[Layout::kTypeOffset] = type;
  p[Layout::kLengthOffset] = Layout::kLinkLayerLen / Layout::kUnit;
  mac.CopyTo(p + Layout::kLinkLayerAddressOffset);
}

// Writes `options` at `p` in the order documented on NdpOptions and
// returns the bytes written.
size_t EmitNdpOptions(const NdpOptions& options, uint8_t* p) {
  uint8_t* const start = p;
  if (options.source_link_layer) {
    EmitLinkLayerOption(kSourceLinkLayer, *options.source_link_layer, p);
    p += Layout::kLinkLayerLen;
  }
  if (options.target_link_layer) {
    EmitLinkLayerOption(kTargetLinkLayer, *options.target_link_layer, p);
    p += Layout::kLinkLayerLen;
  }
  if (options.mtu) {
    std::memset(p, 0, Layout::kMtuLen);  // reserved bytes
    p[Layout::kTypeOffset] = kMtu;
    p[Layout::kLengthOffset] = Layout::kMtuLen / Layout::kUnit;
    StoreBe32(p + Layout::kMtuOffset, *options.mtu);
    p += Layout::kMtuLen;
  }
  for (const NdpPrefixInformation& info : options.prefixes) {
    std::memset(p, 0, Layout::kPrefixInformationLen);  // reserved fields
    p[Layout::kTypeOffset] = kPrefixInformation;
    p[Layout::kLengthOffset] = Layout::kPrefixInformationLen / Layout::kUnit;
    p[Layout::kPrefixLengthOffset] = info.prefix_length;
    p[Layout::kPrefixFlagsOffset] =
        static_cast<uint8_t>((info.on_link ? Layout::kOnLinkFlag : 0) |
                             (info.autonomous ? Layout::kAutonomousFlag : 0));
    StoreBe32(p + Layout::kValidLifetimeOffset, info.valid_lifetime);
    StoreBe32(p + Layout::kPreferredLifetimeOffset, info.preferred_lifetime);
    info.prefix.CopyTo(p + Layout::kPrefixOffset);
    p += Layout::kPrefixInformationLen;
  }
  return static_cast<size_t>(p - start);
}

template <typename... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <typename... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

constexpr uint8_t TypeByte(Icmpv6Type t) { return static_cast<uint8_t>(t); }

// Writes one message. Every message starts with type, code and a zero
// checksum, then 4 type-specific bytes.
class Emitter {
 public:
  explicit Emitter(MutableIcmpv6Packet packet) : packet_(packet) {}

  void operator()(const Icmpv6EchoRequest& m) {
    Echo(Icmpv6Type::kEchoRequest, m.identifier, m.sequence, m.data);
  }
  void operator()(const Icmpv6EchoReply& m) {
    Echo(Icmpv6Type::kEchoReply, m.identifier, m.sequence, m.data);
  }
  void operator()(const Icmpv6DestinationUnreachable& m) {
    Error(Icmpv6Type::kDestinationUnreachable, m.code, 0, m.invoking_packet);
  }
  void operator()(const Icmpv6PacketTooBig& m) {
    Error(Icmpv6Type::kPacketTooBig, 0, m.mtu, m.invoking_packet);
  }
  void operator()(const Icmpv6TimeExceeded& m) {
    Error(Icmpv6Type::kTimeExceeded, m.code, 0, m.invoking_packet);
  }
  void operator()(const Icmpv6ParameterProblem& m) {
    Error(Icmpv6Type::kParameterProblem, m.code, m.pointer, m.invoking_packet);
  }
  void operator()(const NdpRouterSolicitation& m) {
    Start(TypeByte(Icmpv6Type::kRouterSolicitation), 0, 0);
    EmitNdpOptions(m.options, At(Icmpv6Packet::kRsOptionsOffset));
  }
  void operator()(const NdpRouterAdvertisement& m) {
    Start(TypeByte(Icmpv6Type::kRouterAdvertisement), 0, 0);
    uint8_t* b = At(0);
    b[Icmpv6Packet::kRaCurHopLimitOffset] = m.cur_hop_limit;
    b[Icmpv6Packet::kRaFlagsOffset] = static_cast<uint8_t>(
        (m.managed ? Icmpv6Packet::kRaManagedFlag : 0) |
        (m.other_config ? Icmpv6Packet::kRaOtherConfigFlag : 0));
    StoreBe16(b + Icmpv6Packet::kRaRouterLifetimeOffset, m.router_lifetime);
    StoreBe32(b + Icmpv6Packet::kRaReachableTimeOffset, m.reachable_time);
    StoreBe32(b + Icmpv6Packet::kRaRetransTimerOffset, m.retrans_timer);
    EmitNdpOptions(m.options, At(Icmpv6Packet::kRaOptionsOffset));
  }
  void operator()(const NdpNeighborSolicitation& m) {
    Start(TypeByte(Icmpv6Type::kNeighborSolicitation), 0, 0);
    m.target.CopyTo(At(Icmpv6Packet::kTargetOffset));
    EmitNdpOptions(m.options, At(Icmpv6Packet::kNdOptionsOffset));
  }
  void operator()(const NdpNeighborAdvertisement& m) {
    const uint32_t flags =
        (m.router ? Icmpv6Packet::kNaRouterFlag : 0u) |
        (m.solicited ? Icmpv6Packet::kNaSolicitedFlag : 0u) |
        (m.override_flag ? Icmpv6Packet::kNaOverrideFlag : 0u);
    // The flags are the top bits of the first type-specific byte.
    Start(TypeByte(Icmpv6Type::kNeighborAdvertisement), 0, flags << 24);
    m.target.CopyTo(At(Icmpv6Packet::kTargetOffset));
    EmitNdpOptions(m.options, At(Icmpv6Packet::kNdOptionsOffset));
  }
  void operator()(const Icmpv6Other& m) {
    Start(m.type, m.code, m.rest_of_header);
    Copy(Icmpv6Packet::kBodyOffset, m.body);
  }

 private:
  uint8_t* At(size_t offset) { return packet_.bytes().data() + offset; }

  void Start(uint8_t type, uint8_t code, uint32_t rest_of_header) {
    packet_.SetType(type);
    packet_.SetCode(code);
    packet_.SetChecksum(0);
    StoreBe32(At(Icmpv6Packet::kRestOfHeaderOffset), rest_of_header);
  }
  // memmove: `src` may be the very bytes being written (see icmpv6.h).
  void Copy(size_t offset, std::span<const uint8_t> src) {
    if (!src.empty()) std::memmove(At(offset), src.data(), src.size());
  }
  void Echo(Icmpv6Type type, uint16_t identifier, uint16_t sequence,
            std::span<const uint8_t> data) {
    Start(TypeByte(type), 0, (uint32_t{identifier} << 16) | uint32_t{sequence});
    Copy(Icmpv6Packet::kEchoDataOffset, data);
  }
  void Error(Icmpv6Type type, uint8_t code, uint32_t word,
             std::span<const uint8_t> invoking_packet) {
    Start(TypeByte(type), code, word);
    Copy(Icmpv6Packet::kInvokingPacketOffset, invoking_packet);
  }

  MutableIcmpv6Packet packet_;
};

}  // namespace

WireError CheckNdpOptions(std::span<const uint8_t> options) {
  size_t pos = 0;
  while (pos < options.size()) {
    const size_t remaining = options.size() - pos;
    if (remaining < 2) return WireError::kOptionOverflow;
    const uint8_t type = options[pos + Layout::kTypeOffset];
    const size_t units = options[pos + Layout::kLengthOffset];
    if (units == 0) return WireError::kBadOptionLength;
    const size_t len = units * Layout::kUnit;
    if (len > remaining) return WireError::kOptionOverflow;
    const size_t expected = KnownOptionLen(type);
    if (expected != 0 && len != expected) return WireError::kBadOptionLength;
    if (type == kPrefixInformation &&
        options[pos + Layout::kPrefixLengthOffset] > kMaxPrefixLength) {
      return WireError::kMalformed;
    }
    pos += len;
  }
  return WireError::kOk;
}

bool NdpOptionReader::Next(NdpOption& out) {
  const size_t remaining = options_.size() - pos_;
  if (remaining < 2) return false;
  const size_t len = options_[pos_ + Layout::kLengthOffset] * Layout::kUnit;
  if (len == 0 || len > remaining) return false;
  out.type = options_[pos_ + Layout::kTypeOffset];
  out.bytes = options_.subspan(pos_, len);
  pos_ += len;
  return true;
}

size_t NdpOptions::BufferLen() const {
  return (source_link_layer ? Layout::kLinkLayerLen : 0) +
         (target_link_layer ? Layout::kLinkLayerLen : 0) +
         (mtu ? Layout::kMtuLen : 0) +
         prefixes.size() * Layout::kPrefixInformationLen;
}

WireError Icmpv6Repr::Parse(const Icmpv6Packet& packet, Icmpv6Repr& out) {
  if (WireError e = packet.Check(); e != WireError::kOk) return e;
  const uint8_t type = packet.Type();
  switch (static_cast<Icmpv6Type>(type)) {
    case Icmpv6Type::kEchoRequest:
      out.message = Icmpv6EchoRequest{
          packet.Identifier(), packet.SequenceNumber(), packet.EchoData()};
      return WireError::kOk;
    case Icmpv6Type::kEchoReply:
      out.message = Icmpv6EchoReply{packet.Identifier(),
                                    packet.SequenceNumber(), packet.EchoData()};
      return WireError::kOk;
    case Icmpv6Type::kDestinationUnreachable:
      out.message =
          Icmpv6DestinationUnreachable{packet.Code(), packet.InvokingPacket()};
      return WireError::kOk;
    case Icmpv6Type::kPacketTooBig:
      out.message = Icmpv6PacketTooBig{packet.Mtu(), packet.InvokingPacket()};
      return WireError::kOk;
    case Icmpv6Type::kTimeExceeded:
      out.message = Icmpv6TimeExceeded{packet.Code(), packet.InvokingPacket()};
      return WireError::kOk;
    case Icmpv6Type::kParameterProblem:
      out.message = Icmpv6ParameterProblem{packet.Code(), packet.Pointer(),
                                           packet.InvokingPacket()};
      return WireError::kOk;
    default:
      break;
  }
  if (Icmpv6Packet::OptionsOffset(type) == 0) {
    out.message =
        Icmpv6Other{type, packet.Code(), packet.RestOfHeader(), packet.Body()};
    return WireError::kOk;
  }

  // Neighbor Discovery. RFC 4861 sections 6.1.1, 6.1.2, 7.1.1, 7.1.2:
  // "ICMP Code is 0", else the message is silently discarded.
  if (packet.Code() != 0) return WireError::kMalformed;
  NdpOptions options;
  ParseNdpOptions(packet.Options(), options);
  switch (static_cast<Icmpv6Type>(type)) {
    case Icmpv6Type::kRouterSolicitation:
      out.message = NdpRouterSolicitation{options};
      break;
    case Icmpv6Type::kRouterAdvertisement: {
      NdpRouterAdvertisement ra;
      ra.cur_hop_limit = packet.CurHopLimit();
      ra.managed = packet.ManagedFlag();
      ra.other_config = packet.OtherConfigFlag();
      ra.router_lifetime = packet.RouterLifetime();
      ra.reachable_time = packet.ReachableTime();
      ra.retrans_timer = packet.RetransTimer();
      ra.options = options;
      out.message = ra;
      break;
    }
    case Icmpv6Type::kNeighborSolicitation: {
      // RFC 4861 section 7.1.1: "Target Address is not a multicast
      // address."
      const Ipv6Address target = packet.Target();
      if (target.IsMulticast()) return WireError::kMalformed;
      out.message = NdpNeighborSolicitation{target, options};
      break;
    }
    default: {  // kNeighborAdvertisement, the last type with options.
      // RFC 4861 section 7.1.2: same rule for the Target.
      const Ipv6Address target = packet.Target();
      if (target.IsMulticast()) return WireError::kMalformed;
      NdpNeighborAdvertisement na;
      na.router = packet.RouterFlag();
      na.solicited = packet.SolicitedFlag();
      na.override_flag = packet.OverrideFlag();
      na.target = target;
      na.options = options;
      out.message = na;
      break;
    }
  }
  return WireError::kOk;
}

uint8_t Icmpv6Repr::type() const {
  return std::visit(Overloaded{
                        [](const Icmpv6EchoRequest&) {
                          return TypeByte(Icmpv6Type::kEchoRequest);
                        },
                        [](const Icmpv6EchoReply&) {
                          return TypeByte(Icmpv6Type::kEchoReply);
                        },
                        [](const Icmpv6DestinationUnreachable&) {
                          return TypeByte(Icmpv6Type::kDestinationUnreachable);
                        },
                        [](const Icmpv6PacketTooBig&) {
                          return TypeByte(Icmpv6Type::kPacketTooBig);
                        },
                        [](const Icmpv6TimeExceeded&) {
                          return TypeByte(Icmpv6Type::kTimeExceeded);
                        },
                        [](const Icmpv6ParameterProblem&) {
                          return TypeByte(Icmpv6Type::kParameterProblem);
                        },
                        [](const NdpRouterSolicitation&) {
                          return TypeByte(Icmpv6Type::kRouterSolicitation);
                        },
                        [](const NdpRouterAdvertisement&) {
                          return TypeByte(Icmpv6Type::kRouterAdvertisement);
                        },
                        [](const NdpNeighborSolicitation&) {
                          return TypeByte(Icmpv6Type::kNeighborSolicitation);
                        },
                        [](const NdpNeighborAdvertisement&) {
                          return TypeByte(Icmpv6Type::kNeighborAdvertisement);
                        },
                        [](const Icmpv6Other& m) { return m.type; },
                    },
                    message);
}

size_t Icmpv6Repr::BufferLen() const {
  return std::visit(
      Overloaded{
          [](const Icmpv6EchoRequest& m) {
            return Icmpv6Packet::kEchoDataOffset + m.data.size();
          },
          [](const Icmpv6EchoReply& m) {
            return Icmpv6Packet::kEchoDataOffset + m.data.size();
          },
          [](const Icmpv6DestinationUnreachable& m) {
            return Icmpv6Packet::kInvokingPacketOffset +
                   m.invoking_packet.size();
          },
          [](const Icmpv6PacketTooBig& m) {
            return Icmpv6Packet::kInvokingPacketOffset +
                   m.invoking_packet.size();
          },
          [](const Icmpv6TimeExceeded& m) {
            return Icmpv6Packet::kInvokingPacketOffset +
                   m.invoking_packet.size();
          },
          [](const Icmpv6ParameterProblem& m) {
            return Icmpv6Packet::kInvokingPacketOffset +
                   m.invoking_packet.size();
          },
          [](const NdpRouterSolicitation& m) {
            return Icmpv6Packet::kRsOptionsOffset + m.options.BufferLen();
          },
          [](const NdpRouterAdvertisement& m) {
            return Icmpv6Packet::kRaOptionsOffset + m.options.BufferLen();
          },
          [](const NdpNeighborSolicitation& m) {
            return Icmpv6Packet::kNdOptionsOffset + m.options.BufferLen();
          },
          [](const NdpNeighborAdvertisement& m) {
            return Icmpv6Packet::kNdOptionsOffset + m.options.BufferLen();
          },
          [](const Icmpv6Other& m) {
            return Icmpv6Packet::kBodyOffset + m.body.size();
          },
      },
      message);
}

void Icmpv6Repr::Emit(MutableIcmpv6Packet packet) const {
  std::visit(Emitter(packet), message);
}

}  // namespace netstack::wire
