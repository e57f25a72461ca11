// The backend's UDP flow table (netstack/backend/udp_flows.h) behind a
// Stack on a FakeLink, relaying a guest's datagrams to host peers that
// are UDP sockets of this process on 127.0.0.1 and ::1 (loopback only:
// every destination is one the harness picks, never one from the input).
// The stack, its layers and the table's event loop are a runtime's
// (netstack/runtime), on the harness's fake clock and pools.
//
// An input is two bytes of options (max_flows 1..8, idle timeout 1..8 s),
// then a script of steps, each one of:
//   guest datagram  from one of four guest ports (or port 0) of either
//                   family, to peer 0 or 1, to a closed loopback port
//                   (9: ICMP port unreachable), to the stack's own address
//                   (the gateway), or to port 0; any payload up to 1400
//                   bytes;
//   peer datagram   a peer sends any payload to an open flow's host
//                   socket: the flow's own peer, or the other peer (the
//                   connected socket must filter it);
//   time step       the clock moves on.
//
// Checked after every step (FUZZ_CHECK), against a model of the table:
//   - every guest datagram is counted once: sent to the host, dropped
//     (full, too big, error), or refused (limit, self, bad address,
//     socket, connect); a flow opens exactly when the model says (a new
//     pair, not ours, no port 0, the table below max_flows), and size()
//     is the model's (<= max_flows);
//   - what a flow sends arrives at its peer, and only there, byte for
//     byte, from one host address per flow, distinct between open flows;
//   - a peer's datagram to an open flow reaches the guest once, from the
//     peer's address and port to the guest's, byte for byte; one from
//     another peer reaches nobody;
//   - idle flows close when the model says (last activity either way +
//     idle_timeout <= now), counted closed.idle;
//   - the stack accounts for every frame;
// and after teardown every chunk and packet is back in its pool and the
// process has as many fds open as before the input.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/loopback_udp.h"
#include "fuzz/fuzz_frames.h"
#include "netstack/backend/udp_flows.h"
#include "netstack/backend/udp_host_socket.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/runtime/runtime.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/stack/test_frames.h"
#include "netstack/transport/address.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/wire/bytes.h"

