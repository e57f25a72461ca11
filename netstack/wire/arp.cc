#include "netstack/wire/arp.h"

namespace netstack::wire {

WireError ArpRepr::Parse(const ArpPacket& packet, ArpRepr& out) {
  if (WireError e = packet.Check(); e != WireError::kOk) return e;
  const uint16_t op = packet.Operation();
  if (op != static_cast<uint16_t>(ArpOperation::kRequest) &&
      op != static_cast<uint16_t>(ArpOperation::kReply)) {
    return WireError::kUnsupported;
  }
  out.operation = static_cast<ArpOperation>(op);
  out.sender_mac = packet.SenderMac();
  out.sender_ip = packet.SenderIp();
  out.target_mac = packet.TargetMac();
  out.target_ip = packet.TargetIp();
  return WireError::kOk;
}

void ArpRepr::Emit(MutableArpPacket packet) const {
  packet.SetEthernetIpv4Types();
  packet.SetOperation(static_cast<uint16_t>(operation));
  packet.SetSenderMac(sender_mac);
  packet.SetSenderIp(sender_ip);
  packet.SetTargetMac(target_mac);
  packet.SetTargetIp(target_ip);
}

}  // namespace netstack::wire
