// Once a flow is open and warm, relaying datagrams both ways does not
// touch the heap: the guest's payload goes to the host socket by sendmsg
// straight from the received chunk, and the host's answers are read into
// pooled chunks and sent as views in pooled packets. (Its own binary:
// alloc_counter replaces the global operator new.)
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"
#include "netstack/backend/udp_flows.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/ip/alloc_counter.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/test_frames.h"
#include "netstack/udp/udp_test_fixture.h"

namespace netstack::backend {
namespace {

using ip::testing::HeapAllocations;
using transport::IpAddress;
using transport::SocketAddress;

class UdpFlowsAllocTest : public udp::testing::UdpFixture {
 protected:
  UdpFlowsAllocTest() {
    loop_ = std::move(*eventloop::EventLoop::Create());
    now_ = loop_->Now();
    EXPECT_TRUE(stack_->AddAddress(nic_, stack::Ipv4Cidr{lo_.v4(), 32}).ok());
    LearnPeer();
    link_->set_record(false);
    table_ = std::make_unique<UdpFlowTable>(*stack_, *udp_, chunks_, packets_,
                                            *loop_, UdpFlowOptions{});
    server_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_storage ss;
    socklen_t len = ToSockaddr(SocketAddress{lo_, 0}, ss);
    EXPECT_EQ(bind(server_, reinterpret_cast<sockaddr*>(&ss), len), 0);
    len = sizeof(ss);
    getsockname(server_, reinterpret_cast<sockaddr*>(&ss), &len);
    server_addr_ = *FromSockaddr(ss, len);
  }
  ~UdpFlowsAllocTest() override { close(server_); }

  link::InboundFrame Frame(size_t payload_len) {
    const std::vector<uint8_t> payload(payload_len, 0x42);
    const auto packets = stack::testing::Ipv4Packets(
        peer_.ip4, lo_.v4(), 17, 1,
        udp::testing::UdpDatagram(Peer4(6000), server_addr_, payload), 1500);
    const auto frame = stack::testing::WithEthernet(
        peer_.mac, our_mac_, udp::testing::kEtherIpv4, packets[0]);
    buffer::ChunkRef chunk = chunks_.Allocate();
    std::memcpy(chunk->mutable_data().data(), frame.data(), frame.size());
    link::InboundFrame in;
    in.frame = buffer::PayloadView(std::move(chunk), 0,
                                   static_cast<uint32_t>(frame.size()));
    return in;
  }

