// PacketEndpoint against the Linux kernel over a veth pair: the "guest"
// namespace holds one end with 10.201.2.1 and the kernel's sockets; the
// "host" namespace holds the other end (no addresses, IPv6 off), where the
// endpoint binds as 10.201.2.2. Needs root.
#include "link/packet_endpoint.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "link/fd_test_util.h"
#include "link/fd_util.h"
#include "link/netns.h"
#include "link/vnet_header.h"
#include "link/vnet_header_test_util.h"
#include "netstack/wire/bytes.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"

namespace netstack::link {
namespace {

using testing::Bytes;
using testing::CapturedFrame;
using testing::CapturingReceiver;
using testing::Host;
using testing::TestNetns;

constexpr char kGuestIf[] = "nsv-guest";
constexpr char kHostIf[] = "nsv-host";
const wire::Ipv4Address kKernelIp = wire::Ipv4Address::FromU32(0x0ac90201);
const wire::Ipv4Address kOurIp = wire::Ipv4Address::FromU32(0x0ac90202);
constexpr uint16_t kKernelPort = 5555;
constexpr uint16_t kOurPort = 6666;

class PacketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::IsRoot()) << testing::kNeedRoot;
    auto guest = TestNetns::Create();
    ASSERT_TRUE(guest.ok()) << guest.status();
    guest_ = std::move(*guest);
    auto host = TestNetns::Create();
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = std::move(*host);
    ASSERT_TRUE(
        guest_
            ->Ip(absl::StrCat("link add ", kGuestIf, " type veth peer name ",
                              kHostIf, " netns ", host_->name()))
            .ok());
    ASSERT_TRUE(guest_
                    ->Ip(absl::StrCat("addr add ", kKernelIp.ToString(),
                                      "/24 dev ", kGuestIf))
                    .ok());
    ASSERT_TRUE(guest_->Ip(absl::StrCat("link set ", kGuestIf, " up")).ok());
    ASSERT_TRUE(host_->Ip(absl::StrCat("link set ", kHostIf, " up")).ok());
  }
  void TearDown() override {
    ep_.reset();
    host_.reset();
    guest_.reset();
  }

  void Open(PacketOptions o = {}) {
    o.interface = kHostIf;
    o.netns = host_->name();
    auto ep = PacketEndpoint::Open(o, chunks_);
    ASSERT_TRUE(ep.ok()) << ep.status();
    ep_ = std::move(*ep);
    ep_->Attach(&rx_);
  }

  wire::MacAddress MacOf(TestNetns& ns, const char* ifname) {
    std::string out;
    EXPECT_TRUE(
        ns.Exec(absl::StrCat("cat /sys/class/net/", ifname, "/address"), &out)
            .ok());
    auto mac = wire::MacAddress::Parse(out.substr(0, 17));
    EXPECT_TRUE(mac.has_value()) << out;
    return mac.value_or(wire::MacAddress());
  }
  Host Us() { return Host{ep_->Capabilities().mac, kOurIp}; }
  Host Kernel() { return Host{MacOf(*guest_, kGuestIf), kKernelIp}; }

  UniqueFd KernelSocket() {
    auto fd = testing::OpenUdpSocket(guest_->name(), kKernelIp, kKernelPort);
    EXPECT_TRUE(fd.ok()) << fd.status();
    return UniqueFd(fd.value_or(-1));
  }
  void AddStaticNeighbour() {
    ASSERT_TRUE(guest_
                    ->Ip(absl::StrCat("neigh replace ", kOurIp.ToString(),
                                      " lladdr ", Us().mac.ToString(), " dev ",
                                      kGuestIf, " nud permanent"))
                    .ok());
  }
  std::optional<size_t> WaitForUdp(const std::vector<uint8_t>& payload,
                                   size_t from = 0) {
    return testing::WaitForFrame(
        *ep_, rx_,
        [&](const CapturedFrame& f) {
          auto udp = testing::ParseUdpFrame(f.bytes);
          return udp && udp->payload == payload;
        },
        from);
  }
  // Drains what the kernel sent so far (e.g. nothing, or stray frames).
  void Drain() {
    while (testing::WaitReadable(ep_->ReadFd(), 50)) {
      ep_->OnReadable(absl::Now());
    }
  }

  buffer::ChunkPool chunks_{128};
  buffer::PacketPool packets_{2048};
  CapturingReceiver rx_;
  std::unique_ptr<TestNetns> guest_;
  std::unique_ptr<TestNetns> host_;
  std::unique_ptr<PacketEndpoint> ep_;
};

