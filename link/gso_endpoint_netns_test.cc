// GsoEndpoint -> PacketEndpoint against the Linux kernel over a veth pair:
// 100 super-segments of 64 KiB leave as ~4,500 wire packets, a chain in
// one sendmmsg per 1024 packets. The "guest" namespace holds one end with
// 10.201.9.1 and its checksum offload off, so its TCP verifies every
// checksum; a raw socket there checks every frame too. The "host"
// namespace holds the end the endpoint binds to. Needs root.
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "link/fd_test_util.h"
#include "link/fd_util.h"
#include "link/gso_endpoint.h"
#include "link/gso_test_util.h"
#include "link/netns.h"
#include "link/packet_endpoint.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/tcp.h"

namespace netstack::link {
namespace {

using testing::SpreadPayload;
using testing::SuperSegmentSpec;
using testing::TestNetns;

constexpr char kGuestIf[] = "gso-guest";
constexpr char kHostIf[] = "gso-host";
const wire::Ipv4Address kKernelIp = wire::Ipv4Address::FromU32(0x0ac90901);
const wire::Ipv4Address kOurIp = wire::Ipv4Address::FromU32(0x0ac90902);
constexpr uint16_t kMss = 1460;
constexpr size_t kSuperSegments = 100;
// 65535 - 20 - 20: the largest payload whose IPv4 length covers it.
constexpr size_t kSuperPayload = 65495;
constexpr uint32_t kIsn = 0xfff0'0000;
constexpr uint8_t kTcp = static_cast<uint8_t>(wire::IpProtocol::kTcp);

// The kernel's TCP counters in a namespace (/proc/net/snmp, "Tcp:" lines).
std::map<std::string, uint64_t> TcpSnmp(TestNetns& ns) {
  std::string out;
  EXPECT_TRUE(ns.Exec("cat /proc/net/snmp", &out).ok()) << out;
  std::istringstream lines(out);
  std::string names;
  std::string values;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Tcp:", 0) != 0) continue;
    if (names.empty()) {
      names = line;
    } else {
      values = line;
    }
  }
  std::map<std::string, uint64_t> counters;
  std::istringstream n(names);
  std::istringstream v(values);
  std::string name;
  std::string value;
  while (n >> name && v >> value) {
    uint64_t x = 0;
    if (absl::SimpleAtoi(value, &x)) counters[name] = x;
  }
  return counters;
}

class GsoNetnsTest : public ::testing::Test {
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
    // Without this the veth marks our frames CHECKSUM_UNNECESSARY and the
    // guest's TCP would take any checksum.
    std::string out;
    ASSERT_TRUE(guest_
                    ->Exec(absl::StrCat("ethtool -K ", kGuestIf, " rx off"),
                           &out)
                    .ok())
        << out;
    ASSERT_TRUE(guest_->Ip(absl::StrCat("link set ", kGuestIf, " up")).ok());
    ASSERT_TRUE(host_->Ip(absl::StrCat("link set ", kHostIf, " up")).ok());

    PacketOptions o;
    o.interface = kHostIf;
    o.netns = host_->name();
    auto packet = PacketEndpoint::Open(o, chunks_);
    ASSERT_TRUE(packet.ok()) << packet.status();
    packet_ = packet->get();
    auto gso = GsoEndpoint::Create(std::move(*packet), packets_);
    ASSERT_TRUE(gso.ok()) << gso.status();
    ep_ = std::move(*gso);
    // The guest's RSTs go to a MAC it knows, without ARP.
    ASSERT_TRUE(guest_
                    ->Ip(absl::StrCat("neigh replace ", kOurIp.ToString(),
                                      " lladdr ",
                                      ep_->Capabilities().mac.ToString(),
                                      " dev ", kGuestIf, " nud permanent"))
                    .ok());
    OpenGuestSocket();
  }
  void TearDown() override {
    guest_sock_ = UniqueFd();
    ep_.reset();
    host_.reset();
    guest_.reset();
  }

