#include "netstack/wire/udp.h"

namespace netstack::wire {

WireError UdpRepr::Parse(const UdpHeader& header, UdpRepr& out) {
  if (WireError e = header.Check(); e != WireError::kOk) return e;
  out.src_port = header.SrcPort();
  out.dst_port = header.DstPort();
  out.payload_len =
      static_cast<uint16_t>(header.Length() - UdpHeader::kHeaderLen);
  return WireError::kOk;
}

void UdpRepr::Emit(MutableUdpHeader header) const {
  header.SetSrcPort(src_port);
  header.SetDstPort(dst_port);
  header.SetLength(static_cast<uint16_t>(UdpHeader::kHeaderLen + payload_len));
  header.SetChecksum(0);
}

}  // namespace netstack::wire
