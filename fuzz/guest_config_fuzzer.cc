// The backend's guest configuration services (netstack/backend/
// guest_config_services.h: the DHCPv4 server, router advertisements and
// the stateless DHCPv6 server) behind a real Stack on a FakeLink, as a
// guest reaches them. An input is a script of steps, each one of:
//   DHCPv4     a length-prefixed message body, in UDP 68 -> 67 from
//              0.0.0.0 or the guest's address, to the broadcast or the
//              gateway address;
//   DHCPv6     a length-prefixed message body, in UDP 546 -> 547 from the
//              guest's link-local address to ff02::1:2;
//   RS         a Router Solicitation: type 133, code 0, then the fuzzer's
//              bytes (reserved field and options), hop limit 255 or the
//              fuzzer's, from the guest's link-local or the unspecified
//              address, to ff02::2;
//   raw frame  a length-prefixed Ethernet frame, delivered as it is;
//   time step  the clock moves on, and the services and stack are polled.
// (The DNS forwarder is not here: it needs host sockets, and the backend
// has no fake host-socket seam yet.)
//
// Checked:
//   - DHCPv4's Repr: a body that parses emits BufferLen() bytes that parse
//     back to the same message (parse(emit(parse(x))) == parse(x));
//   - after each step, every frame is accounted for (the stack's
//     invariants), and every DHCPv4 message the script sent is counted by
//     the server exactly once: a parse error, a drop reason, or received
//     per type; but one from 0.0.0.0 to the gateway's address, which the
//     stack drops as ipv4_bad_source, as documented (a raw frame may add
//     messages of its own: then at least);
//   - a DHCPv4 reply comes only in answer, in the step of the message (or
//     raw frame) that asked: it parses, is a BOOTREPLY OFFER, ACK or NAK
//     to that message's xid, from our server id, offering nothing but the
//     plan's guest address;
//   - every DHCPv6 reply is a REPLY to a transaction id the script sent
//     (it may leave later: neighbor discovery of the guest comes first);
//   - router advertisements are never closer than MIN_DELAY_BETWEEN_RAS
//     (3 s, RFC 4861 6.2.6) to each other;
//   - after teardown, every packet and chunk is back in its pool.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <span>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_frames.h"
#include "netstack/backend/dhcp4_message.h"
#include "netstack/backend/guest_config_plan.h"
#include "netstack/backend/guest_config_services.h"
#include "netstack/backend/ra_server.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/wire/bytes.h"

