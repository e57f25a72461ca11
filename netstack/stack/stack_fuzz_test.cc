// Feeds tens of thousands of random and mutated frames through the stack
// (run it under --config=asan: ASan/UBSan watch every read). Checks that
// nothing crashes, every frame is accounted for (consumed, or dropped under
// a reason), reassembly memory stays under its limit, and the stack still
// answers a good ping afterwards.
#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/stack/test_frames.h"
#include "netstack/wire/bytes.h"

namespace netstack::stack {
namespace {

using testing::Peer;

constexpr uint16_t kIpv4 = 0x0800;
constexpr uint16_t kIpv6 = 0x86dd;

class Fuzzer {
 public:
  explicit Fuzzer(uint64_t seed) : rng_(seed) {
    our_mac_ = *wire::MacAddress::Parse("02:00:00:00:00:02");
    our4_ = *wire::Ipv4Address::Parse("10.9.0.2");
    our6_ = *wire::Ipv6Address::Parse("fd00:9::2");
  }

  uint32_t Below(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }
  bool Chance(uint32_t percent) { return Below(100) < percent; }

  Peer RandomPeer() {
    Peer p;
    p.mac.bytes = {0x02, 0, 0, 0, static_cast<uint8_t>(Below(4)), 1};
    p.ip4 = wire::Ipv4Address::FromU32(0x0a090000 | (1 + Below(8)));
    p.ip6 = *wire::Ipv6Address::Parse("fd00:9::1");
    p.ip6.bytes[15] = static_cast<uint8_t>(1 + Below(8));
    return p;
  }

  // A well-formed frame of a random kind.
  std::vector<std::vector<uint8_t>> ValidFrames() {
    const Peer p = RandomPeer();
    switch (Below(6)) {
      case 0:
        return {testing::ArpRequest(p, our4_)};
      case 1:
        return {testing::Icmpv6NeighborSolicitation(p, our6_)};
      case 2: {
        std::vector<std::vector<uint8_t>> out;
        for (auto& pkt : testing::Ipv4Packets(
                 p.ip4, our4_, 1, static_cast<uint16_t>(Below(65536)),
                 testing::Icmpv4Echo(1, 1, Below(3000)), 1500)) {
          out.push_back(testing::WithEthernet(p.mac, our_mac_, kIpv4, pkt));
        }
        return out;
      }
      case 3: {
        std::vector<std::vector<uint8_t>> out;
        for (auto& pkt : testing::Ipv6Packets(
                 p.ip6, our6_, 58, 64, static_cast<uint32_t>(rng_()),
                 testing::Icmpv6Echo(p.ip6, our6_, 1, 1, Below(3000)),
                 1500)) {
          out.push_back(testing::WithEthernet(p.mac, our_mac_, kIpv6, pkt));
        }
        return out;
      }
      case 4: {
        std::vector<uint8_t> udp(8 + Below(100), 0x55);
        wire::StoreBe16(&udp[4], static_cast<uint16_t>(udp.size()));
        wire::StoreBe16(&udp[6], 0);
        auto pkt = testing::Ipv4Packets(p.ip4, our4_, 17, 1, udp, 1500)[0];
        return {testing::WithEthernet(p.mac, our_mac_, kIpv4, pkt)};
      }
      default:
        return {RandomFragment(p)};
    }
  }

  // IPv4 or IPv6 fragments with hostile offsets: overlapping, oversized,
  // unaligned, floods of new identifications.
  std::vector<uint8_t> RandomFragment(const Peer& p) {
    std::vector<uint8_t> data(Below(1480) + 1, 0xaa);
    const uint16_t ident = static_cast<uint16_t>(Below(64));
    const uint32_t offset = Below(8) == 0 ? 65528 : Below(8192) * 8;
    if (Chance(50)) {
      auto pkt = testing::Ipv4Packets(p.ip4, our4_, 1, ident, data, 65535)[0];
      wire::StoreBe16(&pkt[6], static_cast<uint16_t>(
                                   (Chance(70) ? 0x2000 : 0) |
                                   ((offset / 8) & 0x1fff)));
      // Fix the header checksum so the fragment reaches the reassembler.
      wire::StoreBe16(&pkt[10], 0);
      wire::StoreBe16(&pkt[10], wire::InternetChecksum(
                                    std::span<const uint8_t>(pkt).first(20)));
      return testing::WithEthernet(p.mac, our_mac_, kIpv4, pkt);
    }
    auto pkts = testing::Ipv6Packets(p.ip6, our6_, 58, 64, ident,
                                     std::vector<uint8_t>(3000, 0xbb), 1500);
    auto pkt = pkts[Below(static_cast<uint32_t>(pkts.size()))];
    // Rewrite the fragment offset/M flag in the Fragment header.
    wire::StoreBe16(&pkt[42], static_cast<uint16_t>(
                                  (offset & 0xfff8) | (Chance(70) ? 1 : 0)));
    return testing::WithEthernet(p.mac, our_mac_, kIpv6, pkt);
  }

