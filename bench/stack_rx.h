// Shared set-up of the receive-path benchmarks: a stack on a FakeLink that
// has already resolved its peer, and a batch of ICMP echo requests in a
// chunk, ready to be delivered again and again without copying.
#ifndef NETSTACK_BENCH_STACK_RX_H_
#define NETSTACK_BENCH_STACK_RX_H_

#include <cstring>
#include <memory>
#include <vector>

#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/stack/test_frames.h"

namespace netstack::bench {

class StackRxFixture {
 public:
  // `family` 4 or 6; `batch` frames per delivery; `data` echo bytes.
  StackRxFixture(int family, size_t batch, size_t data = 56)
      : chunks_(256), packets_(4096) {
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
    link_ = std::make_unique<stack::FakeLink>(chunks_, caps);
    link_->set_record(false);
    // Not a runtime (netstack/runtime): the Stack's receive path alone, on
    // purpose, with no TCP, UDP or loop in the figure.
    stack_ = std::make_unique<stack::Stack>(stack::StackOptions{}, chunks_,
                                            packets_);
    const auto nic = *stack_->AddNic(link_.get(), "bench0");
    (void)stack_->AddAddress(nic, *stack::ParseIpv4Cidr("10.9.0.2/24"));
    (void)stack_->AddAddress(nic, *stack::ParseIpv6Cidr("fd00:9::2/64"));
    stack::testing::Peer peer;
    peer.mac = *wire::MacAddress::Parse("02:00:00:00:00:01");
    peer.ip4 = *wire::Ipv4Address::Parse("10.9.0.1");
    peer.ip6 = *wire::Ipv6Address::Parse("fd00:9::1");
    const auto our4 = *wire::Ipv4Address::Parse("10.9.0.2");
    const auto our6 = *wire::Ipv6Address::Parse("fd00:9::2");
    // Resolve the peer first, as the kernel's ARP/NS would.
    link_->Inject(stack::testing::ArpRequest(peer, our4), now_);
    link_->Inject(stack::testing::Icmpv6NeighborSolicitation(peer, our6), now_);
    std::vector<uint8_t> frame;
    if (family == 4) {
      auto pkt = stack::testing::Ipv4Packets(
          peer.ip4, our4, 1, 1, stack::testing::Icmpv4Echo(1, 1, data),
          1500)[0];
      frame = stack::testing::WithEthernet(peer.mac, caps.mac, 0x0800, pkt);
    } else {
      auto pkt = stack::testing::Ipv6Packets(
          peer.ip6, our6, 58, 64, 0,
          stack::testing::Icmpv6Echo(peer.ip6, our6, 1, 1, data), 1500)[0];
      frame = stack::testing::WithEthernet(peer.mac, caps.mac, 0x86dd, pkt);
    }
    buffer::ChunkRef chunk = chunks_.Allocate();
    std::memcpy(chunk->mutable_data().data(), frame.data(), frame.size());
    frames_.resize(batch);
    for (auto& f : frames_) {
      f.frame = buffer::PayloadView(chunk, 0,
                                    static_cast<uint32_t>(frame.size()));
    }
  }

  // One batch through the stack: parse, demux, echo reply, transmit.
  void RunBatch() { link_->Deliver(frames_, now_); }

  const stack::StackCounters& counters() const { return stack_->counters(); }

 private:
  buffer::ChunkPool chunks_;
  buffer::PacketPool packets_;
  std::unique_ptr<stack::FakeLink> link_;
  std::unique_ptr<stack::Stack> stack_;
  std::vector<link::InboundFrame> frames_;
  Instant now_ = absl::UnixEpoch() + absl::Seconds(1);
};

}  // namespace netstack::bench

#endif  // NETSTACK_BENCH_STACK_RX_H_