TEST_F(PacketTest, KernelResolvesUsWithArpThenUdpFlowsBothWays) {
  Open();
  // Our MAC is the interface's own.
  EXPECT_EQ(ep_->Capabilities().mac, MacOf(*host_, kHostIf));
  EXPECT_EQ(ep_->Capabilities().mtu, 1500u);
  const Host kernel = Kernel();
  UniqueFd sock = KernelSocket();

  ASSERT_TRUE(
      testing::SendUdp(sock.get(), kOurIp, kOurPort, Bytes("hello over veth"))
          .ok());
  auto arp_at = testing::WaitForFrame(*ep_, rx_, [&](const CapturedFrame& f) {
    auto arp = testing::ParseArpFrame(f.bytes);
    return arp && arp->operation == wire::ArpOperation::kRequest &&
           arp->target_ip == kOurIp;
  });
  ASSERT_TRUE(arp_at.has_value()) << "no ARP request from the kernel";
  EXPECT_EQ(testing::ParseArpFrame(rx_.frames[*arp_at].bytes)->sender_mac,
            kernel.mac);

  buffer::PacketChain chain;
  chain.PushBack(testing::MakeArpPacket(packets_, wire::ArpOperation::kReply,
                                        Us(), kernel, kernel.mac));
  ASSERT_EQ(ep_->Transmit(chain, absl::Now()), 1u);
  auto udp_at = WaitForUdp(Bytes("hello over veth"), *arp_at);
  ASSERT_TRUE(udp_at.has_value()) << "the kernel did not send after ARP";
  const CapturedFrame& f = rx_.frames[*udp_at];
  auto udp = testing::ParseUdpFrame(f.bytes);
  EXPECT_EQ(udp->eth.dst, Us().mac);
  // Across a veth the kernel leaves the UDP checksum partial: the field
  // holds the pseudo-header sum, and auxdata says TP_STATUS_CSUMNOTREADY.
  EXPECT_TRUE(f.checksum_partial);
  EXPECT_FALSE(f.checksum_verified);
  EXPECT_EQ(udp->checksum_field, udp->pseudo_header_sum);
  EXPECT_FALSE(udp->checksum_valid);

  std::string neigh;
  ASSERT_TRUE(guest_
                  ->Ip(absl::StrCat("neigh show ", kOurIp.ToString(), " dev ",
                                    kGuestIf),
                       &neigh)
                  .ok());
  EXPECT_NE(neigh.find(Us().mac.ToString()), std::string::npos) << neigh;
  EXPECT_NE(neigh.find("REACHABLE"), std::string::npos) << neigh;

  chain.PushBack(testing::MakeUdpPacket(packets_, chunks_, Us(), kernel,
                                        kOurPort, kKernelPort,
                                        Bytes("hello, guest kernel")));
  ASSERT_EQ(ep_->Transmit(chain, absl::Now()), 1u);
  wire::Ipv4Address from;
  auto got = testing::RecvUdp(sock.get(), 2000, &from);
  ASSERT_TRUE(got.has_value()) << "the kernel socket got nothing";
  EXPECT_EQ(*got, Bytes("hello, guest kernel"));
  EXPECT_EQ(from, kOurIp);
}

TEST_F(PacketTest, ChainOf50IsOneSendmmsg) {
  Open();
  const Host kernel = Kernel();
  UniqueFd sock = KernelSocket();
  testing::ChunkWriter writer(chunks_);
  buffer::PacketChain chain;
  for (int i = 0; i < 50; ++i) {
    chain.PushBack(testing::MakeUdpPacket(
        packets_, Us(), kernel, kOurPort, kKernelPort,
        writer.Write(Bytes(absl::StrCat("datagram ", i)))));
  }
  const LinkStats before = ep_->Stats();
  EXPECT_EQ(ep_->Transmit(chain, absl::Now()), 50u);
  EXPECT_TRUE(chain.empty());
  const LinkStats after = ep_->Stats();
  EXPECT_EQ(after.tx_syscalls - before.tx_syscalls, 1u);
  EXPECT_EQ(after.tx_frames - before.tx_frames, 50u);
  for (int i = 0; i < 50; ++i) {
    auto got = testing::RecvUdp(sock.get(), 2000);
    ASSERT_TRUE(got.has_value()) << "datagram " << i << " missing";
    EXPECT_EQ(*got, Bytes(absl::StrCat("datagram ", i)));
  }
  // Our own frames are not read back.
  Drain();
  for (const CapturedFrame& f : rx_.frames) {
    wire::EthernetFrame eth(f.bytes);
    ASSERT_EQ(eth.Check(), wire::WireError::kOk);
    EXPECT_NE(eth.Source(), Us().mac);
  }
  EXPECT_EQ(ep_->fd_stats().rx_outgoing_ignored, 0u);  // IGNORE_OUTGOING
}