  // A raw socket on the guest's end with room for every frame of a run.
  void OpenGuestSocket() {
    auto fd = OpenInNetns(guest_->name(), []() -> absl::StatusOr<int> {
      const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
      if (fd < 0) return ErrnoStatus(errno, "socket(AF_PACKET)");
      return fd;
    });
    ASSERT_TRUE(fd.ok()) << fd.status();
    guest_sock_ = UniqueFd(*fd);
    const int rcvbuf = 256 << 20;
    ASSERT_EQ(::setsockopt(guest_sock_.get(), SOL_SOCKET, SO_RCVBUFFORCE,
                           &rcvbuf, sizeof(rcvbuf)),
              0)
        << std::strerror(errno);
    auto ifindex = InterfaceIndex(guest_sock_.get(), kGuestIf);
    ASSERT_TRUE(ifindex.ok()) << ifindex.status();
    sockaddr_ll addr{};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_ALL);
    addr.sll_ifindex = *ifindex;
    ASSERT_EQ(::bind(guest_sock_.get(), reinterpret_cast<sockaddr*>(&addr),
                     sizeof(addr)),
              0)
        << std::strerror(errno);
  }

  wire::MacAddress GuestMac() {
    std::string out;
    EXPECT_TRUE(guest_
                    ->Exec(absl::StrCat("cat /sys/class/net/", kGuestIf,
                                        "/address"),
                           &out)
                    .ok());
    auto mac = wire::MacAddress::Parse(out.substr(0, 17));
    EXPECT_TRUE(mac.has_value()) << out;
    return mac.value_or(wire::MacAddress());
  }

  // Super-segment k of the run: 64 KiB of the shared payload at
  // kIsn + k * kSuperPayload.
  buffer::PacketPtr Super(size_t k,
                          const std::vector<buffer::PayloadView>& views) {
    SuperSegmentSpec spec;
    spec.mss = kMss;
    spec.src_mac = ep_->Capabilities().mac;
    spec.dst_mac = guest_mac_;
    spec.src4 = kOurIp;
    spec.dst4 = kKernelIp;
    spec.src_port = 40000;
    spec.dst_port = 9;  // nothing listens: the guest answers with RST
    spec.seq = static_cast<uint32_t>(kIsn + k * kSuperPayload);
    spec.ident = static_cast<uint16_t>(k * 45);
    return testing::MakeSuperSegment(packets_, spec, views);
  }

  // Hands `chain` to the endpoint until it is empty, waiting for the fd
  // when it pushes back; returns the Transmit calls made.
  size_t TransmitAll(buffer::PacketChain& chain) {
    size_t calls = 0;
    while (!chain.empty() && calls < 10'000) {
      ep_->Transmit(chain, absl::Now());
      ++calls;
      if (!chain.empty()) {
        pollfd p{ep_->WriteFd(), POLLOUT, 0};
        ::poll(&p, 1, 100);
      }
    }
    return calls;
  }

  // Reads every frame the guest received and checks our TCP packets:
  // addresses, both checksums, and the payload at the offset their seq
  // names. Returns the distinct seqs seen.
  std::set<uint32_t> ReadGuestFrames(size_t want,
                                     std::span<const uint8_t> payload) {
    std::set<uint32_t> seqs;
    std::vector<uint8_t> buf(65536);
    size_t bad = 0;
    while (seqs.size() < want && testing::WaitReadable(guest_sock_.get(),
                                                       2000)) {
      sockaddr_ll from{};
      socklen_t from_len = sizeof(from);
      const ssize_t n =
          ::recvfrom(guest_sock_.get(), buf.data(), buf.size(), MSG_DONTWAIT,
                     reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n <= 0) continue;
      if (from.sll_pkttype == PACKET_OUTGOING) continue;  // the guest's RSTs
      const std::span<const uint8_t> frame(buf.data(), static_cast<size_t>(n));
      const wire::EthernetFrame eth(frame);
      if (eth.Check() != wire::WireError::kOk || eth.Type() != 0x0800) {
        continue;
      }
      const wire::Ipv4Packet ip(eth.Payload());
      if (ip.Check() != wire::WireError::kOk || ip.Protocol() != kTcp ||
          ip.Source() != kOurIp) {
        continue;
      }
      const wire::TcpHeader tcp(ip.Payload());
      const uint16_t pseudo = wire::Ipv4PseudoHeaderSum(
          ip.Source(), ip.Destination(), kTcp,
          static_cast<uint32_t>(ip.Payload().size()));
      const size_t offset = (tcp.SeqNumber() - kIsn) % kSuperPayload;
      const bool ok =
          tcp.Check() == wire::WireError::kOk && ip.HeaderChecksumValid() &&
          tcp.ChecksumValid(pseudo) && eth.Destination() == guest_mac_ &&
          offset + tcp.Payload().size() <= payload.size() &&
          std::equal(tcp.Payload().begin(), tcp.Payload().end(),
                     payload.begin() + offset);
      if (!ok) {
        ++bad;
        continue;
      }
      seqs.insert(tcp.SeqNumber());
    }
    EXPECT_EQ(bad, 0u) << "frames with a bad header, checksum or payload";
    return seqs;
  }

  // One run: the chain is built by `enqueue` (one call per Transmit
  // batch), sent, and received. Prints and checks the figures.
  void Run(const char* what, size_t supers_per_transmit) {
    guest_mac_ = GuestMac();
    std::vector<buffer::ChunkRef> refs;
    const std::vector<uint8_t> bytes = [] {
      std::vector<uint8_t> b(kSuperPayload);
      for (size_t i = 0; i < b.size(); ++i) {
        b[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
      }
      return b;
    }();
    const std::vector<buffer::PayloadView> views =
        SpreadPayload(chunks_, bytes, 30001, 5, &refs);
    ASSERT_FALSE(views.empty());

    const auto snmp_before = TcpSnmp(*guest_);
    const LinkStats before = ep_->Stats();
    size_t transmit_calls = 0;
    for (size_t k = 0; k < kSuperSegments; k += supers_per_transmit) {
      buffer::PacketChain chain;
      for (size_t j = k; j < std::min(kSuperSegments, k + supers_per_transmit);
           ++j) {
        buffer::PacketPtr p = Super(j, views);
        ASSERT_NE(p, nullptr);
        chain.PushBack(std::move(p));
      }
      transmit_calls += TransmitAll(chain);
    }
    const LinkStats after = ep_->Stats();
    const uint64_t packets = after.tx_frames - before.tx_frames;
    const uint64_t syscalls = after.tx_syscalls - before.tx_syscalls;
    const size_t want = kSuperSegments * ((kSuperPayload + kMss - 1) / kMss);

    const std::set<uint32_t> seqs = ReadGuestFrames(want, bytes);
    const auto snmp_after = TcpSnmp(*guest_);
    const uint64_t in_segs = snmp_after.at("InSegs") - snmp_before.at("InSegs");
    const uint64_t csum_errors =
        snmp_after.at("InCsumErrors") - snmp_before.at("InCsumErrors");
    std::printf(
        "%s: %zu super-segments -> %llu packets in %llu sendmmsg calls "
        "(%zu Transmit calls, %.1f packets per call); guest: %zu frames "
        "checked, TCP InSegs +%llu, InCsumErrors +%llu\n",
        what, kSuperSegments, static_cast<unsigned long long>(packets),
        static_cast<unsigned long long>(syscalls), transmit_calls,
        syscalls == 0 ? 0.0 : static_cast<double>(packets) / syscalls,
        seqs.size(), static_cast<unsigned long long>(in_segs),
        static_cast<unsigned long long>(csum_errors));

    EXPECT_EQ(packets, want);
    EXPECT_EQ(after.tx_dropped, before.tx_dropped);
    EXPECT_EQ(ep_->gso_stats().failures(), 0u);
    EXPECT_EQ(ep_->gso_stats().packets_out, want);
    // One sendmmsg per Transmit of a chain (per kMaxTxBatch packets of
    // it), plus one per retry after the kernel pushed back: packets / 44
    // or fewer calls.
    const size_t per_chain = supers_per_transmit * want / kSuperSegments;
    const size_t batches_per_chain =
        (per_chain + PacketEndpoint::kMaxTxBatch - 1) /
        PacketEndpoint::kMaxTxBatch;
    const uint64_t pushed_back =
        packet_->fd_stats().tx_partial + packet_->fd_stats().tx_blocked;
    EXPECT_LE(syscalls, want / 44);
    EXPECT_LE(syscalls, kSuperSegments / supers_per_transmit *
                                batches_per_chain +
                            pushed_back);
    EXPECT_EQ(seqs.size(), want) << "not every packet reached the guest";
    EXPECT_EQ(in_segs, want);
    EXPECT_EQ(csum_errors, 0u);
  }

  buffer::ChunkPool chunks_{256};
  buffer::PacketPool packets_{8192};
  std::unique_ptr<TestNetns> guest_;
  std::unique_ptr<TestNetns> host_;
  PacketEndpoint* packet_ = nullptr;  // owned by ep_
  std::unique_ptr<GsoEndpoint> ep_;
  UniqueFd guest_sock_;
  wire::MacAddress guest_mac_;
};

TEST_F(GsoNetnsTest, OneChainOf100SuperSegmentsIsOneSendmmsgPer1024Packets) {
  Run("one chain", kSuperSegments);
}

TEST_F(GsoNetnsTest, OneSuperSegmentPerTransmitIsOneSendmmsgEach) {
  Run("one per Transmit", 1);
}

}  // namespace
}  // namespace netstack::link
