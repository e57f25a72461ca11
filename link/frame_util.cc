#include "link/frame_util.h"

#include <algorithm>
#include <cstring>

namespace netstack::link {

size_t CopyPacketBytes(const buffer::PacketBuffer& packet,
                       std::span<uint8_t> out) {
  size_t copied = 0;
  auto copy = [&](std::span<const uint8_t> piece) {
    const size_t n = std::min(piece.size(), out.size() - copied);
    if (n > 0) std::memcpy(out.data() + copied, piece.data(), n);
    copied += n;
  };
  copy(packet.headers().data());
  for (const buffer::PayloadView& view : packet.payload()) {
    if (copied == out.size()) break;
    copy(view.bytes());
  }
  return copied;
}

std::optional<buffer::PayloadView> CopyToChunk(std::span<const uint8_t> bytes,
                                               buffer::ChunkPool& pool) {
  if (bytes.size() > buffer::kChunkSize) return std::nullopt;
  buffer::ChunkRef chunk = pool.Allocate();
  if (!chunk) return std::nullopt;
  if (!bytes.empty()) {
    std::memcpy(chunk->mutable_data().data(), bytes.data(), bytes.size());
  }
  return buffer::PayloadView(std::move(chunk), 0,
                             static_cast<uint32_t>(bytes.size()));
}

std::optional<buffer::PayloadView> FlattenToChunk(
    const buffer::PacketBuffer& packet, buffer::ChunkPool& pool) {
  const size_t size = packet.size();
  if (size > buffer::kChunkSize) return std::nullopt;
  buffer::ChunkRef chunk = pool.Allocate();
  if (!chunk) return std::nullopt;
  // The chunk is fresh (one reference), so writing it is allowed.
  CopyPacketBytes(packet, chunk->mutable_data().first(size));
  return buffer::PayloadView(std::move(chunk), 0, static_cast<uint32_t>(size));
}

buffer::PacketPtr ClonePacket(const buffer::PacketBuffer& packet,
                              buffer::PacketPool& pool) {
  buffer::PacketPtr copy = pool.Allocate();
  if (copy == nullptr) return nullptr;
  const std::span<const uint8_t> headers = packet.headers().data();
  if (!headers.empty()) {
    // Both buffers have the same fixed headroom, so this always fits.
    std::optional<std::span<uint8_t>> room =
        copy->headers().Prepend(headers.size());
    if (!room.has_value()) return nullptr;
    std::memcpy(room->data(), headers.data(), headers.size());
  }
  for (const buffer::PayloadView& view : packet.payload()) {
    // Same number of slots on both sides, so this cannot run out.
    if (!copy->AppendPayload(view)) return nullptr;
  }
  return copy;
}

std::vector<uint8_t> PacketBytes(const buffer::PacketBuffer& packet) {
  std::vector<uint8_t> bytes(packet.size());
  CopyPacketBytes(packet, bytes);
  return bytes;
}

}  // namespace netstack::link