TEST_F(PacketTest, BadPacketsAreDroppedWithoutSplittingTheBatch) {
  Open();
  const Host kernel = Kernel();
  UniqueFd sock = KernelSocket();
  testing::ChunkWriter writer(chunks_);
  buffer::PacketChain chain;
  for (int i = 0; i < 10; ++i) {
    if (i == 3) {
      buffer::PacketPtr runt = packets_.Allocate();
      ASSERT_TRUE(runt->headers().Prepend(13).has_value());
      chain.PushBack(std::move(runt));
    }
    if (i == 7) {  // 1501 bytes of IP: one more than the MTU
      chain.PushBack(testing::MakeUdpPacket(
          packets_, Us(), kernel, kOurPort, kKernelPort,
          writer.Write(std::vector<uint8_t>(1501 - 28, 'z'))));
    }
    chain.PushBack(
        testing::MakeUdpPacket(packets_, Us(), kernel, kOurPort, kKernelPort,
                               writer.Write(Bytes(absl::StrCat("good ", i)))));
  }
  EXPECT_EQ(ep_->Transmit(chain, absl::Now()), 10u);
  EXPECT_TRUE(chain.empty());
  EXPECT_EQ(ep_->Stats().tx_syscalls, 1u);
  EXPECT_EQ(ep_->Stats().tx_dropped, 2u);
  EXPECT_EQ(ep_->fd_stats().tx_runt, 1u);
  EXPECT_EQ(ep_->fd_stats().tx_oversize, 1u);
  for (int i = 0; i < 10; ++i) {
    auto got = testing::RecvUdp(sock.get(), 2000);
    ASSERT_TRUE(got.has_value()) << i;
    EXPECT_EQ(*got, Bytes(absl::StrCat("good ", i)));
  }
}

TEST_F(PacketTest, LongChainSplitsAtTheBatchLimit) {
  Open();
  const Host kernel = Kernel();
  testing::ChunkWriter writer(chunks_);
  const buffer::PayloadView payload = writer.Write(Bytes("x"));
  buffer::PacketChain chain;
  const size_t n = PacketEndpoint::kMaxTxBatch + 476;
  for (size_t i = 0; i < n; ++i) {
    chain.PushBack(testing::MakeUdpPacket(packets_, Us(), kernel, kOurPort,
                                          kKernelPort, payload));
  }
  EXPECT_EQ(ep_->Transmit(chain, absl::Now()), n);
  EXPECT_EQ(ep_->Stats().tx_syscalls, 2u);
  EXPECT_EQ(ep_->fd_stats().tx_partial, 0u);
  std::printf("sendmmsg: %zu frames in %llu calls; sndbuf granted %d\n", n,
              static_cast<unsigned long long>(ep_->Stats().tx_syscalls),
              ep_->sndbuf_bytes());
}

TEST_F(PacketTest, BatchOfFramesIsOneRecvmmsgIntoOneChunk) {
  Open();
  AddStaticNeighbour();
  UniqueFd sock = KernelSocket();
  rx_.keep_views = true;
  constexpr int kCount = 20;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(testing::SendUdp(sock.get(), kOurIp, kOurPort,
                                 Bytes(absl::StrCat("datagram ", i)))
                    .ok());
  }
  ASSERT_TRUE(testing::WaitReadable(ep_->ReadFd(), 2000));
  ep_->OnReadable(absl::Now());
  ASSERT_EQ(rx_.frames.size(), static_cast<size_t>(kCount));
  EXPECT_EQ(ep_->Stats().rx_syscalls, 1u);
  EXPECT_EQ(rx_.batches, 1u);
  const uint32_t slot = ep_->rx_slot_size();
  EXPECT_EQ(slot, 1536u);  // 6 + 1518, rounded to 64
  for (int i = 0; i < kCount; ++i) {
    const CapturedFrame& f = rx_.frames[i];
    EXPECT_EQ(f.view.chunk().get(), rx_.frames[0].view.chunk().get());
    EXPECT_EQ(f.view.offset(), i * slot + 6);
    auto udp = testing::ParseUdpFrame(f.bytes);
    ASSERT_TRUE(udp.has_value());
    EXPECT_EQ(udp->payload, Bytes(absl::StrCat("datagram ", i)));
    EXPECT_TRUE(f.checksum_partial);
  }
  EXPECT_EQ(ep_->fd_stats().rx_checksum_partial, static_cast<uint64_t>(kCount));
}

TEST_F(PacketTest, VlanTagFromAuxdataIsPutBack) {
  Open();
  // A tagged frame sent raw from the guest side. The receiving veth moves
  // the tag into skb metadata before packet sockets see the frame (this
  // kernel has no 8021q module, but that untagging is in the core), so
  // the endpoint learns it from auxdata and must put it back.
  std::vector<uint8_t> frame(64, 0x5a);
  Us().mac.CopyTo(&frame[0]);
  Kernel().mac.CopyTo(&frame[6]);
  const uint8_t tag_and_type[] = {0x81, 0x00, 0x20, 0x07, 0x88, 0xb5};
  std::memcpy(&frame[12], tag_and_type, sizeof(tag_and_type));
  auto raw = OpenInNetns(guest_->name(), []() -> absl::StatusOr<int> {
    const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd < 0) return ErrnoStatus(errno, "socket(AF_PACKET)");
    return fd;
  });
  ASSERT_TRUE(raw.ok()) << raw.status();
  UniqueFd raw_fd(*raw);
  auto ifindex = InterfaceIndex(raw_fd.get(), kGuestIf);
  ASSERT_TRUE(ifindex.ok()) << ifindex.status();
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = *ifindex;
  to.sll_halen = 6;
  ASSERT_EQ(::sendto(raw_fd.get(), frame.data(), frame.size(), 0,
                     reinterpret_cast<sockaddr*>(&to), sizeof(to)),
            static_cast<ssize_t>(frame.size()))
      << std::strerror(errno);
  auto at = testing::WaitForFrame(*ep_, rx_, [](const CapturedFrame& f) {
    wire::EthernetFrame eth(f.bytes);
    return eth.Check() == wire::WireError::kOk && eth.Type() == 0x88b5;
  });
  ASSERT_TRUE(at.has_value()) << "the tagged frame did not arrive";
  EXPECT_EQ(rx_.frames[*at].bytes, frame);  // byte for byte, tag included
  EXPECT_EQ(ep_->fd_stats().rx_vlan_reinserted, 1u);
}