namespace netstack::backend {
namespace {

using transport::IpAddress;
using transport::SocketAddress;

constexpr int kMaxSteps = 64;
constexpr size_t kMaxPayload = 1400;  // one frame either family
constexpr uint16_t kClosedPort = 9;   // discard: nobody listens on loopback

bool Verbose() { return std::getenv("FUZZ_VERBOSE") != nullptr; }

const IpAddress& Loopback(bool v6) {
  static const IpAddress lo[2] = {*IpAddress::Parse("127.0.0.1"),
                                  *IpAddress::Parse("::1")};
  return lo[v6];
}

// The host peers: two UDP sockets per family on loopback, made once for
// the process. Peer `i` (0, 1) of a family.
fuzz::LoopbackUdp& Peer(bool v6, size_t i) {
  static fuzz::LoopbackUdp peers[4] = {
      fuzz::BindLoopbackUdp(Loopback(false), 1 << 20),
      fuzz::BindLoopbackUdp(Loopback(false), 1 << 20),
      fuzz::BindLoopbackUdp(Loopback(true), 1 << 20),
      fuzz::BindLoopbackUdp(Loopback(true), 1 << 20)};
  return peers[(v6 ? 2 : 0) + i];
}

using fuzz::Datagram;
using fuzz::OpenFdCount;

std::optional<Datagram> Recv(int fd) { return fuzz::RecvDatagram(fd); }

void DrainPeers() {
  for (bool v6 : {false, true}) {
    for (size_t i = 0; i < 2; ++i) {
      while (Recv(Peer(v6, i).fd)) {
      }
    }
  }
}

// The outcome counters of a guest datagram: exactly one moves.
uint64_t GuestOutcomes(const UdpFlowCounters& c) {
  return c.datagrams_to_host + c.to_host_dropped_full +
         c.to_host_dropped_too_big + c.to_host_dropped_error +
         c.refused_limit + c.refused_self + c.refused_bad_address +
         c.refused_socket + c.refused_connect;
}

// ... and of a host datagram a flow read.
uint64_t HostOutcomes(const UdpFlowCounters& c) {
  return c.datagrams_to_guest + c.to_guest_dropped_no_buffer +
         c.to_guest_dropped_too_big + c.to_guest_dropped_send;
}

struct Flow {
  Instant last_active;
  int peer = -1;  // 0, 1; -1: the closed port
  std::optional<SocketAddress> host;  // its socket, once its peer saw it
};

// A UDP datagram the stack sent to the guest.
struct ToGuest {
  SocketAddress src, dst;
  std::vector<uint8_t> payload;
};

std::vector<ToGuest> UdpToGuest(const std::vector<std::vector<uint8_t>>& frames) {
  std::vector<ToGuest> out;
  for (const auto& f : frames) {
    if (f.size() < 14) continue;
    const uint16_t type = wire::LoadBe16(&f[12]);
    size_t l4 = 0;
    IpAddress src, dst;
    if (type == 0x0800 && f.size() >= 34 && f[23] == 17) {
      l4 = 14 + (f[14] & 0x0f) * 4u;
      wire::Ipv4Address s, d;
      std::copy(&f[26], &f[30], s.bytes.begin());
      std::copy(&f[30], &f[34], d.bytes.begin());
      src = IpAddress(s);
      dst = IpAddress(d);
    } else if (type == 0x86dd && f.size() >= 54 && f[20] == 17) {
      l4 = 54;
      wire::Ipv6Address s, d;
      std::copy(&f[22], &f[38], s.bytes.begin());
      std::copy(&f[38], &f[54], d.bytes.begin());
      src = IpAddress(s);
      dst = IpAddress(d);
    } else {
      continue;  // ARP, NDP, ICMP errors: not data
    }
    FUZZ_CHECK(l4 + 8 <= f.size());
    const size_t len = wire::LoadBe16(&f[l4 + 4]);
    FUZZ_CHECK(len >= 8 && l4 + len <= f.size());
    out.push_back({{src, wire::LoadBe16(&f[l4])},
                   {dst, wire::LoadBe16(&f[l4 + 2])},
                   std::vector<uint8_t>(f.begin() + l4 + 8, f.begin() + l4 + len)});
  }
  return out;
}

struct Fuzz {
  Fuzz(buffer::ChunkPool& chunks, buffer::PacketPool& packets)
      : rt(MakeRuntime(chunks, packets)),
        link(*fake_link),
        stack(rt->stack()),
        udp(rt->udp()),
        loop(rt->loop()) {}
  // A runtime on the harness's pools and clock; its loop is the table's.
  std::unique_ptr<runtime::Runtime> MakeRuntime(buffer::ChunkPool& chunks,
                                                buffer::PacketPool& packets) {
    runtime::RuntimeOptions o;
    o.chunk_pool = &chunks;
    o.packet_pool = &packets;
    o.open_link = [this](buffer::ChunkPool& c, buffer::PacketPool&)
        -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
      auto l = std::make_unique<stack::FakeLink>(c, Caps());
      fake_link = l.get();
      return std::unique_ptr<link::LinkEndpoint>(std::move(l));
    };
    o.nic_name = "fuzz0";
    // The backend's "any destination" is the stack's business: here the
    // loopback addresses are ours, as in udp_flows_test.cc.
    o.addrs4 = {stack::Ipv4Cidr{our4, 24},
                stack::Ipv4Cidr{Loopback(false).v4(), 32}};
    o.addrs6 = {stack::Ipv6Cidr{our6, 64},
                stack::Ipv6Cidr{Loopback(true).v6(), 128}};
    o.stack = Options();
    o.tcp.seed = 1;
    o.udp_seed = 1;
    o.clock = [this] { return now; };
    auto rt_or = runtime::Runtime::Create(std::move(o));
    FUZZ_CHECK(rt_or.ok());
    return *std::move(rt_or);
  }
  static link::LinkCapabilities Caps() {
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
    return caps;
  }
  static stack::StackOptions Options() {
    stack::StackOptions o;
    o.neighbor.capacity = 16;
    return o;
  }