  IpAddress lo_ = *IpAddress::Parse("127.0.0.1");
  std::unique_ptr<eventloop::EventLoop> loop_;
  std::unique_ptr<UdpFlowTable> table_;
  int server_ = -1;
  SocketAddress server_addr_;
};

TEST_F(UdpFlowsAllocTest, RelayingBothWaysDoesNotAllocate) {
  link::InboundFrame batch[8];
  for (auto& f : batch) f = Frame(1000);
  uint8_t buf[2048];
  sockaddr_storage from;
  socklen_t from_len = sizeof(from);
  bool ok = true;
  auto round = [&] {
    const uint64_t to_guest = table_->counters().datagrams_to_guest;
    link_->Deliver(batch, now_);
    // The host server echoes each one.
    for (size_t i = 0; i < std::size(batch); ++i) {
      pollfd p{server_, POLLIN, 0};
      if (poll(&p, 1, 2000) != 1) { ok = false; return; }
      from_len = sizeof(from);
      const ssize_t n = recvfrom(server_, buf, sizeof(buf), 0,
                                 reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n != 1000) { ok = false; return; }
      sendto(server_, buf, static_cast<size_t>(n), 0,
             reinterpret_cast<sockaddr*>(&from), from_len);
    }
    for (int turn = 0; turn < 200 && table_->counters().datagrams_to_guest <
                                         to_guest + std::size(batch);
         ++turn) {
      (void)loop_->RunOnce(absl::Milliseconds(10));
    }
    stack_->Flush(now_);
    if (table_->counters().datagrams_to_guest != to_guest + std::size(batch)) {
      ok = false;
    }
  };
  round();  // warm-up: the flow, its socket, the pools
  round();
  ASSERT_TRUE(ok);
  const uint64_t before = HeapAllocations();
  for (int i = 0; i < 50; ++i) round();
  const uint64_t allocations = HeapAllocations() - before;
  ASSERT_TRUE(ok);
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(table_->counters().opened, 1u);
  EXPECT_EQ(table_->counters().datagrams_to_host, 52u * 8u);
  EXPECT_EQ(table_->counters().datagrams_to_guest, 52u * 8u);
}


// The same with the turn's datagrams coalesced (UdpFlowOptions::coalesce,
// as the Backend runs it): each batch leaves as one UDP_SEGMENT message
// from the flow's backlog, and a USO super-frame from the guest as one
// UDP_SEGMENT send; the host's replies come back by recvmmsg.
TEST_F(UdpFlowsAllocTest, CoalescedAndSuperDatagramsDoNotAllocate) {
  UdpFlowOptions o;
  o.coalesce = true;
  table_.reset();
  table_ = std::make_unique<UdpFlowTable>(*stack_, *udp_, chunks_, packets_,
                                          *loop_, o);
  link::InboundFrame batch[9];
  for (size_t i = 0; i < 8; ++i) batch[i] = Frame(1000);
  // A USO super-frame: 4 datagrams of 250 bytes under one UDP header.
  batch[8] = Frame(1000);
  batch[8].udp_gso_size = 250;
  batch[8].checksum_partial = true;
  uint8_t buf[2048];
  sockaddr_storage from;
  socklen_t from_len = sizeof(from);
  bool ok = true;
  constexpr size_t kDatagrams = 8 + 4;
  auto round = [&] {
    const uint64_t to_guest = table_->counters().datagrams_to_guest;
    link_->Deliver(batch, now_);
    (void)loop_->RunOnce(absl::ZeroDuration());  // the turn's end: sent
    for (size_t i = 0; i < kDatagrams; ++i) {
      pollfd p{server_, POLLIN, 0};
      if (poll(&p, 1, 2000) != 1) { ok = false; return; }
      from_len = sizeof(from);
      const ssize_t n = recvfrom(server_, buf, sizeof(buf), 0,
                                 reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n != (i < 8 ? 1000 : 250)) { ok = false; return; }
      sendto(server_, buf, static_cast<size_t>(n), 0,
             reinterpret_cast<sockaddr*>(&from), from_len);
    }
    for (int turn = 0; turn < 200 && table_->counters().datagrams_to_guest <
                                         to_guest + kDatagrams;
         ++turn) {
      (void)loop_->RunOnce(absl::Milliseconds(10));
    }
    stack_->Flush(now_);
    if (table_->counters().datagrams_to_guest != to_guest + kDatagrams) {
      ok = false;
    }
  };
  round();
  round();
  ASSERT_TRUE(ok);
  const uint64_t before = HeapAllocations();
  for (int i = 0; i < 50; ++i) round();
  const uint64_t allocations = HeapAllocations() - before;
  ASSERT_TRUE(ok);
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(table_->counters().datagrams_to_host, 52u * kDatagrams);
  // Each round: the 8 as one message, the super-datagram as another.
  EXPECT_EQ(table_->counters().to_host_coalesced, 52u);
  EXPECT_EQ(table_->counters().to_host_segmented, 52u);
}

// USO toward the guest (issue #34): on a link that takes UDP super-
// datagrams, a run of plain datagrams of one recvmmsg and a UDP_GRO read
// each leave as ONE super-frame, of views, with no allocation either.
class UdpUsoAllocTest : public ::testing::Test {
 protected:
  UdpUsoAllocTest() {
    loop_ = std::move(*eventloop::EventLoop::Create());
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.gso_max_size = 65535;
    caps.udp_gso = true;
    caps.mac = our_mac_;
    link_ = std::make_unique<stack::FakeLink>(chunks_, caps);
    stack_ = std::make_unique<stack::Stack>(stack::StackOptions{}, chunks_,
                                            packets_);
    const stack::NicId nic = *stack_->AddNic(link_.get(), "uso0");
    EXPECT_TRUE(stack_->AddAddress(nic, *stack::ParseIpv4Cidr("10.9.0.2/24")).ok());
    EXPECT_TRUE(stack_->AddAddress(nic, stack::Ipv4Cidr{lo_.v4(), 32}).ok());
    udp_ = std::make_unique<udp::UdpLayer>(*stack_, chunks_, packets_,
                                           notifier_, 7);
    peer_.mac = *wire::MacAddress::Parse("02:00:00:00:00:01");
    peer_.ip4 = *wire::Ipv4Address::Parse("10.9.0.1");
    link_->Inject(stack::testing::ArpRequest(
                      peer_, *wire::Ipv4Address::Parse("10.9.0.2")),
                  loop_->Now());
    link_->set_record(false);
    table_ = std::make_unique<UdpFlowTable>(*stack_, *udp_, chunks_, packets_,
                                            *loop_, UdpFlowOptions{});
    server_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_storage ss;
    socklen_t len = ToSockaddr(SocketAddress{lo_, 0}, ss);
    EXPECT_EQ(bind(server_, reinterpret_cast<sockaddr*>(&ss), len), 0);
    len = sizeof(ss);
    getsockname(server_, reinterpret_cast<sockaddr*>(&ss), &len);
    server_addr_ = *FromSockaddr(ss, len);
  }
  ~UdpUsoAllocTest() override { close(server_); }