TEST_F(PacketTest, VnetHeaderGivesTheSameChecksumStory) {
  PacketOptions o;
  o.vnet_hdr = true;
  Open(o);
  EXPECT_TRUE(ep_->Capabilities().vnet_hdr);
  AddStaticNeighbour();
  UniqueFd sock = KernelSocket();
  ASSERT_TRUE(
      testing::SendUdp(sock.get(), kOurIp, kOurPort, Bytes("vnet")).ok());
  auto at = WaitForUdp(Bytes("vnet"));
  ASSERT_TRUE(at.has_value());  // header stripped: the frame parses
  EXPECT_TRUE(rx_.frames[*at].checksum_partial);
  buffer::PacketChain chain;
  chain.PushBack(testing::MakeUdpPacket(packets_, chunks_, Us(), Kernel(),
                                        kOurPort, kKernelPort,
                                        Bytes("behind a vnet header")));
  ASSERT_EQ(ep_->Transmit(chain, absl::Now()), 1u);
  auto got = testing::RecvUdp(sock.get(), 2000);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, Bytes("behind a vnet header"));
}

// The peer kernel's GSO super-frames cross a veth whole (here UDP GSO,
// UDP_SEGMENT): MTU-sized slots cannot hold them, big slots can.
// A kernel peer's GSO super-frame (UDP_SEGMENT here; TSO is the same
// on a veth) crosses whole. MTU-sized slots take it through a spill chunk
// by default; 64 KiB slots take it directly; with oversized frames
// refused it is dropped and counted.
TEST_F(PacketTest, PeerGsoSuperFramesAreAcceptedByDefault) {
  struct Case {
    const char* name;
    uint32_t frame_size;
    bool accept_oversized;
    bool vnet_hdr;
  };
  for (const Case c : {Case{"default", 0, true, false},
                       Case{"default+vnet", 0, true, true},
                       Case{"64k slots", 65536, true, true},
                       Case{"refused", 0, false, false}}) {
    SCOPED_TRACE(c.name);
    PacketOptions o;
    o.rx_frame_size = c.frame_size;
    o.accept_oversized = c.accept_oversized;
    o.vnet_hdr = c.vnet_hdr;
    Open(o);
    AddStaticNeighbour();
    UniqueFd sock = KernelSocket();
    const int segment = 1000;
    ASSERT_EQ(::setsockopt(sock.get(), SOL_UDP, UDP_SEGMENT, &segment,
                           sizeof(segment)),
              0);
    std::vector<uint8_t> payload(10000);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = i * 7 + 1;
    // A small datagram first and after: the slots around the spill still
    // deliver their own frames.
    ASSERT_TRUE(testing::SendUdp(sock.get(), kOurIp, kOurPort,
                                 std::vector<uint8_t>(10, 'a'))
                    .ok());
    ASSERT_TRUE(testing::SendUdp(sock.get(), kOurIp, kOurPort, payload).ok());
    ASSERT_TRUE(testing::SendUdp(sock.get(), kOurIp, kOurPort,
                                 std::vector<uint8_t>(10, 'b'))
                    .ok());
    rx_.frames.clear();
    Drain();
    if (!c.accept_oversized) {
      EXPECT_EQ(ep_->fd_stats().rx_truncated, 1u);
      ASSERT_EQ(rx_.frames.size(), 2u);
      EXPECT_EQ(ep_->Stats().rx_dropped, 1u);
    } else {
      ASSERT_EQ(rx_.frames.size(), 3u);
      const auto& big = rx_.frames[1].bytes;
      ASSERT_EQ(big.size(), 14u + 20 + 8 + payload.size());
      // Every byte in place, across the slot/spill seam.
      EXPECT_TRUE(std::equal(payload.begin(), payload.end(),
                             big.begin() + 42));
      EXPECT_TRUE(rx_.frames[1].checksum_partial);
      EXPECT_EQ(rx_.frames[0].bytes.size(), 14u + 20 + 8 + 10);
      EXPECT_EQ(rx_.frames[2].bytes.size(), 14u + 20 + 8 + 10);
      EXPECT_EQ(ep_->fd_stats().rx_truncated, 0u);
      EXPECT_EQ(ep_->fd_stats().rx_spilled, c.frame_size == 0 ? 1u : 0u);
      EXPECT_EQ(ep_->Stats().rx_dropped, 0u);
    }
    ep_.reset();
  }
}

