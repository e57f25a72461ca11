// Two runtimes (netstack/runtime/runtime.h) joined by an in-memory
// channel, for in-process TCP benchmarks: side a is 10.0.0.1/24, side b
// 10.0.0.2/24, each a Stack with TCP and UDP, its loop and its end of
// turn. They share the caller's pools (the channel packs the frames it
// carries into one pool), so a network of two stacks has no fds but the
// loops' own. Drive it with a.Poll() and b.Poll(); the application's work
// goes in a sweep (Runtime::AddSweep), where the runtime runs it after the
// readiness callbacks and before TCP sends.
#ifndef BENCH_TCP_PAIR_H_
#define BENCH_TCP_PAIR_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "link/channel_endpoint.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/runtime/runtime.h"

namespace netstack::bench {

struct TcpPairOptions {
  link::ChannelOptions channel;  // the MACs are set here
  uint32_t max_backlog = 4096;
  // > 0: software GSO of this size on side a's link (the sender's).
  uint32_t a_software_gso = 0;
  // A fake clock both sides read (the caller moves it on between turns);
  // null: CLOCK_MONOTONIC.
  const Instant* now = nullptr;
};

struct TcpPair {
  static wire::Ipv4Address Address(uint8_t id) {
    return wire::Ipv4Address::FromU32(0x0a000000u | id);
  }
  std::unique_ptr<runtime::Runtime> a;
  std::unique_ptr<runtime::Runtime> b;
};

inline absl::StatusOr<TcpPair> MakeTcpPair(buffer::ChunkPool& chunks,
                                           buffer::PacketPool& packets,
                                           TcpPairOptions options) {
  options.channel.mac_a.bytes = {2, 0, 0, 0, 0, 1};
  options.channel.mac_b.bytes = {2, 0, 0, 0, 0, 2};
  std::unique_ptr<link::ChannelEndpoint> b_end;  // a's factory makes it
  auto side = [&](uint8_t id) {
    runtime::RuntimeOptions o;
    o.chunk_pool = &chunks;
    o.packet_pool = &packets;
    o.open_link = [&, id](buffer::ChunkPool& c, buffer::PacketPool&)
        -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
      if (id == 2) return std::unique_ptr<link::LinkEndpoint>(std::move(b_end));
      absl::StatusOr<link::ChannelPair> pair =
          link::CreateChannelPair(c, options.channel);
      if (!pair.ok()) return pair.status();
      b_end = std::move(pair->b);
      return std::unique_ptr<link::LinkEndpoint>(std::move(pair->a));
    };
    o.nic_name = "chan";
    o.addrs4 = {stack::Ipv4Cidr{TcpPair::Address(id), 24}};
    o.tcp.seed = id;
    o.tcp.max_backlog = options.max_backlog;
    o.udp_seed = id;
    if (id == 1) o.decorators.software_gso_max_size = options.a_software_gso;
    if (options.now != nullptr) {
      o.clock = [now = options.now] { return *now; };
    }
    return runtime::Runtime::Create(std::move(o));
  };
  TcpPair pair;
  absl::StatusOr<std::unique_ptr<runtime::Runtime>> a = side(1);
  if (!a.ok()) return a.status();
  pair.a = *std::move(a);
  absl::StatusOr<std::unique_ptr<runtime::Runtime>> b = side(2);
  if (!b.ok()) return b.status();
  pair.b = *std::move(b);
  return pair;
}

}  // namespace netstack::bench

#endif  // BENCH_TCP_PAIR_H_