namespace netstack::backend {
namespace {

wire::MacAddress Mac(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint8_t e,
                     uint8_t f) {
  wire::MacAddress m;
  m.bytes = {a, b, c, d, e, f};
  return m;
}

// A length-prefixed message body, cut to what fits one 1500-byte frame.
std::span<const uint8_t> Body(fuzz::FuzzInput& in) {
  const auto r = in.Record();
  return r.first(std::min<size_t>(r.size(), 1400));
}

wire::Ipv6Address V6(const char* s) { return *wire::Ipv6Address::Parse(s); }

bool SameMessage(const Dhcp4Message& a, const Dhcp4Message& b) {
  return a.op == b.op && a.hops == b.hops && a.xid == b.xid &&
         a.secs == b.secs && a.flags == b.flags && a.ciaddr == b.ciaddr &&
         a.yiaddr == b.yiaddr && a.siaddr == b.siaddr && a.giaddr == b.giaddr &&
         a.chaddr == b.chaddr && a.type == b.type &&
         a.subnet_mask == b.subnet_mask && a.router == b.router &&
         a.dns == b.dns && a.mtu == b.mtu && a.requested_ip == b.requested_ip &&
         a.lease_time == b.lease_time && a.server_id == b.server_id &&
         a.max_message_size == b.max_message_size &&
         a.renewal_time == b.renewal_time &&
         a.rebinding_time == b.rebinding_time;
}

void CheckRoundTrip(std::span<const uint8_t> body) {
  Dhcp4Message m;
  if (Dhcp4Message::Parse(body, m) != Dhcp4ParseError::kOk) return;
  std::vector<uint8_t> out(m.BufferLen());
  FUZZ_CHECK(m.Emit(out) == out.size());
  Dhcp4Message again;
  FUZZ_CHECK(Dhcp4Message::Parse(out, again) == Dhcp4ParseError::kOk);
  FUZZ_CHECK(SameMessage(m, again));
}

uint64_t Dhcp4Counted(const Dhcp4Counters& c) {
  const auto sum = [](const auto& a) {
    return std::accumulate(a.begin(), a.end(), uint64_t{0});
  };
  return sum(c.received) + sum(c.parse_errors) + c.not_request_op +
         c.relayed + c.bad_chaddr;
}

struct Script {
  // Set during a step that sent a DHCPv4 message: its xid (unset for one
  // too short to have it). The server answers at once, without ARP
  // (Stack::SendIpv4ToMac), so no other step may see a reply, but a raw
  // frame's.
  bool dhcp4_step = false;
  bool raw_step = false;
  std::optional<uint32_t> dhcp4_xid;
  // Every DHCPv6 transaction id sent. A reply to the guest's link-local
  // address may wait for neighbor discovery, and leave in a later step.
  std::vector<uint32_t> dhcp6_txids;
  uint64_t dhcp4_sent = 0;
  // 0.0.0.0 to the gateway's address: the stack takes the unspecified
  // source only to the limited broadcast (Stack::
  // AcceptIpv4UnspecifiedSource), so these are its ipv4_bad_source drops.
  uint64_t dhcp4_bad_source = 0;
  bool raw = false;
  std::optional<Instant> last_ra;
};

// Checks what the services sent since the last step.
void CheckSent(const std::vector<std::vector<uint8_t>>& sent,
               const GuestConfigPlan& plan, Script& script, Instant now) {
  for (const std::vector<uint8_t>& f : sent) {
    if (f.size() < 14) continue;
    const uint16_t type = wire::LoadBe16(&f[12]);
    if (type == 0x0800 && f.size() >= 14 + 20 && f[14 + 9] == 17) {
      const size_t l4 = 14 + (f[14] & 0x0f) * 4u;
      if (l4 + 8 > f.size() || wire::LoadBe16(&f[l4]) != kDhcp4ServerPort) {
        continue;
      }
      const size_t end = std::min(f.size(), l4 + wire::LoadBe16(&f[l4 + 4]));
      Dhcp4Message m;
      FUZZ_CHECK(end >= l4 + 8);
      FUZZ_CHECK(Dhcp4Message::Parse(std::span(f).subspan(l4 + 8, end - l4 - 8),
                                     m) == Dhcp4ParseError::kOk);
      FUZZ_CHECK(m.op == static_cast<uint8_t>(Dhcp4Op::kBootReply));
      FUZZ_CHECK(m.type == Dhcp4MessageType::kOffer ||
                 m.type == Dhcp4MessageType::kAck ||
                 m.type == Dhcp4MessageType::kNak);
      FUZZ_CHECK(script.dhcp4_step || script.raw_step);
      if (script.dhcp4_step) {
        FUZZ_CHECK(script.dhcp4_xid.has_value() && m.xid == *script.dhcp4_xid);
      }
      FUZZ_CHECK(!m.server_id || *m.server_id == plan.gateway4);
      FUZZ_CHECK(m.yiaddr.IsZero() || m.yiaddr == plan.guest4);
    } else if (type == 0x86dd && f.size() >= 14 + 40 + 8) {
      const uint8_t next = f[14 + 6];
      const size_t l4 = 14 + 40;
      if (next == 17 && wire::LoadBe16(&f[l4]) == kDhcp6ServerPort) {
        FUZZ_CHECK(f.size() >= l4 + 8 + 4);
        FUZZ_CHECK(f[l4 + 8] == Dhcp6Server::kReply);
        const uint32_t txid = (uint32_t{f[l4 + 9]} << 16) |
                              (uint32_t{f[l4 + 10]} << 8) | f[l4 + 11];
        FUZZ_CHECK(script.raw ||
                   std::find(script.dhcp6_txids.begin(),
                             script.dhcp6_txids.end(),
                             txid) != script.dhcp6_txids.end());
      } else if (next == 58 && f[l4] == 134) {  // Router Advertisement
        FUZZ_CHECK(!script.last_ra ||
                   now - *script.last_ra >= RaServer::kMinDelayBetweenRas);
        script.last_ra = now;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  const wire::MacAddress our_mac = Mac(0x02, 0, 0, 0, 0, 0x02);
  const wire::MacAddress guest_mac = Mac(0x02, 0xaa, 0, 0, 0, 0x01);
  const wire::Ipv6Address guest_ll = V6("fe80::aa:ff:fe00:1");
  buffer::ChunkPool chunks(64);
  buffer::PacketPool packets(256);
  {
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.mac = our_mac;
    stack::FakeLink link(chunks, caps);
    // Not a runtime (netstack/runtime): the services alone on a bare Stack,
    // its whole UDP handler, with no TCP, UDP or loop to build per input.
    stack::Stack stack(stack::StackOptions{}, chunks, packets);
    GuestConfigPlan plan;
    plan.mtu = 1500;
    const stack::NicId nic = *stack.AddNic(&link, "guest0");
    FUZZ_CHECK(
        stack.AddAddress(nic, stack::Ipv4Cidr{plan.gateway4, plan.prefix_len4})
            .ok());
    FUZZ_CHECK(stack.AddAddress(nic, stack::Ipv6Cidr{plan.gateway6, 64}).ok());
    Instant now = absl::FromUnixSeconds(1'700'000'000);
    Script script;
    {
      GuestConfigServices services(stack, chunks, packets, nic, plan);
      FUZZ_CHECK(services.Start(now, nullptr).ok());
      uint16_t ident = 1;
      for (int step = 0; step < 256 && !in.done(); ++step) {
        const uint8_t op = in.U8();
        script.dhcp4_step = op % 5 == 0;
        script.raw_step = op % 5 == 3;
        switch (op % 5) {
          case 0: {  // DHCPv4
            const auto body = Body(in);
            CheckRoundTrip(body);
            std::vector<uint8_t> l4(8);
            wire::StoreBe16(&l4[0], kDhcp4ClientPort);
            wire::StoreBe16(&l4[2], kDhcp4ServerPort);
            wire::StoreBe16(&l4[4], static_cast<uint16_t>(8 + body.size()));
            l4.insert(l4.end(), body.begin(), body.end());
            const wire::Ipv4Address src =
                (op & 0x20) ? plan.guest4 : wire::Ipv4Address{};
            const bool bcast = (op & 0x40) == 0;
            const wire::Ipv4Address dst =
                bcast ? wire::Ipv4Address::FromU32(0xffffffff) : plan.gateway4;
            script.dhcp4_xid = body.size() >= 8
                                   ? std::optional(wire::LoadBe32(&body[4]))
                                   : std::nullopt;
            ++(src.IsZero() && !bcast ? script.dhcp4_bad_source
                                      : script.dhcp4_sent);
            link.Inject(fuzz::Ipv4Frame(
                            guest_mac,
                            bcast ? wire::MacAddress::Broadcast() : our_mac,
                            src, dst, 17, std::move(l4), ident++),
                        now);
            break;
          }
          case 1: {  // DHCPv6
            const auto body = Body(in);
            std::vector<uint8_t> l4(8);
            wire::StoreBe16(&l4[0], kDhcp6ClientPort);
            wire::StoreBe16(&l4[2], kDhcp6ServerPort);
            wire::StoreBe16(&l4[4], static_cast<uint16_t>(8 + body.size()));
            l4.insert(l4.end(), body.begin(), body.end());
            if (body.size() >= 4) {
              script.dhcp6_txids.push_back((uint32_t{body[1]} << 16) |
                                           (uint32_t{body[2]} << 8) | body[3]);
            }
            link.Inject(fuzz::Ipv6Frame(guest_mac, Mac(0x33, 0x33, 0, 1, 0, 2),
                                        guest_ll, V6("ff02::1:2"), 17, 255,
                                        std::move(l4), ident++),
                        now);
            break;
          }
          case 2: {  // Router Solicitation
            const uint8_t hop_limit = (op & 0x80) ? in.U8() : 255;
            const auto rest = Body(in);
            std::vector<uint8_t> l4 = {133, 0, 0, 0};
            l4.insert(l4.end(), rest.begin(), rest.end());
            const wire::Ipv6Address src =
                (op & 0x40) ? wire::Ipv6Address{} : guest_ll;
            link.Inject(fuzz::Ipv6Frame(guest_mac, Mac(0x33, 0x33, 0, 0, 0, 2),
                                        src, V6("ff02::2"), 58, hop_limit,
                                        std::move(l4), ident++),
                        now);
            break;
          }
          case 3: {  // raw frame
            const auto f = in.Record();
            script.raw = true;
            link.Inject(std::vector<uint8_t>(f.begin(), f.end()), now);
            break;
          }
          default:  // time passes
            now += absl::Milliseconds(in.U16());
            if (op & 0x80) now += absl::Seconds(in.U8());
            break;
        }
        services.Poll(now);
        stack.Poll(now);
        stack.Flush(now);
        if (std::getenv("FUZZ_VERBOSE") != nullptr) {
          std::fprintf(stderr, "step %d op %u: %zu frames sent\n", step, op,
                       link.sent.size());
        }
        CheckSent(link.sent, plan, script, now);
        link.sent.clear();
        const stack::StackCounters& c = stack.counters();
        FUZZ_CHECK(c.rx_frames == c.rx_consumed + c.rx_dropped_frames);
        FUZZ_CHECK(c.RxDrops() == c.rx_dropped_frames);
        const uint64_t counted = Dhcp4Counted(services.dhcp4().counters());
        // FUZZ_VERBOSE=1: the counters after each step, to judge a seed.
        if (std::getenv("FUZZ_VERBOSE") != nullptr) {
          std::fprintf(stderr, "step %d op %u: dhcp4 sent %llu counted %llu\n%s%s",
                       step, op, static_cast<unsigned long long>(script.dhcp4_sent),
                       static_cast<unsigned long long>(counted),
                       stack.FormatCounters().c_str(),
                       services.FormatCounters().c_str());
        }
        const uint64_t bad_source =
            c.drop(stack::DropReason::kIpv4BadSource);
        FUZZ_CHECK(script.raw ? counted >= script.dhcp4_sent
                              : counted == script.dhcp4_sent);
        FUZZ_CHECK(script.raw ? bad_source >= script.dhcp4_bad_source
                              : bad_source == script.dhcp4_bad_source);
      }
    }
    stack.Poll(now + absl::Seconds(600));
  }
  FUZZ_CHECK(packets.stats().in_use == 0);
  FUZZ_CHECK(chunks.stats().in_use == 0);
  return 0;
}

}  // namespace netstack::backend