// A kernel UDP_SEGMENT send crosses the veth as one USO super-frame; with
// a virtio-net header its gso_size reaches the stack as
// InboundFrame::udp_gso_size (without one the frame is a plain datagram).
TEST_F(PacketTest, UsoSuperFrameCarriesItsGsoSize) {
  struct SizeReceiver : LinkReceiver {
    void DeliverFrames(std::span<InboundFrame> frames, Instant) override {
      for (const InboundFrame& f : frames) {
        sizes.push_back({f.frame.size(), f.udp_gso_size});
      }
    }
    std::vector<std::pair<size_t, uint16_t>> sizes;  // frame length, size
  };
  for (const bool vnet : {true, false}) {
    SCOPED_TRACE(vnet ? "vnet_hdr" : "no vnet_hdr");
    PacketOptions o;
    o.vnet_hdr = vnet;
    Open(o);
    SizeReceiver got;
    ep_->Attach(&got);
    AddStaticNeighbour();
    UniqueFd sock = KernelSocket();
    const int segment = 1000;
    ASSERT_EQ(::setsockopt(sock.get(), SOL_UDP, UDP_SEGMENT, &segment,
                           sizeof(segment)),
              0);
    ASSERT_TRUE(testing::SendUdp(sock.get(), kOurIp, kOurPort,
                                 std::vector<uint8_t>(3500, 'u'))
                    .ok());
    while (testing::WaitReadable(ep_->ReadFd(), 200)) {
      ep_->OnReadable(absl::Now());
    }
    ASSERT_EQ(got.sizes.size(), 1u);
    EXPECT_EQ(got.sizes[0].first, 14u + 20 + 8 + 3500);
    EXPECT_EQ(got.sizes[0].second, vnet ? 1000 : 0);
    ep_.reset();
  }
}

// PacketOptions::qdisc_bypass sets PACKET_QDISC_BYPASS on the socket (off
// by default), and frames still reach the peer.
TEST_F(PacketTest, QdiscBypassIsSetOnlyWhenAsked) {
  for (const bool bypass : {false, true}) {
    SCOPED_TRACE(bypass ? "bypass" : "default");
    PacketOptions o;
    o.qdisc_bypass = bypass;
    Open(o);
    int value = -1;
    socklen_t len = sizeof(value);
    ASSERT_EQ(::getsockopt(ep_->ReadFd(), SOL_PACKET, PACKET_QDISC_BYPASS,
                           &value, &len),
              0)
        << std::strerror(errno);
    EXPECT_EQ(value, bypass ? 1 : 0);
    UniqueFd sock = KernelSocket();
    const std::vector<uint8_t> payload(100, bypass ? 'b' : 'q');
    buffer::PacketChain chain;
    chain.PushBack(testing::MakeUdpPacket(packets_, chunks_, Us(), Kernel(),
                                           kOurPort, kKernelPort, payload));
    ASSERT_EQ(ep_->Transmit(chain, absl::Now()), 1u);
    ASSERT_TRUE(testing::WaitReadable(sock.get(), 2000));
    std::vector<uint8_t> got(200);
    EXPECT_EQ(::recv(sock.get(), got.data(), got.size(), 0),
              static_cast<ssize_t>(payload.size()));
    ep_.reset();
  }
}

TEST_F(PacketTest, ChosenMacIsUsed) {
  PacketOptions o;
  o.mac = wire::MacAddress::Parse("02:aa:bb:cc:dd:ee");
  Open(o);
  EXPECT_EQ(ep_->Capabilities().mac.ToString(), "02:aa:bb:cc:dd:ee");
  EXPECT_EQ(ep_->Name(), absl::StrCat("packet:", kHostIf, "@", host_->name()));
}

TEST_F(PacketTest, ClearErrors) {
  PacketOptions o;
  o.netns = host_->name();
  o.interface = "nope0";
  auto missing_if = PacketEndpoint::Open(o, chunks_);
  ASSERT_FALSE(missing_if.ok());
  EXPECT_TRUE(absl::IsNotFound(missing_if.status())) << missing_if.status();
  EXPECT_NE(std::string(missing_if.status().message())
                .find(absl::StrCat("interface 'nope0' in netns '",
                                   host_->name(), "' does not exist")),
            std::string::npos)
      << missing_if.status();

  o.interface = "lo";
  auto loopback = PacketEndpoint::Open(o, chunks_);
  ASSERT_FALSE(loopback.ok());
  EXPECT_NE(std::string(loopback.status().message()).find("not an Ethernet"),
            std::string::npos)
      << loopback.status();

  o.interface = kHostIf;
  o.netns = testing::MissingNetnsName();
  auto missing_ns = PacketEndpoint::Open(o, chunks_);
  ASSERT_FALSE(missing_ns.ok());
  EXPECT_TRUE(absl::IsNotFound(missing_ns.status())) << missing_ns.status();
  EXPECT_NE(std::string(missing_ns.status().message())
                .find(absl::StrCat("netns '", o.netns, "' does not exist")),
            std::string::npos)
      << missing_ns.status();
}