  // One turn of the table's loop at `now`; the model closes what the
  // table's Poll closes in it.
  void Turn(Duration wait) {
    FUZZ_CHECK(loop.RunOnce(wait).ok());
    uint64_t idle = 0;
    for (auto it = flows.begin(); it != flows.end();) {
      if (it->second.last_active + options.idle_timeout <= now) {
        it = flows.erase(it);
        ++idle;
      } else {
        ++it;
      }
    }
    FUZZ_CHECK(table->counters().closed_idle - closed_idle == idle);
    closed_idle = table->counters().closed_idle;
    stack.Poll(now);
  }

  void Check() {
    const stack::StackCounters& c = stack.counters();
    FUZZ_CHECK(c.rx_frames == c.rx_consumed + c.rx_dropped_frames);
    FUZZ_CHECK(c.RxDrops() == c.rx_dropped_frames);
    // Not expected on loopback (recvmsg of the error queue failing).
    FUZZ_CHECK(table->counters().closed_socket_error == 0);
    FUZZ_CHECK(table->size() == flows.size());
    FUZZ_CHECK(table->size() <= options.max_flows);
    for (auto a = flows.begin(); a != flows.end(); ++a) {
      for (auto b = std::next(a); b != flows.end(); ++b) {
        FUZZ_CHECK(!a->second.host || !b->second.host ||
                   *a->second.host != *b->second.host);
      }
    }
  }

  void GuestDatagram(bool v6, uint16_t sport, int dst_kind,
                     std::span<const uint8_t> payload) {
    SocketAddress src{v6 ? IpAddress(guest6) : IpAddress(guest4), sport};
    SocketAddress dst;
    int peer = -1;
    switch (dst_kind) {
      case 0:
      case 1:
        peer = dst_kind;
        dst = Peer(v6, peer).addr;
        break;
      case 2:
        dst = {Loopback(v6), kClosedPort};
        break;
      case 3:
        dst = {v6 ? IpAddress(our6) : IpAddress(our4), 53};
        break;
      default:
        dst = {Loopback(v6), 0};
        break;
    }
    std::vector<uint8_t> l4(8);
    wire::StoreBe16(&l4[0], src.port);
    wire::StoreBe16(&l4[2], dst.port);
    wire::StoreBe16(&l4[4], static_cast<uint16_t>(8 + payload.size()));
    l4.insert(l4.end(), payload.begin(), payload.end());
    const UdpFlowCounters before = table->counters();
    const transport::FourTuple key{src, dst};
    const bool known = Find(key) != nullptr;
    link.Inject(v6 ? fuzz::Ipv6Frame(guest_mac, Caps().mac, guest6, dst.ip.v6(),
                                     17, 64, std::move(l4), ident++)
                   : fuzz::Ipv4Frame(guest_mac, Caps().mac, guest4, dst.ip.v4(),
                                     17, std::move(l4), ident++),
                now);
    stack.Poll(now);
    const UdpFlowCounters& c = table->counters();
    const bool self = dst_kind == 3;
    const bool bad = !self && (dst.port == 0 || src.port == 0);
    if (!known && (self || bad)) {
      // Refused before any table lookup: the datagram is the stack's.
      FUZZ_CHECK(GuestOutcomes(c) == GuestOutcomes(before) + 1);
      FUZZ_CHECK(self ? c.refused_self == before.refused_self + 1
                      : c.refused_bad_address == before.refused_bad_address + 1);
      return;
    }
    FUZZ_CHECK(GuestOutcomes(c) == GuestOutcomes(before) + 1);
    if (!known) {
      if (flows.size() >= options.max_flows) {
        FUZZ_CHECK(c.refused_limit == before.refused_limit + 1);
        FUZZ_CHECK(c.opened == before.opened);
        return;
      }
      FUZZ_CHECK(c.refused_limit == before.refused_limit);
      if (c.opened == before.opened) {
        // A socket or connect the host refused: no flow.
        FUZZ_CHECK(c.refused_socket + c.refused_connect ==
                   before.refused_socket + before.refused_connect + 1);
        return;
      }
      FUZZ_CHECK(c.opened == before.opened + 1);
      flows.push_back({key, Flow{now, peer, std::nullopt}});
    }
    Flow& f = *Find(key);
    f.last_active = std::max(f.last_active, now);
    if (c.datagrams_to_host != before.datagrams_to_host + 1 || peer < 0) return;
    // Its peer gets it (loopback: queued by the time sendmsg returned;
    // wait for the kernel all the same, never sleep).
    std::optional<Datagram> d;
    fuzz::KernelWait wait;
    while (!(d = Recv(Peer(v6, peer).fd))) {
      FUZZ_CHECK(wait.Another());
      pollfd p{Peer(v6, peer).fd, POLLIN, 0};
      (void)poll(&p, 1, 100);
    }
    FUZZ_CHECK(std::equal(d->bytes.begin(), d->bytes.end(), payload.begin(),
                          payload.end()));
    FUZZ_CHECK(!f.host || *f.host == d->from);
    f.host = d->from;
    FUZZ_CHECK(!Recv(Peer(v6, 1 - peer).fd));
  }