  void Mutate(std::vector<uint8_t>& f) {
    switch (Below(5)) {
      case 0:  // truncate
        f.resize(Below(static_cast<uint32_t>(f.size()) + 1));
        break;
      case 1:  // flip bits
        for (int i = 0, n = 1 + Below(8); i < n && !f.empty(); ++i) {
          f[Below(static_cast<uint32_t>(f.size()))] ^= 1u << Below(8);
        }
        break;
      case 2:  // corrupt a length field (IPv4 total length / IPv6 payload)
        if (f.size() > 20) {
          wire::StoreBe16(&f[f[12] == 0x86 ? 18 : 16],
                          static_cast<uint16_t>(rng_()));
        }
        break;
      case 3:  // IHL / data offset nibble
        if (f.size() > 14) f[14] = static_cast<uint8_t>((f[14] & 0xf0) | Below(16));
        break;
      default:  // append junk
        for (int i = 0, n = Below(64); i < n; ++i) {
          f.push_back(static_cast<uint8_t>(rng_()));
        }
    }
  }

  std::vector<uint8_t> RandomBytes() {
    std::vector<uint8_t> f(Below(1600));
    for (auto& b : f) b = static_cast<uint8_t>(rng_());
    if (f.size() >= 14 && Chance(50)) {
      // Aim at us half the time so the upper layers see garbage too.
      std::copy(our_mac_.bytes.begin(), our_mac_.bytes.end(), f.begin());
      f[12] = Chance(50) ? 0x08 : 0x86;
      f[13] = f[12] == 0x08 ? (Chance(50) ? 0x00 : 0x06) : 0xdd;
    }
    return f;
  }

  std::mt19937_64 rng_;
  wire::MacAddress our_mac_;
  wire::Ipv4Address our4_;
  wire::Ipv6Address our6_;
};

TEST(StackFuzzTest, RandomAndMutatedFramesAreAllAccountedFor) {
  buffer::ChunkPool chunks(1024);
  buffer::PacketPool packets(8192);
  link::LinkCapabilities caps;
  caps.mtu = 1500;
  caps.mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
  FakeLink link(chunks, caps);
  link.set_record(false);
  StackOptions options;
  options.reassembly.memory_limit_bytes = size_t{2} << 20;  // 32 datagrams
  {
    Stack stack(options, chunks, packets);
    const NicId nic = *stack.AddNic(&link, "fuzz0");
    ASSERT_TRUE(stack.AddAddress(nic, *ParseIpv4Cidr("10.9.0.2/24")).ok());
    ASSERT_TRUE(stack.AddAddress(nic, *ParseIpv6Cidr("fd00:9::2/64")).ok());

    Fuzzer fuzz(20261129);
    Instant now = absl::UnixEpoch() + absl::Seconds(1);
    constexpr int kFrames = 30000;
    int injected = 0;
    std::vector<std::vector<uint8_t>> batch;
    while (injected < kFrames) {
      batch.clear();
      const int n = 1 + fuzz.Below(32);
      while (static_cast<int>(batch.size()) < n) {
        const uint32_t kind = fuzz.Below(10);
        if (kind < 3) {
          batch.push_back(fuzz.RandomBytes());
        } else if (kind < 5) {
          for (auto& f : fuzz.ValidFrames()) batch.push_back(std::move(f));
        } else if (kind < 7) {
          batch.push_back(fuzz.RandomFragment(fuzz.RandomPeer()));
        } else {
          auto frames = fuzz.ValidFrames();
          for (auto& f : frames) {
            fuzz.Mutate(f);
            batch.push_back(std::move(f));
          }
        }
      }
      link.Inject(batch, now);
      injected += static_cast<int>(batch.size());
      now += absl::Milliseconds(fuzz.Below(50));
      if (fuzz.Chance(20)) stack.Poll(now);
      ASSERT_LE(stack.reassembly_stats().bytes_held,
                options.reassembly.memory_limit_bytes);
    }
    stack.Poll(now + absl::Seconds(120));  // expire everything

    const StackCounters& c = stack.counters();
    EXPECT_EQ(c.rx_frames, static_cast<uint64_t>(injected));
    EXPECT_EQ(c.rx_frames, c.rx_consumed + c.rx_dropped_frames);
    EXPECT_EQ(c.RxDrops(), c.rx_dropped_frames);
    EXPECT_GT(c.rx_dropped_frames, static_cast<uint64_t>(injected) / 4);
    EXPECT_GT(c.icmpv4_echo_replies_sent, 100u);
    EXPECT_GT(c.ipv4_reassembled + c.ipv6_reassembled, 10u);
    EXPECT_LE(stack.reassembly_stats().peak_bytes_held,
              options.reassembly.memory_limit_bytes);
    EXPECT_EQ(stack.reassembly_stats().bytes_held, 0u);
    std::fprintf(stderr, "fuzz: %d frames\n%s", injected,
                 stack.FormatCounters().c_str());

    // Still healthy: a clean ping is answered.
    link.set_record(true);
    Peer peer;
    peer.mac = *wire::MacAddress::Parse("02:00:00:00:00:01");
    peer.ip4 = *wire::Ipv4Address::Parse("10.9.0.1");
    link.Inject(testing::ArpRequest(peer, *wire::Ipv4Address::Parse("10.9.0.2")), now);
    auto pkt = testing::Ipv4Packets(peer.ip4, *wire::Ipv4Address::Parse("10.9.0.2"),
                                    1, 4242, testing::Icmpv4Echo(1, 1, 32), 1500)[0];
    link.sent.clear();
    link.Inject(testing::WithEthernet(peer.mac, caps.mac, kIpv4, pkt), now);
    ASSERT_EQ(link.sent.size(), 1u);
    EXPECT_EQ(link.sent[0][14 + 20], 0);  // echo reply
  }
  EXPECT_EQ(packets.stats().in_use, 0u);
  EXPECT_EQ(chunks.stats().in_use, 0u);
}

}  // namespace
}  // namespace netstack::stack