// --- Host GSO.

// A raw AF_PACKET socket with PACKET_VNET_HDR on `ifname` in `ns`: what
// the peer kernel receives, GSO metadata included.
UniqueFd VnetCaptureSocket(TestNetns& ns, const char* ifname) {
  auto fd = OpenInNetns(ns.name(), []() -> absl::StatusOr<int> {
    const int s = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (s < 0) return ErrnoStatus(errno, "socket(AF_PACKET)");
    return s;
  });
  EXPECT_TRUE(fd.ok()) << fd.status();
  UniqueFd sock(fd.value_or(-1));
  const int rcvbuf = 16 << 20;  // room for a whole segmented super-frame
  EXPECT_EQ(::setsockopt(sock.get(), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf,
                         sizeof(rcvbuf)),
            0);
  const int one = 1;
  EXPECT_EQ(::setsockopt(sock.get(), SOL_PACKET, PACKET_VNET_HDR, &one,
                         sizeof(one)),
            0);
  auto ifindex = InterfaceIndex(sock.get(), ifname);
  EXPECT_TRUE(ifindex.ok()) << ifindex.status();
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = ifindex.value_or(0);
  EXPECT_EQ(::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr),
                   sizeof(addr)),
            0);
  return sock;
}

struct VnetFrame {
  std::array<uint8_t, kVnetHdrLen> hdr;
  std::vector<uint8_t> frame;
};
// The next frame on `fd` longer than `min_len`, within `timeout_ms`.
std::optional<VnetFrame> RecvVnetFrame(int fd, size_t min_len,
                                       int timeout_ms = 2000) {
  std::vector<uint8_t> buf(kVnetHdrLen + 70000);
  while (testing::WaitReadable(fd, timeout_ms)) {
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < static_cast<ssize_t>(kVnetHdrLen + min_len)) continue;
    VnetFrame f;
    std::copy_n(buf.begin(), kVnetHdrLen, f.hdr.begin());
    f.frame.assign(buf.begin() + kVnetHdrLen, buf.begin() + n);
    return f;
  }
  return std::nullopt;
}

// The bytes a packet puts on the wire: headers then payload.
std::vector<uint8_t> Flatten(const buffer::PacketBuffer& p) {
  std::vector<uint8_t> out(p.headers().data().begin(),
                           p.headers().data().end());
  for (const buffer::PayloadView& v : p.payload()) {
    out.insert(out.end(), v.bytes().begin(), v.bytes().end());
  }
  return out;
}