  // A peer's datagram to `to`; `flow` the open flow that must take it
  // (its own peer, its own socket), or none.
  void PeerDatagram(bool v6, size_t from_peer, const SocketAddress& to,
                    std::span<const uint8_t> payload) {
    const transport::FourTuple* taker_key = nullptr;
    for (const auto& [key, f] : flows) {
      if (f.host && *f.host == to && f.peer == static_cast<int>(from_peer) &&
          key.remote.ip.is_v6() == v6) {
        taker_key = &key;
      }
    }
    const UdpFlowCounters before = table->counters();
    sockaddr_storage ss;
    const socklen_t len = ToSockaddr(to, ss);
    FUZZ_CHECK(sendto(Peer(v6, from_peer).fd, payload.data(), payload.size(), 0,
                      reinterpret_cast<sockaddr*>(&ss), len) ==
               static_cast<ssize_t>(payload.size()));
    if (taker_key == nullptr) {
      // Filtered by a connected socket, or nobody there: one turn sees
      // nothing (the datagram would be queued already if it were taken).
      Turn(absl::ZeroDuration());
      FUZZ_CHECK(HostOutcomes(table->counters()) == HostOutcomes(before));
      FUZZ_CHECK(UdpToGuest(link.sent).empty());
      return;
    }
    const transport::FourTuple key = *taker_key;
    fuzz::KernelWait wait;
    while (HostOutcomes(table->counters()) == HostOutcomes(before)) {
      FUZZ_CHECK(wait.Another());
      Turn(absl::Milliseconds(100));
    }
    const UdpFlowCounters& c = table->counters();
    FUZZ_CHECK(HostOutcomes(c) == HostOutcomes(before) + 1);
    FUZZ_CHECK(c.datagrams_to_guest == before.datagrams_to_guest + 1);
    Flow& f = *Find(key);
    f.last_active = std::max(f.last_active, now);
    stack.Poll(now);
    const std::vector<ToGuest> got = UdpToGuest(link.sent);
    FUZZ_CHECK(got.size() == 1);
    FUZZ_CHECK(got[0].src == key.remote);
    FUZZ_CHECK(got[0].dst == key.local);
    FUZZ_CHECK(got[0].payload.size() == payload.size());
    FUZZ_CHECK(std::equal(payload.begin(), payload.end(), got[0].payload.begin()));
  }

