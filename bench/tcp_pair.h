// One side of an in-process TCP benchmark: a Stack with one NIC on a
// channel endpoint (10.0.0.<id>/24), its notifier and TCP layer. Two of
// them over a link::CreateChannelPair make a network without fds.
#ifndef BENCH_TCP_PAIR_H_
#define BENCH_TCP_PAIR_H_

#include <cstdint>
#include <memory>

#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/notifier.h"

namespace netstack::bench {

struct StackSide {
  StackSide(buffer::ChunkPool& chunks, buffer::PacketPool& packets,
            link::LinkEndpoint& ep, uint8_t id, uint32_t max_backlog = 4096)
      : stack(stack::StackOptions{}, chunks, packets) {
    const stack::NicId nic = *stack.AddNic(&ep, "chan");
    (void)stack.AddAddress(nic, stack::Ipv4Cidr{Address(id), 24});
    tcp::TcpLayerOptions o;
    o.seed = id;
    o.max_backlog = max_backlog;
    tcp = std::make_unique<tcp::TcpLayer>(stack, chunks, packets, notifier, o);
  }
  static wire::Ipv4Address Address(uint8_t id) {
    return wire::Ipv4Address::FromU32(0x0a000000u | id);
  }
  stack::Stack stack;
  transport::Notifier notifier;
  std::unique_ptr<tcp::TcpLayer> tcp;
};

}  // namespace netstack::bench

#endif  // BENCH_TCP_PAIR_H_