// A 64 KiB TCP super-segment written through host GSO leaves in one
// sendmmsg, and the kernel segments it: the peer sees ceil(L / MSS) wire
// packets of at most 1514 bytes, sequence numbers MSS apart, IPv4 ids
// counting up, PSH only on the last, and the payload in order. (A frame
// from a packet socket is SKB_GSO_DODGY, and veth lacks GSO_ROBUST, so
// the kernel segments it in software before the veth, unlike its own
// GSO frames, which cross whole.)
TEST_F(PacketTest, HostGsoSuperSegmentIsSegmentedByTheKernel) {
  PacketOptions o;
  o.host_gso = true;
  Open(o);
  const LinkCapabilities caps = ep_->Capabilities();
  EXPECT_EQ(caps.gso_max_size, 65535u);
  EXPECT_TRUE(caps.vnet_hdr);
  EXPECT_EQ(ep_->rx_slot_size(), 65536u);
  UniqueFd capture = VnetCaptureSocket(*guest_, kGuestIf);
  {
    const bool v6 = false;
    testing::TcpGsoSpec spec;
    spec.src_mac = Us().mac;
    spec.dst_mac = Kernel().mac;
    spec.v6 = v6;
    spec.src4 = kOurIp;
    spec.dst4 = kKernelIp;
    spec.src6 = *wire::Ipv6Address::Parse("fd00:201:2::2");
    spec.dst6 = *wire::Ipv6Address::Parse("fd00:201:2::1");
    // The largest IP packet: 65535 bytes (IPv4 Total Length; IPv6 counts
    // the 40-byte header against gso_max_size too).
    const size_t ip_hlen = v6 ? 40 : 20;
    const size_t payload_len = 65535 - ip_hlen - 32;
    const std::vector<uint8_t> payload =
        testing::PatternBytes(payload_len, v6);
    buffer::PacketChain chain;
    buffer::PacketPtr p =
        testing::MakeTcpGsoPacket(packets_, chunks_, spec, payload);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(p->size(), 14u + 65535u);
    chain.PushBack(std::move(p));
    const LinkStats before = ep_->Stats();
    ASSERT_EQ(ep_->Transmit(chain, absl::Now()), 1u);
    EXPECT_EQ(ep_->Stats().tx_syscalls - before.tx_syscalls, 1u);
    EXPECT_EQ(ep_->Stats().tx_dropped, 0u);

    const size_t l4 = 14 + ip_hlen;
    std::vector<uint8_t> joined;
    size_t segments = 0;
    while (joined.size() < payload_len) {
      auto got = RecvVnetFrame(capture.get(), l4 + 32);
      ASSERT_TRUE(got.has_value())
          << "after " << segments << " segments, " << joined.size()
          << " bytes";
      const std::vector<uint8_t>& f = got->frame;
      if (wire::LoadBe16(&f[12]) != (v6 ? 0x86dd : 0x0800) ||
          f[v6 ? 14 + 6 : 14 + 9] != 6) {
        continue;  // not ours
      }
      ASSERT_LE(f.size(), 1514u);
      EXPECT_FALSE(ParseVnetHeader(got->hdr.data()).gso);
      const size_t seg_payload = f.size() - l4 - 32;
      EXPECT_EQ(seg_payload, std::min<size_t>(1448, payload_len -
                                                        joined.size()));
      EXPECT_EQ(wire::LoadBe32(&f[l4 + 4]), spec.seq + joined.size());
      const bool last = joined.size() + seg_payload == payload_len;
      EXPECT_EQ((f[l4 + 13] & 0x08) != 0, last) << segments;  // PSH
      if (!v6) {
        EXPECT_EQ(wire::LoadBe16(&f[14 + 2]), f.size() - 14);
        EXPECT_EQ(wire::LoadBe16(&f[14 + 4]),
                  static_cast<uint16_t>(spec.ipv4_ident + segments));
      } else {
        EXPECT_EQ(wire::LoadBe16(&f[14 + 4]), f.size() - l4);
      }
      joined.insert(joined.end(), f.begin() + l4 + 32, f.end());
      ++segments;
    }
    EXPECT_EQ(segments, (payload_len + 1447) / 1448);
    EXPECT_EQ(joined, payload);
    std::printf("host GSO %s: one %zu-byte frame -> %zu segments\n",
                v6 ? "TCPv6" : "TCPv4", size_t{14 + 65535}, segments);
  }
  // IPv6 below veth's gso_max_size (65536 bytes of frame): the frame
  // crosses whole and the peer sees TCPV6 GSO. (At 65535 bytes of IPv6
  // packet the kernel's software segmentation delivered only the last
  // segment on this kernel: see the host GSO notes in packet_endpoint.h.)
  testing::TcpGsoSpec spec;
  spec.src_mac = Us().mac;
  spec.dst_mac = Kernel().mac;
  spec.v6 = true;
  spec.src6 = *wire::Ipv6Address::Parse("fd00:201:2::2");
  spec.dst6 = *wire::Ipv6Address::Parse("fd00:201:2::1");
  buffer::PacketChain chain;
  chain.PushBack(testing::MakeTcpGsoPacket(
      packets_, chunks_, spec, testing::PatternBytes(65517 - 40 - 32, 9)));
  const std::vector<uint8_t> sent = Flatten(chain.front());
  ASSERT_EQ(ep_->Transmit(chain, absl::Now()), 1u);
  auto got = RecvVnetFrame(capture.get(), 1514);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->frame, sent);
  EXPECT_EQ(got->hdr[1], 4);  // VIRTIO_NET_HDR_GSO_TCPV6
  EXPECT_EQ(vnet::LoadLe16(&got->hdr[vnet::kGsoSizeOffset]), 1448);
  EXPECT_EQ(vnet::LoadLe16(&got->hdr[vnet::kCsumStartOffset]), 54);
  EXPECT_EQ(vnet::LoadLe16(&got->hdr[vnet::kCsumOffsetOffset]), 16);
  EXPECT_EQ(ep_->fd_stats().tx_gso, 2u);
}

