#include "fuzz/fuzz_frames.h"

#include "netstack/stack/test_frames.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"

namespace netstack::fuzz {

namespace {
constexpr uint16_t kEthIpv4 = 0x0800;
constexpr uint16_t kEthIpv6 = 0x86dd;
}  // namespace

void FillL4Checksum(std::vector<uint8_t>& l4, uint8_t proto,
                    uint16_t pseudo_sum) {
  size_t at;
  if (proto == 6) {
    at = 16;
  } else if (proto == 17) {
    at = 6;
  } else if (proto == 58) {
    at = 2;
  } else {
    return;
  }
  if (l4.size() < at + 2) return;
  wire::StoreBe16(&l4[at], 0);
  wire::ChecksumAccumulator acc;
  acc.AddFolded(pseudo_sum);
  acc.Add(l4);
  uint16_t sum = acc.Checksum();
  if (proto == 17 && sum == 0) sum = 0xffff;
  wire::StoreBe16(&l4[at], sum);
}

std::vector<uint8_t> Ipv4Frame(const wire::MacAddress& src_mac,
                               const wire::MacAddress& dst_mac,
                               const wire::Ipv4Address& src,
                               const wire::Ipv4Address& dst, uint8_t proto,
                               std::vector<uint8_t> l4, uint16_t ident) {
  FillL4Checksum(l4, proto,
                 wire::Ipv4PseudoHeaderSum(src, dst, proto,
                                           static_cast<uint32_t>(l4.size())));
  auto pkts = stack::testing::Ipv4Packets(src, dst, proto, ident, l4, 65535);
  return stack::testing::WithEthernet(src_mac, dst_mac, kEthIpv4, pkts.front());
}

std::vector<uint8_t> Ipv6Frame(const wire::MacAddress& src_mac,
                               const wire::MacAddress& dst_mac,
                               const wire::Ipv6Address& src,
                               const wire::Ipv6Address& dst, uint8_t proto,
                               uint8_t hop_limit, std::vector<uint8_t> l4,
                               uint16_t ident) {
  FillL4Checksum(l4, proto,
                 wire::Ipv6PseudoHeaderSum(src, dst, proto,
                                           static_cast<uint32_t>(l4.size())));
  auto pkts = stack::testing::Ipv6Packets(src, dst, proto, hop_limit, ident,
                                          l4, 65535);
  return stack::testing::WithEthernet(src_mac, dst_mac, kEthIpv6, pkts.front());
}

}  // namespace netstack::fuzz
