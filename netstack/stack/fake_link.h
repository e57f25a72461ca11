// A LinkEndpoint for tests and benchmarks: frames are injected by the test
// and everything transmitted is recorded as flat bytes.
#ifndef NETSTACK_STACK_FAKE_LINK_H_
#define NETSTACK_STACK_FAKE_LINK_H_

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "netstack/buffer/chunk.h"
#include "netstack/link/link_endpoint.h"

namespace netstack::stack {

class FakeLink : public link::LinkEndpoint {
 public:
  FakeLink(buffer::ChunkPool& chunks, link::LinkCapabilities caps)
      : chunks_(chunks), caps_(caps) {}

  link::LinkCapabilities Capabilities() const override { return caps_; }
  void Attach(link::LinkReceiver* receiver) override { receiver_ = receiver; }

  size_t Transmit(buffer::PacketChain& chain, Instant) override {
    size_t n = 0;
    while (buffer::PacketPtr p = chain.PopFront()) {
      ++stats_.tx_frames;
      stats_.tx_bytes += p->size();
      ++n;
      if (!record_) continue;  // benchmarks: no allocation per packet
      std::vector<uint8_t> frame(p->headers().data().begin(),
                                 p->headers().data().end());
      for (const auto& v : p->payload()) {
        frame.insert(frame.end(), v.bytes().begin(), v.bytes().end());
      }
      sent.push_back(std::move(frame));
    }
    ++stats_.tx_syscalls;
    return n;
  }

  // Copies `frame` into a chunk and delivers it (with other frames given
  // in the same call, as one batch).
  void Inject(std::span<const std::vector<uint8_t>> frames, Instant now,
              bool checksum_verified = false) {
    std::vector<link::InboundFrame> batch;
    for (const auto& f : frames) {
      buffer::ChunkRef c = chunks_.Allocate();
      if (!c || f.size() > buffer::kChunkSize) continue;
      if (!f.empty()) std::memcpy(c->mutable_data().data(), f.data(), f.size());
      if (rx_slot_size_ != 0) c->set_slot_size(rx_slot_size_);
      link::InboundFrame in;
      in.frame = buffer::PayloadView(std::move(c), 0,
                                     static_cast<uint32_t>(f.size()));
      in.checksum_verified = checksum_verified;
      batch.push_back(std::move(in));
      ++stats_.rx_frames;
    }
    stats_.rx_batch_limit_hits += busy_;
    if (receiver_ != nullptr) receiver_->DeliverFrames(batch, now);
  }
  // Delivers prepared frames as they are (benchmarks: no copy, no
  // allocation).
  void Deliver(std::span<link::InboundFrame> frames, Instant now) {
    stats_.rx_frames += frames.size();
    stats_.rx_batch_limit_hits += busy_;
    if (receiver_ != nullptr) receiver_->DeliverFrames(frames, now);
  }
  void Inject(const std::vector<uint8_t>& frame, Instant now) {
    Inject(std::span<const std::vector<uint8_t>>(&frame, 1), now);
  }

  link::LinkStats Stats() const override { return stats_; }
  std::string Name() const override { return "fake"; }
  void set_record(bool record) { record_ = record; }
  // Injected frames say they were received into slots of this size (a
  // TAP with host GSO: a whole chunk each), which TCP charges.
  void set_rx_slot_size(uint32_t bytes) { rx_slot_size_ = bytes; }
  // Each delivery counts as a read that hit its batch limit
  // (LinkStats::rx_batch_limit_hits): a link busier than its reader.
  void set_busy(bool busy) { busy_ = busy; }

  std::vector<std::vector<uint8_t>> sent;

 private:
  buffer::ChunkPool& chunks_;
  link::LinkCapabilities caps_;
  link::LinkReceiver* receiver_ = nullptr;
  link::LinkStats stats_;
  bool record_ = true;
  uint32_t rx_slot_size_ = 0;
  bool busy_ = false;
};

}  // namespace netstack::stack

#endif  // NETSTACK_STACK_FAKE_LINK_H_
