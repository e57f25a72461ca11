// Test support: two stacks joined by an in-memory wire, on a fake clock.
// The wire can drop, delay, duplicate and reorder frames, and a test can
// look at (or rewrite) every frame that crosses it. Time only moves when
// the test says so; Run* jump straight to the next event (a frame due, a
// timer), so a minute of TCP time costs microseconds.
#ifndef NETSTACK_TCP_TCP_TEST_UTIL_H_
#define NETSTACK_TCP_TCP_TEST_UTIL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/random/random.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/notifier.h"

namespace netstack::tcp::testing {

struct Host {
  Host(uint8_t id, const TcpLayerOptions& options, uint32_t mtu = 1500);
  transport::IpAddress v4() const;
  transport::IpAddress v6() const;

  buffer::ChunkPool chunks{8192};
  buffer::PacketPool packets{8192};
  std::unique_ptr<stack::FakeLink> link;
  std::unique_ptr<stack::Stack> stack;
  transport::Notifier notifier;
  std::unique_ptr<TcpLayer> tcp;
  uint8_t id;
};

struct WireFrame {
  std::vector<uint8_t> bytes;
  bool a_to_b = true;
  Instant at;
};

class Network {
 public:
  explicit Network(const TcpLayerOptions& options = {}, uint32_t mtu = 1500,
                   uint64_t seed = 1);
  Host& a() { return *a_; }
  Host& b() { return *b_; }
  Instant now() const { return now_; }

  // Faults: each frame is dropped with `loss`, duplicated with
  // `duplicate`; every frame waits `delay` (+ uniform jitter).
  double loss = 0;
  double duplicate = 0;
  Duration delay = absl::Microseconds(50);
  Duration jitter = absl::ZeroDuration();
  // Sees every frame leaving a host; return false to drop it. May edit.
  std::function<bool(WireFrame&)> filter;
  // Extra frames a filter wants on the wire too (forged copies, say);
  // queued after the frame being filtered (so a forged copy never
  // overtakes its original).
  std::vector<WireFrame> extra;
  uint64_t frames_dropped = 0;

  // One round: collect sent frames, deliver due ones, poll everything.
  void Step();
  // Runs until `done` or `limit` of fake time passed. True if done.
  bool RunUntil(const std::function<bool()>& done,
                Duration limit = absl::Seconds(60));
  void RunFor(Duration d);

 private:
  void Collect(Host& h, bool a_to_b);
  void PollAll();
  Instant NextEvent() const;

  std::unique_ptr<Host> a_;
  std::unique_ptr<Host> b_;
  Instant now_;
  std::deque<WireFrame> in_flight_;  // ordered by `at`
  absl::BitGen unused_;
  uint64_t rng_;
};

}  // namespace netstack::tcp::testing

#endif  // NETSTACK_TCP_TCP_TEST_UTIL_H_
