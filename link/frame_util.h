// Helpers that turn a PacketBuffer (headers + payload views) into
// contiguous bytes, and copy packets for the link decorators.
//
// A packet on its way out is scattered: its headers live in the packet's
// own prependable buffer and its payload in views of shared chunks (a TCP
// send queue, a GSO split). Whatever needs one contiguous frame (a pcap
// record, the in-memory channel's receiver, a corrupted copy) flattens it
// with these. None of them writes into a chunk that is already shared.
#ifndef NETSTACK_LINK_FRAME_UTIL_H_
#define NETSTACK_LINK_FRAME_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/buffer/payload_view.h"

namespace netstack::link {

// Copies the first min(packet.size(), out.size()) bytes of `packet`
// (headers, then the payload views in order) into `out` and returns that
// count. A short `out` truncates the copy, which is what a pcap snaplen
// wants; pass an `out` of packet.size() bytes for the whole frame.
size_t CopyPacketBytes(const buffer::PacketBuffer& packet,
                       std::span<uint8_t> out);

// Copies `bytes` into a fresh chunk from `pool` and returns a view of them.
// nullopt when the pool is exhausted or `bytes` exceeds kChunkSize.
std::optional<buffer::PayloadView> CopyToChunk(std::span<const uint8_t> bytes,
                                               buffer::ChunkPool& pool);

// Flattens `packet` into a fresh chunk from `pool`: the returned view holds
// the whole frame and shares nothing with `packet`, so it may be modified
// through the chunk before it is shared further. nullopt when the pool is
// exhausted or the packet is larger than kChunkSize.
std::optional<buffer::PayloadView> FlattenToChunk(
    const buffer::PacketBuffer& packet, buffer::ChunkPool& pool);

// A second packet with the same content, from `pool`: the headers are
// copied (they are per-packet memory) and the payload views are copied,
// which shares their chunks without copying payload bytes. Null when the
// pool is exhausted.
buffer::PacketPtr ClonePacket(const buffer::PacketBuffer& packet,
                              buffer::PacketPool& pool);

// All the bytes of `packet` in a new vector. Allocates: for tests and
// diagnostics, never the per-packet path.
std::vector<uint8_t> PacketBytes(const buffer::PacketBuffer& packet);

}  // namespace netstack::link

#endif  // NETSTACK_LINK_FRAME_UTIL_H_
