#include "netstack/backend/guest_config_udp.h"

#include <utility>

#include "netstack/wire/checksum.h"
#include "netstack/wire/udp.h"

namespace netstack::backend {

buffer::PacketPtr MakeUdpPacket(buffer::PacketPool& packets,
                                buffer::ChunkRef chunk, uint32_t len,
                                uint16_t src_port, uint16_t dst_port,
                                uint16_t pseudo_header_sum) {
  buffer::PacketPtr p = packets.Allocate();
  if (p == nullptr) return nullptr;
  wire::ChecksumAccumulator payload_sum;
  payload_sum.Add(std::span<const uint8_t>(chunk->mutable_data().first(len)));
  if (!p->AppendPayload(buffer::PayloadView(std::move(chunk), 0, len))) {
    return nullptr;
  }
  wire::UdpRepr udp;
  udp.src_port = src_port;
  udp.dst_port = dst_port;
  udp.payload_len = static_cast<uint16_t>(len);
  auto hdr = p->headers().Prepend(udp.BufferLen());
  if (!hdr) return nullptr;
  wire::MutableUdpHeader h(*hdr);
  udp.Emit(h);
  h.FillChecksum(pseudo_header_sum, payload_sum);
  return p;
}

}  // namespace netstack::backend