  IpAddress lo_ = *IpAddress::Parse("127.0.0.1");
  wire::MacAddress our_mac_ = *wire::MacAddress::Parse("02:00:00:00:00:02");
  stack::testing::Peer peer_;
  buffer::ChunkPool chunks_{1024};
  buffer::PacketPool packets_{1024};
  transport::Notifier notifier_;
  std::unique_ptr<eventloop::EventLoop> loop_;
  std::unique_ptr<stack::FakeLink> link_;
  std::unique_ptr<stack::Stack> stack_;
  std::unique_ptr<udp::UdpLayer> udp_;
  std::unique_ptr<UdpFlowTable> table_;
  int server_ = -1;
  SocketAddress server_addr_;
};

TEST_F(UdpUsoAllocTest, SuperFramesToTheGuestDoNotAllocate) {
  // The guest's datagram opens the flow; the server learns its address.
  const auto packets = stack::testing::Ipv4Packets(
      peer_.ip4, lo_.v4(), 17, 1,
      udp::testing::UdpDatagram(SocketAddress{IpAddress(peer_.ip4), 6000},
                                server_addr_, udp::testing::Bytes("hi")),
      1500);
  link_->Inject(stack::testing::WithEthernet(peer_.mac, our_mac_,
                                             udp::testing::kEtherIpv4,
                                             packets[0]),
                loop_->Now());
  uint8_t buf[2048];
  sockaddr_storage flow;
  socklen_t flow_len = sizeof(flow);
  ASSERT_EQ(recvfrom(server_, buf, sizeof(buf), 0,
                     reinterpret_cast<sockaddr*>(&flow), &flow_len),
            2);
  std::memset(buf, 0x42, sizeof(buf));
  // 4 datagrams of 250 bytes in one UDP_SEGMENT send: one GRO read.
  alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(uint16_t))] = {};
  iovec iov{buf, 1000};
  msghdr m{};
  m.msg_name = &flow;
  m.msg_namelen = flow_len;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_UDP;
  c->cmsg_type = UDP_SEGMENT;
  c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  const uint16_t segment = 250;
  std::memcpy(CMSG_DATA(c), &segment, sizeof(segment));
  constexpr size_t kDatagrams = 8 + 4;
  bool ok = true;
  auto round = [&] {
    const uint64_t to_guest = table_->counters().datagrams_to_guest;
    // 8 plain datagrams of 1000 bytes, then the GRO'd 4 x 250.
    for (int i = 0; i < 8; ++i) {
      if (sendto(server_, buf, 1000, 0, reinterpret_cast<sockaddr*>(&flow),
                 flow_len) != 1000) {
        ok = false;
      }
    }
    if (sendmsg(server_, &m, 0) != 1000) ok = false;
    for (int turn = 0; turn < 200 && table_->counters().datagrams_to_guest <
                                         to_guest + kDatagrams;
         ++turn) {
      (void)loop_->RunOnce(absl::Milliseconds(10));
    }
    stack_->Flush(loop_->Now());
    if (table_->counters().datagrams_to_guest != to_guest + kDatagrams) {
      ok = false;
    }
  };
  round();
  round();
  ASSERT_TRUE(ok);
  const uint64_t uso_before = table_->counters().to_guest_uso;
  const uint64_t frames_before = link_->Stats().tx_frames;
  const uint64_t before = HeapAllocations();
  for (int i = 0; i < 50; ++i) round();
  const uint64_t allocations = HeapAllocations() - before;
  ASSERT_TRUE(ok);
  EXPECT_EQ(allocations, 0u);
  // Each round: the 8 as one super-frame of 8 views, the GRO read as one.
  EXPECT_EQ(table_->counters().to_guest_uso - uso_before, 100u);
  EXPECT_EQ(link_->Stats().tx_frames - frames_before, 100u);
}
}  // namespace
}  // namespace netstack::backend
