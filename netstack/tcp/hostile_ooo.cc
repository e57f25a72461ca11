#include "netstack/tcp/hostile_ooo.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "netstack/link/link_endpoint.h"

namespace netstack::tcp::testing {

HostileOooResult RunHostileOoo(size_t count, uint32_t receive_buffer,
                               size_t batch, bool holes) {
  HostileOooResult res;
  res.segments = count;
  res.receive_buffer = receive_buffer;
  HarnessOptions o;
  o.tcp.connection.receive_buffer = receive_buffer;
  o.tcp.connection.max_receive_buffer = receive_buffer;
  o.tcp.connection.receive_autotuning = false;
  SegmentHarness h(o);
  auto sock = h.OpenActive();
  if (sock == nullptr) return res;
  h.Take();
  const uint32_t base = h.peer.seq;

  // The link's receive memory: one chunk per frame, each a 64 KiB slot.
  buffer::ChunkPool link_pool(count + 2 * batch + 16);
  auto pinned = [&] {
    return (link_pool.stats().in_use + h.chunks().stats().in_use) *
           buffer::kChunkSize;
  };
  const size_t idle = h.chunks().stats().in_use;

  // Byte 2k + 1 (or k + 1 without holes) for k in a fixed scrambled
  // order; the bytes 2k (or only byte 0) are holes.
  const uint32_t stride = holes ? 2 : 1;
  std::vector<uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0u);
  std::mt19937 rng(12);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::vector<uint8_t>> frames;
  frames.reserve(count);
  for (uint32_t k : order) {
    frames.push_back(h.Frame(h.Segment().Seq(base + stride * k + 1).Data(1)));
  }

  std::vector<link::InboundFrame> in;
  in.reserve(batch);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < count; i += batch) {
    in.clear();
    for (size_t j = i; j < std::min(count, i + batch); ++j) {
      buffer::ChunkRef c = link_pool.Allocate();
      if (!c) break;
      std::memcpy(c->mutable_data().data(), frames[j].data(),
                  frames[j].size());
      c->set_slot_size(static_cast<uint32_t>(buffer::kChunkSize));
      link::InboundFrame f;
      f.frame = buffer::PayloadView(std::move(c), 0,
                                    static_cast<uint32_t>(frames[j].size()));
      in.push_back(std::move(f));
    }
    h.link().Deliver(std::span<link::InboundFrame>(in), h.now());
    in.clear();  // the link's own references go
    h.Poll();
    res.acks += h.Take().size();
    res.peak_pinned_bytes = std::max(res.peak_pinned_bytes, pinned());
  }
  res.seconds = std::chrono::duration<double>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
  res.final_pinned_bytes = pinned();
  (void)idle;
  res.pruned = h.Drops(stack::DropReason::kTcpOfoPruned);
  res.memory_drops = h.Drops(stack::DropReason::kTcpReceiveMemory);

  // The peer resends everything in order, MSS by MSS; the application
  // reads as it goes. What is read must be the pattern, without a gap.
  const uint32_t total = stride * static_cast<uint32_t>(count) + 1;
  const uint32_t mss = sock->Info().mss;
  std::vector<uint8_t> buf(1 << 16);
  bool ok = true;
  for (uint32_t off = 0; off < total;) {
    const uint32_t n = std::min(mss, total - off);
    h.Send(h.Segment().Seq(base + off).Data(n));
    off += n;
    for (;;) {
      auto r = sock->Read(buf);
      if (!r.ok() || *r == 0) break;
      for (size_t i = 0; i < *r; ++i) {
        ok &= buf[i] == PatternByte(base + static_cast<uint32_t>(
                                               res.bytes_read + i));
      }
      res.bytes_read += *r;
    }
  }
  h.Take();
  res.data_ok = ok;
  return res;
}

}  // namespace netstack::tcp::testing
