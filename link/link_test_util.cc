#include "link/link_test_util.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "link/frame_util.h"
#include "netstack/buffer/payload_view.h"

namespace netstack::link::testing {

std::vector<uint8_t> TestFrame(size_t len, uint32_t id) {
  std::vector<uint8_t> f(std::max<size_t>(len, 18));
  const uint8_t header[14] = {0x02, 0, 0, 0, 0,    0x02, 0x02,
                              0,    0, 0, 0, 0x01, 0x88, 0xb5};
  std::memcpy(f.data(), header, sizeof(header));
  f[14] = static_cast<uint8_t>(id >> 24);
  f[15] = static_cast<uint8_t>(id >> 16);
  f[16] = static_cast<uint8_t>(id >> 8);
  f[17] = static_cast<uint8_t>(id);
  for (size_t i = 18; i < f.size(); ++i) {
    f[i] = static_cast<uint8_t>(i * 31 + id * 7);
  }
  return f;
}

uint32_t FrameId(std::span<const uint8_t> frame) {
  if (frame.size() < 18) return UINT32_MAX;
  return (uint32_t{frame[14]} << 24) | (uint32_t{frame[15]} << 16) |
         (uint32_t{frame[16]} << 8) | uint32_t{frame[17]};
}

buffer::PacketPtr MakePacket(buffer::PacketPool& packets,
                             buffer::ChunkPool& chunks,
                             std::span<const uint8_t> bytes, size_t header_len,
                             size_t views, buffer::ChunkRef* chunk_out) {
  header_len = std::min({header_len, bytes.size(), buffer::kMaxHeaderLen});
  buffer::PacketPtr packet = packets.Allocate();
  if (packet == nullptr) return nullptr;
  if (header_len > 0) {
    auto room = packet->headers().Prepend(header_len);
    if (!room.has_value()) return nullptr;
    std::memcpy(room->data(), bytes.data(), header_len);
  }
  const std::span<const uint8_t> payload = bytes.subspan(header_len);
  if (payload.empty()) return packet;
  if (payload.size() > buffer::kChunkSize) return nullptr;
  buffer::ChunkRef chunk = chunks.Allocate();
  if (!chunk) return nullptr;
  // Start at an odd offset, as a send queue's views often do.
  const size_t base = payload.size() < buffer::kChunkSize ? 1 : 0;
  std::memcpy(chunk->mutable_data().data() + base, payload.data(),
              payload.size());
  views = std::clamp<size_t>(views, 1, buffer::PacketBuffer::kMaxPayloadViews);
  const size_t step = (payload.size() + views - 1) / views;
  for (size_t off = 0; off < payload.size(); off += step) {
    const size_t n = std::min(step, payload.size() - off);
    if (!packet->AppendPayload(
            buffer::PayloadView(chunk, static_cast<uint32_t>(base + off),
                                static_cast<uint32_t>(n)))) {
      return nullptr;
    }
  }
  if (chunk_out != nullptr) *chunk_out = chunk;
  return packet;
}

void RecordingReceiver::DeliverFrames(std::span<InboundFrame> batch,
                                      Instant now) {
  ++calls;
  largest_batch = std::max(largest_batch, batch.size());
  for (const InboundFrame& f : batch) {
    const auto b = f.frame.bytes();
    frames.push_back(ReceivedFrame{now,
                                   std::vector<uint8_t>(b.begin(), b.end()),
                                   f.checksum_verified, f.checksum_partial});
  }
  if (on_deliver) on_deliver(now);
}

LinkCapabilities RecordingEndpoint::Capabilities() const {
  LinkCapabilities caps;
  caps.mtu = 1500;
  caps.mac.bytes = {0x02, 0, 0, 0, 0, 0x01};
  return caps;
}

size_t RecordingEndpoint::Transmit(buffer::PacketChain& chain, Instant now) {
  ++transmit_calls;
  size_t n = 0;
  while (n < accept_per_call_ && !chain.empty()) {
    buffer::PacketPtr p = chain.PopFront();
    Sent s{now, PacketBytes(*p), nullptr};
    if (!p->payload().empty()) s.first_chunk = p->payload()[0].chunk().get();
    sent.push_back(std::move(s));
    ++stats_.tx_frames;
    stats_.tx_bytes += p->size();
    ++n;
  }
  return n;
}

void RecordingEndpoint::Receive(std::span<const uint8_t> bytes, Instant now,
                                bool checksum_verified, bool checksum_partial) {
  std::optional<buffer::PayloadView> view = CopyToChunk(bytes, chunks_);
  if (!view.has_value()) {
    ++stats_.rx_dropped;
    return;
  }
  ++stats_.rx_frames;
  stats_.rx_bytes += bytes.size();
  InboundFrame frame{std::move(*view), checksum_verified, checksum_partial};
  if (receiver_ != nullptr) {
    receiver_->DeliverFrames(std::span<InboundFrame>(&frame, 1), now);
  }
}

Instant AdvanceTo(LinkEndpoint& endpoint, Instant from, Instant until) {
  Instant now = from;
  // A bound, so a deadline that never clears fails the test, not hangs it.
  for (int i = 0; i < 10'000'000; ++i) {
    const Instant d = endpoint.NextDeadline();
    if (d == kNever || d > until) break;
    now = std::max(now, d);
    endpoint.Poll(now);
  }
  return now;
}

Instant RunUntilIdle(LinkEndpoint& endpoint, Instant from) {
  return AdvanceTo(endpoint, from, kNever);
}

}  // namespace netstack::link::testing