// Plain and GSO packets mixed in one chain: one sendmmsg, each message
// with its own header; a GSO packet too big for gso_max_size, or sent
// without host GSO, is dropped and counted.
TEST_F(PacketTest, HostGsoMixedBatchAndLimits) {
  PacketOptions o;
  o.host_gso = true;
  o.gso_max_size = 30000;
  Open(o);
  UniqueFd sock = KernelSocket();
  UniqueFd capture = VnetCaptureSocket(*guest_, kGuestIf);
  testing::TcpGsoSpec spec;
  spec.src_mac = Us().mac;
  spec.dst_mac = Kernel().mac;
  spec.src4 = kOurIp;
  spec.dst4 = kKernelIp;
  buffer::PacketChain chain;
  chain.PushBack(testing::MakeUdpPacket(packets_, chunks_, Us(), Kernel(),
                                        kOurPort, kKernelPort, Bytes("one")));
  chain.PushBack(testing::MakeTcpGsoPacket(packets_, chunks_, spec,
                                           testing::PatternBytes(29948, 2)));
  chain.PushBack(testing::MakeTcpGsoPacket(  // IP 30001 bytes: too big
      packets_, chunks_, spec, testing::PatternBytes(29949, 3)));
  chain.PushBack(testing::MakeUdpPacket(packets_, chunks_, Us(), Kernel(),
                                        kOurPort, kKernelPort, Bytes("two")));
  EXPECT_EQ(ep_->Transmit(chain, absl::Now()), 3u);
  EXPECT_EQ(ep_->Stats().tx_syscalls, 1u);
  EXPECT_EQ(ep_->fd_stats().tx_oversize, 1u);
  EXPECT_EQ(ep_->fd_stats().tx_gso, 1u);
  // 30014 bytes: below veth's gso_max_size (65536), so the frame crosses
  // whole and the peer sees it as GSO.
  auto got = RecvVnetFrame(capture.get(), 1514);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->frame.size(), 14u + 30000u);
  EXPECT_TRUE(ParseVnetHeader(got->hdr.data()).gso);
  EXPECT_EQ(vnet::LoadLe16(&got->hdr[vnet::kGsoSizeOffset]), 1448);
  // The plain datagrams around it had zero headers and full checksums.
  EXPECT_EQ(testing::RecvUdp(sock.get(), 2000), Bytes("one"));
  EXPECT_EQ(testing::RecvUdp(sock.get(), 2000), Bytes("two"));

  // Without host GSO a super-segment is refused: its checksum is partial.
  ep_.reset();
  Open();
  EXPECT_EQ(ep_->Capabilities().gso_max_size, 0u);
  chain.PushBack(testing::MakeTcpGsoPacket(packets_, chunks_, spec,
                                           testing::PatternBytes(1000, 4)));
  EXPECT_EQ(ep_->Transmit(chain, absl::Now()), 0u);
  EXPECT_EQ(ep_->fd_stats().tx_bad_gso, 1u);
  EXPECT_EQ(ep_->Stats().tx_syscalls, 0u);
}

TEST_F(PacketTest, HostGsoOptionErrors) {
  PacketOptions o;
  o.interface = kHostIf;
  o.netns = host_->name();
  o.host_gso = true;
  for (const uint32_t bad : {0u, 65536u}) {
    o.gso_max_size = bad;
    auto ep = PacketEndpoint::Open(o, chunks_);
    ASSERT_FALSE(ep.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(ep.status())) << ep.status();
  }
}

// Receive: the peer kernel's TCP sends with TSO on (the veth default);
// its super-frames reach us whole, flagged GSO and checksum-partial. The
// stream runs kernel to kernel (a listener in our namespace on the same
// interface) while the endpoint reads alongside.
TEST_F(PacketTest, HostGsoReceivesKernelTsoFramesWhole) {
  PacketOptions o;
  o.host_gso = true;
  Open(o);
  ASSERT_TRUE(host_
                  ->Ip(absl::StrCat("addr add ", kOurIp.ToString(), "/24 dev ",
                                    kHostIf))
                  .ok());
  std::string features;
  ASSERT_TRUE(guest_->Exec(absl::StrCat("ethtool -k ", kGuestIf), &features)
                  .ok());
  ASSERT_NE(features.find("tcp-segmentation-offload: on"), std::string::npos)
      << features;

  auto tcp_socket = [](const std::string& ns) {
    auto fd = OpenInNetns(ns, []() -> absl::StatusOr<int> {
      const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (s < 0) return ErrnoStatus(errno, "socket(SOCK_STREAM)");
      return s;
    });
    EXPECT_TRUE(fd.ok()) << fd.status();
    return UniqueFd(fd.value_or(-1));
  };
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(kOurPort);
  server.sin_addr.s_addr = htonl(kOurIp.ToU32());
  UniqueFd listener = tcp_socket(host_->name());
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&server),
                   sizeof(server)),
            0)
      << std::strerror(errno);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  UniqueFd client = tcp_socket(guest_->name());
  ASSERT_EQ(::connect(client.get(), reinterpret_cast<sockaddr*>(&server),
                      sizeof(server)),
            0)
      << std::strerror(errno);
  UniqueFd conn(::accept(listener.get(), nullptr, nullptr));
  ASSERT_TRUE(conn.valid());
  const std::vector<uint8_t> data = testing::PatternBytes(512 * 1024, 5);
  size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = ::send(client.get(), data.data() + written,
                             data.size() - written, MSG_DONTWAIT);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK)
        << std::strerror(errno);
    std::vector<uint8_t> sink(1 << 20);  // let the window open
    while (::recv(conn.get(), sink.data(), sink.size(), MSG_DONTWAIT) > 0) {
    }
    testing::WaitReadable(conn.get(), 100);
  }
  Drain();
  size_t big = 0;
  size_t largest = 0;
  for (const CapturedFrame& f : rx_.frames) {
    largest = std::max(largest, f.bytes.size());
    if (f.bytes.size() > 1514) {
      ++big;
      EXPECT_TRUE(f.checksum_partial);
    }
  }
  EXPECT_GT(big, 0u);
  EXPECT_EQ(ep_->fd_stats().rx_gso, big);
  EXPECT_EQ(ep_->fd_stats().rx_truncated, 0u);
  std::printf("kernel TSO over veth: %zu frames, %zu above 1514 bytes, "
              "largest %zu\n",
              rx_.frames.size(), big, largest);
}

}  // namespace
}  // namespace netstack::link
