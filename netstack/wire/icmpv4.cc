#include "netstack/wire/icmpv4.h"

#include <algorithm>
#include <cstring>

namespace netstack::wire {
namespace {

// Visitor overload set, so each message kind is handled by its own lambda.
template <typename... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <typename... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

constexpr uint8_t TypeByte(Icmpv4Type t) { return static_cast<uint8_t>(t); }

}  // namespace

WireError Icmpv4Repr::Parse(const Icmpv4Packet& packet, Icmpv4Repr& out) {
  if (WireError e = packet.Check(); e != WireError::kOk) return e;
  const uint8_t type = packet.Type();
  const uint8_t code = packet.Code();
  if (type == TypeByte(Icmpv4Type::kEchoRequest) && code == 0) {
    out.message = EchoRequest{packet.EchoIdent(), packet.EchoSeq()};
  } else if (type == TypeByte(Icmpv4Type::kEchoReply) && code == 0) {
    out.message = EchoReply{packet.EchoIdent(), packet.EchoSeq()};
  } else if (type == TypeByte(Icmpv4Type::kDestUnreachable)) {
    out.message = DestUnreachable{static_cast<Icmpv4UnreachableCode>(code),
                                  packet.NextHopMtu()};
  } else if (type == TypeByte(Icmpv4Type::kTimeExceeded)) {
    out.message = TimeExceeded{static_cast<Icmpv4TimeExceededCode>(code)};
  } else {
    out.message = Other{type, code, packet.RestOfHeader()};
  }
  out.data = packet.Data();
  return WireError::kOk;
}

uint8_t Icmpv4Repr::Type() const {
  return std::visit(
      Overloaded{
          [](const EchoRequest&) { return TypeByte(Icmpv4Type::kEchoRequest); },
          [](const EchoReply&) { return TypeByte(Icmpv4Type::kEchoReply); },
          [](const DestUnreachable&) {
            return TypeByte(Icmpv4Type::kDestUnreachable);
          },
          [](const TimeExceeded&) {
            return TypeByte(Icmpv4Type::kTimeExceeded);
          },
          [](const Other& m) { return m.type; },
      },
      message);
}

uint8_t Icmpv4Repr::Code() const {
  return std::visit(
      Overloaded{
          [](const EchoRequest&) { return uint8_t{0}; },
          [](const EchoReply&) { return uint8_t{0}; },
          [](const DestUnreachable& m) { return static_cast<uint8_t>(m.code); },
          [](const TimeExceeded& m) { return static_cast<uint8_t>(m.code); },
          [](const Other& m) { return m.code; },
      },
      message);
}

void Icmpv4Repr::Emit(MutableIcmpv4Packet packet) const {
  const uint32_t rest = std::visit(
      Overloaded{
          [](const EchoRequest& m) {
            return (uint32_t{m.ident} << 16) | m.seq_no;
          },
          [](const EchoReply& m) {
            return (uint32_t{m.ident} << 16) | m.seq_no;
          },
          [](const DestUnreachable& m) { return uint32_t{m.next_hop_mtu}; },
          [](const TimeExceeded&) { return uint32_t{0}; },
          [](const Other& m) { return m.rest_of_header; },
      },
      message);
  // Data first: it may already live in the destination buffer (a reply
  // built in place over the request), and memmove is correct for any
  // overlap. Only data aliasing the 8 header bytes being written would be
  // clobbered, and no caller builds a message from its own header.
  uint8_t* out_data = packet.bytes().data() + Icmpv4Packet::kHeaderLen;
  if (!data.empty()) std::memmove(out_data, data.data(), data.size());
  packet.SetType(Type());
  packet.SetCode(Code());
  packet.SetRestOfHeader(rest);
  // The checksum covers exactly the message, not any slack in the view.
  MutableIcmpv4Packet(packet.bytes().first(BufferLen())).FillChecksum();
}

bool operator==(const Icmpv4Repr& a, const Icmpv4Repr& b) {
  return a.message == b.message && std::ranges::equal(a.data, b.data);
}

}  // namespace netstack::wire