  UdpFlowOptions options;
  Instant now = absl::FromUnixSeconds(1'700'000'000);
  const wire::MacAddress guest_mac = *wire::MacAddress::Parse("02:aa:00:00:00:01");
  const wire::Ipv4Address our4 = *wire::Ipv4Address::Parse("10.0.2.2");
  const wire::Ipv6Address our6 = *wire::Ipv6Address::Parse("fd00::2");
  const wire::Ipv4Address guest4 = *wire::Ipv4Address::Parse("10.0.2.15");
  const wire::Ipv6Address guest6 = *wire::Ipv6Address::Parse("fd00::15");
  stack::FakeLink* fake_link = nullptr;  // the runtime's link, once made
  std::unique_ptr<runtime::Runtime> rt;
  // Parts of the runtime.
  stack::FakeLink& link;
  stack::Stack& stack;
  udp::UdpLayer& udp;
  eventloop::EventLoop& loop;
  std::unique_ptr<UdpFlowTable> table;
  uint16_t ident = 1;
  // In opening order, so the script's n-th flow is the same in every run.
  std::vector<std::pair<transport::FourTuple, Flow>> flows;
  Flow* Find(const transport::FourTuple& key) {
    for (auto& [k, f] : flows) {
      if (k == key) return &f;
    }
    return nullptr;
  }
  uint64_t closed_idle = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  DrainPeers();
  const size_t fds = OpenFdCount();
  buffer::ChunkPool chunks(256);
  buffer::PacketPool packets(1024);
  {
    Fuzz f(chunks, packets);
    f.options.max_flows = 1 + in.U8() % 8;
    f.options.idle_timeout = absl::Seconds(1 + in.U8() % 8);
    f.options.self_addresses = {IpAddress(f.our4), IpAddress(f.our6)};
    f.table = std::make_unique<UdpFlowTable>(f.stack, f.udp, chunks, packets,
                                             f.loop, f.options);
    // The guest resolves us, and we learn its link-layer address.
    const stack::testing::Peer guest{f.guest_mac, f.guest4, f.guest6};
    f.link.Inject(stack::testing::ArpRequest(guest, f.our4), f.now);
    f.link.Inject(stack::testing::Icmpv6NeighborSolicitation(guest, f.our6),
                  f.now);
    f.stack.Poll(f.now);
    f.link.sent.clear();
    for (int step = 0; step < kMaxSteps && !in.done(); ++step) {
      const uint8_t op = in.U8();
      const bool v6 = (op >> 2) & 1;
      switch (op & 3) {
        case 0:
        case 1: {  // guest datagram
          const uint8_t b = in.U8();
          const uint16_t sport = (b & 3) == 3 && (b & 4) ? 0 : 6000 + (b & 3);
          const auto r = in.Record();
          f.GuestDatagram(v6, sport, (b >> 3) % 5,
                          r.first(std::min(r.size(), kMaxPayload)));
          break;
        }
        case 2: {  // peer datagram
          const uint8_t b = in.U8();
          const auto r = in.Record();
          const auto payload = r.first(std::min(r.size(), kMaxPayload));
          // To an open flow's socket, from its peer or the other. (Not to
          // a closed flow's: its port is free for any process on the
          // machine to take.)
          std::vector<std::pair<SocketAddress, int>> targets;
          for (const auto& [key, fl] : f.flows) {
            if (fl.host && fl.peer >= 0 && key.remote.ip.is_v6() == v6) {
              targets.push_back({*fl.host, fl.peer});
            }
          }
          if (targets.empty()) break;
          const auto& [to, own] = targets[(b >> 2) % targets.size()];
          const size_t from = (b & 2) ? 1 - own : own;
          f.PeerDatagram(v6, from, to, payload);
          break;
        }
        default:  // time passes
          f.now += absl::Milliseconds(in.U16());
          if (op & 0x80) f.now += absl::Seconds(in.U8() % 16);
          f.Turn(absl::ZeroDuration());
          break;
      }
      f.link.sent.clear();
      if (Verbose()) {
        std::fprintf(stderr, "step %d op %u: flows %zu\n%s", step, op,
                     f.table->size(), f.table->counters().Format().c_str());
      }
      f.Check();
    }
    f.table.reset();
  }
  FUZZ_CHECK(chunks.stats().in_use == 0);
  FUZZ_CHECK(packets.stats().in_use == 0);
  FUZZ_CHECK(OpenFdCount() == fds);
  return 0;
}

}  // namespace netstack::backend
