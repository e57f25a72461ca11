// The backend's TCP flow table (netstack/backend/backend.h, tcp_flow.h)
// between a guest netstack and host sockets of this process on 127.0.0.1
// and ::1, with a hostile guest's forged segments mixed in. As in
// backend_test.cc: the guest is a Stack and TcpLayer of its own on a
// FakeLink, the backend's Stack on another, the harness moves the frames;
// the backend reaches the host through the gateway address (host
// loopback). Every host destination is one the harness made: a listener
// per genuine flow, one for the forged SYNs, and a bound port that does
// not listen (connect refused). The loop and both TCP layers run on the
// harness's fake clock; the host kernel's sockets are real.
//
// An input is two bytes of options (the flow limit 1..8, a guest timeout
// of 0 or 1..7 s, the two per-flow buffers small or default), then a
// script of steps, each one of:
//   connect      the guest opens a flow (IPv4 or IPv6) to its own
//                listener or to the refusing port (at most kMaxFlows);
//   guest write  up to 64 KiB of the flow's byte pattern;
//   guest end    shutdown(SHUT_WR), Close() or Abort();
//   host write   up to 64 KiB of the host side's pattern;
//   host end     shutdown(SHUT_WR), close(), close() with SO_LINGER 0, or
//                stop/start reading (a host that does not read);
//   forged       a TCP segment from the guest's addresses that the guest's
//                stack never sent: on a live flow's 4-tuple with its
//                sequence and acknowledgment numbers near the guest's last
//                ones, to the forged-SYN listener, or to the refusing
//                port; any flags, window, options and payload;
//   loss         the next 0..7 frames each way are lost;
//   time         the clock moves on (ms, or seconds).
// After each step the harness turns everything until nothing moves.
//
// Checked (FUZZ_CHECK):
//   - what a host socket reads is the guest's bytes for that flow, in
//     order (a prefix of what the guest wrote), unless a forged segment
//     hit the flow's 4-tuple (TCP accepts in-window data from anyone);
//     what a guest socket reads is a prefix of what its host side wrote;
//     a host EOF comes after every byte the guest wrote (untouched flows);
//   - the flow table: no more flows than the limit, at least the opened
//     less the closed ones, every ended flow counted under one reason,
//     host fds open no more than flows; once quiet, the table holds
//     exactly the opened less the closed;
//   - the backend's stack accounts for every frame;
// and after teardown every chunk and packet is back in its pool and the
// process has as many fds open as before the input.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_frames.h"
#include "fuzz/loopback_udp.h"
#include "netstack/backend/backend.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/runtime/runtime.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/transport/address.h"
#include "netstack/transport/errors.h"
#include "netstack/wire/bytes.h"

namespace netstack::backend {
namespace {

using transport::IpAddress;
using transport::SocketAddress;

constexpr int kMaxSteps = 48;
constexpr int kMaxFlows = 6;           // genuine guest flows an input opens
constexpr int kMaxTurns = 200;         // a step's turns until quiet
constexpr size_t kMaxWrite = 64 << 10;
constexpr uint16_t kForgedPortBase = 1000;  // below the ephemeral range

bool Verbose() { return std::getenv("FUZZ_VERBOSE") != nullptr; }

// Host sockets of the process, made once: per family, kMaxFlows listeners
// (flow k of an input connects to listener k of its family, so an accepted
// socket is known by its listener), one for forged SYNs, and a bound port
// without listen() (a connect to it is refused; nobody else can take it).
struct HostPorts {
  int listen_fd[2][kMaxFlows + 1];
  uint16_t listen_port[2][kMaxFlows + 1];
  int refusing_fd[2];
  uint16_t refusing_port[2];
};

int BoundTcp(bool v6, uint16_t* port) {
  const int fd = socket(v6 ? AF_INET6 : AF_INET,
                        SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  sockaddr_storage ss{};
  socklen_t len;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*a);
  }
  FUZZ_CHECK(bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0);
  FUZZ_CHECK(getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0);
  *port = v6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
             : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

const HostPorts& Ports() {
  static const HostPorts ports = [] {
    HostPorts p;
    for (int v6 = 0; v6 < 2; ++v6) {
      for (int i = 0; i <= kMaxFlows; ++i) {
        p.listen_fd[v6][i] = BoundTcp(v6, &p.listen_port[v6][i]);
        FUZZ_CHECK(listen(p.listen_fd[v6][i], 64) == 0);
      }
      p.refusing_fd[v6] = BoundTcp(v6, &p.refusing_port[v6]);
    }
    return p;
  }();
  return ports;
}

void CloseAbortively(int fd) {
  const linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  close(fd);
}

// Connections still queued on the listeners an input used (`used[v6]`,
// bit i: listener i) once its backend has gone: accepted and reset.
void DrainListeners(const uint32_t used[2]) {
  const HostPorts& p = Ports();
  for (int v6 = 0; v6 < 2; ++v6) {
    for (int i = 0; i <= kMaxFlows; ++i) {
      if (!(used[v6] >> i & 1)) continue;
      for (int fd; (fd = accept4(p.listen_fd[v6][i], nullptr, nullptr,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
        CloseAbortively(fd);
      }
    }
  }
}

// Byte `off` of a stream of flow `k`, direction `dir` (0: guest to host),
// is off * 131 + (off >> 11) + k * 17 + dir * 89, mod 256. Within one
// 2 KiB block only off * 131 varies, and that repeats every 256 bytes, so
// kPatternRun[(off % 256) + j] + a constant is the block's byte j: a
// contiguous run, which the compiler vectorises (the byte-at-a-time loop
// was 9% of the fuzzer's time).
constexpr size_t kPatternBlock = 2048;
constexpr auto kPatternRun = [] {
  std::array<uint8_t, 256 + kPatternBlock> t{};
  for (size_t j = 0; j < t.size(); ++j) t[j] = static_cast<uint8_t>(j * 131);
  return t;
}();

// fn(position, length, run, constant) for each block's part of
// [off, off + n).
template <typename Fn>
void ForEachPatternRun(int k, int dir, uint64_t off, size_t n, Fn fn) {
  for (size_t i = 0; i < n;) {
    const uint64_t o = off + i;
    const size_t len = std::min<size_t>(n - i, kPatternBlock - o % kPatternBlock);
    fn(i, len, &kPatternRun[o % 256],
       static_cast<uint8_t>((o >> 11) + k * 17 + dir * 89));
    i += len;
  }
}
FUZZ_NO_COVERAGE void FillPattern(int k, int dir, uint64_t off,
                                  std::span<uint8_t> out) {
  ForEachPatternRun(k, dir, off, out.size(),
                    [&](size_t at, size_t len, const uint8_t* run, uint8_t add) {
                      for (size_t j = 0; j < len; ++j) {
                        out[at + j] = static_cast<uint8_t>(run[j] + add);
                      }
                    });
}
FUZZ_NO_COVERAGE bool MatchesPattern(int k, int dir, uint64_t off,
                                     std::span<const uint8_t> in) {
  uint8_t diff = 0;
  ForEachPatternRun(k, dir, off, in.size(),
                    [&](size_t at, size_t len, const uint8_t* run, uint8_t add) {
                      for (size_t j = 0; j < len; ++j) {
                        diff |= in[at + j] ^ static_cast<uint8_t>(run[j] + add);
                      }
                    });
  return diff == 0;
}

struct Flow {
  std::unique_ptr<tcp::TcpSocket> guest;  // null once closed or aborted
  bool v6 = false;
  bool refused_port = false;  // connected to the refusing port
  uint64_t guest_wrote = 0;   // bytes the guest's Write took
  uint64_t guest_read = 0;    // bytes the guest read (host's pattern)
  bool guest_wr_shut = false;
  bool guest_closed = false;  // Close(): FIN after the bytes, or RST
  bool guest_eof = false;
  int host_fd = -1;           // the accepted host socket, once accepted
  bool host_reading = true;
  bool host_wr_shut = false;
  bool host_done = false;     // closed by the harness, or reset/EOF read
  uint64_t host_wrote = 0;
  uint64_t host_read = 0;
  bool host_eof = false;
  bool forged = false;        // a forged segment used its 4-tuple
  // The guest's last sequence and acknowledgment numbers on the wire.
  uint32_t last_seq = 0, last_ack = 0;
  uint16_t guest_port = 0;
};

struct Fuzz {
  // Two runtimes on the harness's clock and pools: the guest's (its own
  // Stack and TCP on a FakeLink, routed to the gateway) and the
  // backend's (its TCP flow table on another FakeLink).
  Fuzz(const BackendConfig& config, buffer::ChunkPool& guest_chunks,
       buffer::PacketPool& guest_packets, buffer::ChunkPool& backend_chunks,
       buffer::PacketPool& backend_packets) {
    runtime::RuntimeOptions go = Options(guest_chunks, guest_packets,
                                         guest_mac, &guest_link);
    go.nic_name = "g";
    go.addrs4 = {*stack::ParseIpv4Cidr("10.0.2.100/24")};
    go.addrs6 = {*stack::ParseIpv6Cidr("fd00::100/64")};
    go.gateway4 = gateway4;
    go.gateway6 = gateway6;
    go.tcp.seed = 7;
    go.timers.slots = 16;  // the guest's loop schedules no timers
    auto g = runtime::Runtime::Create(std::move(go));
    FUZZ_CHECK(g.ok());
    guest_rt = *std::move(g);
    guest = &guest_rt->stack();
    guest_tcp = &guest_rt->tcp();

    runtime::RuntimeOptions bo = Options(backend_chunks, backend_packets,
                                         backend_mac, &backend_link);
    bo.nic_name = "b";
    bo.tcp.seed = 9;
    bo.backend = config;
    bo.backend_tcp_only = true;
    auto b = runtime::Runtime::Create(std::move(bo));
    FUZZ_CHECK(b.ok());
    backend_rt = *std::move(b);
    stack = &backend_rt->stack();
    backend = backend_rt->backend();
  }
  // Users first: the sockets, then the runtimes (the backend's flows
  // first in it), then the host's ends.
  ~Fuzz() {
    for (Flow& f : flows) f.guest.reset();
    backend_rt.reset();
    guest_rt.reset();
    for (Flow& f : flows) {
      if (f.host_fd >= 0) CloseAbortively(f.host_fd);
    }
    for (int fd : forged_fds) CloseAbortively(fd);
  }
  runtime::RuntimeOptions Options(buffer::ChunkPool& chunks,
                                  buffer::PacketPool& packets,
                                  const wire::MacAddress& mac,
                                  stack::FakeLink** link) {
    runtime::RuntimeOptions o;
    o.chunk_pool = &chunks;
    o.packet_pool = &packets;
    o.open_link = [mac, link](buffer::ChunkPool& c, buffer::PacketPool&)
        -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
      auto l = std::make_unique<stack::FakeLink>(c, Caps(mac));
      *link = l.get();
      return std::unique_ptr<link::LinkEndpoint>(std::move(l));
    };
    o.stack = SmallCache();
    o.udp_seed = 1;
    o.clock = [this] { return now; };
    return o;
  }
  static link::LinkCapabilities Caps(const wire::MacAddress& mac) {
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.mac = mac;
    return caps;
  }
  static stack::StackOptions SmallCache() {
    stack::StackOptions o;
    o.neighbor.capacity = 16;
    return o;
  }

  // Moves the frames each way (minus the lost ones), noting the guest's
  // sequence numbers; true if any moved.
  bool MoveFrames() {
    bool moved = false;
    std::vector<std::vector<uint8_t>> frames = std::move(guest_link->sent);
    guest_link->sent.clear();
    for (const auto& f : frames) NoteGuestSegment(f);
    std::erase_if(frames, [&](const auto&) { return lose_from_guest > 0 && lose_from_guest--; });
    if (!frames.empty()) {
      backend_link->Inject(frames, now);
      moved = true;
    }
    frames = std::move(backend_link->sent);
    backend_link->sent.clear();
    std::erase_if(frames, [&](const auto&) { return lose_to_guest > 0 && lose_to_guest--; });
    if (!frames.empty()) {
      guest_link->Inject(frames, now);
      moved = true;
    }
    return moved;
  }

  void NoteGuestSegment(const std::vector<uint8_t>& f) {
    size_t l4;
    bool v6;
    if (f.size() >= 34 && f[12] == 0x08 && f[13] == 0x00 && f[23] == 6) {
      l4 = 14 + (f[14] & 0x0fu) * 4;
      v6 = false;
    } else if (f.size() >= 54 && f[12] == 0x86 && f[13] == 0xdd && f[20] == 6) {
      l4 = 54;
      v6 = true;
    } else {
      return;
    }
    if (f.size() < l4 + 20) return;
    const uint16_t sport = wire::LoadBe16(&f[l4]);
    for (Flow& fl : flows) {
      if (fl.v6 == v6 && fl.guest_port == sport) {
        fl.last_seq = wire::LoadBe32(&f[l4 + 4]);
        fl.last_ack = wire::LoadBe32(&f[l4 + 8]);
      }
    }
  }

  // One turn of everything; true if anything moved.
  bool Turn() {
    bool moved = MoveFrames();
    // A turn of each runtime: its ready fds, timers and pollers, then its
    // end of turn (callbacks, the backend's Sweep, TCP, Flush).
    FUZZ_CHECK(backend_rt->Poll().ok());
    FUZZ_CHECK(guest_rt->Poll().ok());
    moved |= HostIo();
    moved |= GuestIo();
    // Frames the turn made move in the next one.
    return moved || !guest_link->sent.empty() || !backend_link->sent.empty();
  }

  // Turns until a turn moves nothing (and one more for the Sweep).
  void Settle() {
    for (int i = 0; i < kMaxTurns; ++i) {
      if (Verbose()) {
        std::fprintf(stderr, "  turn %d: frames %zu from the guest, %zu to it\n", i,
                     guest_link->sent.size(), backend_link->sent.size());
      }
      if (!Turn()) {
        quiet = true;
        Turn();
        return;
      }
    }
    quiet = false;
  }

  // Accepts what the listeners hold and reads every host socket. One
  // poll() finds the sockets with something to take: a recv() or
  // accept4() on every socket each turn, most of them EAGAIN, was most of
  // the harness's system calls.
  bool HostIo() {
    enum Kind : uint8_t { kListener, kHost, kForged };
    struct Watch {
      Kind kind;
      uint8_t v6;
      uint8_t index;  // listener, flow or forged_fds index
    };
    std::array<pollfd, 2 * (kMaxFlows + 1) + kMaxFlows + 16> fds;
    std::array<Watch, fds.size()> watch;
    size_t n = 0;
    auto add = [&](int fd, Watch w) {
      if (n == fds.size()) return false;
      fds[n] = {fd, POLLIN, 0};
      watch[n++] = w;
      return true;
    };
    const HostPorts& p = Ports();
    for (int v6 = 0; v6 < 2; ++v6) {
      for (int i = 0; i <= kMaxFlows; ++i) {
        // Only where a connection may wait: flow i's listener until it
        // accepted, or after a forged segment reused its tuple; the
        // forged SYNs' once they were sent.
        if (i < kMaxFlows) {
          if (i >= static_cast<int>(flows.size()) || flows[i].v6 != (v6 != 0) ||
              (flows[i].host_fd >= 0 && !flows[i].forged)) {
            continue;
          }
        } else if (!forged_syn_listener[v6]) {
          continue;
        }
        add(p.listen_fd[v6][i], {kListener, static_cast<uint8_t>(v6),
                                 static_cast<uint8_t>(i)});
      }
    }
    for (size_t k = 0; k < flows.size(); ++k) {
      const Flow& f = flows[k];
      if (f.host_fd < 0 || f.host_done || !f.host_reading || f.host_eof) continue;
      add(f.host_fd, {kHost, 0, static_cast<uint8_t>(k)});
    }
    // Forged flows' sockets past the array's room are read every turn.
    size_t forged_polled = 0;
    while (forged_polled < forged_fds.size() &&
           add(forged_fds[forged_polled],
               {kForged, 0, static_cast<uint8_t>(forged_polled)})) {
      ++forged_polled;
    }
    if (n == 0) return false;
    // libFuzzer's -timeout timer may land inside the call; even a poll()
    // that does not wait then fails with EINTR.
    int ready;
    do {
      ready = poll(fds.data(), n, 0);
    } while (ready < 0 && errno == EINTR);
    FUZZ_CHECK(ready >= 0);
    bool moved = false;
    uint8_t buf[16384];
    for (size_t j = 0; j < n; ++j) {
      if (fds[j].revents == 0) continue;
      const Watch w = watch[j];
      switch (w.kind) {
        case kListener:
          moved |= Accept(w.v6, w.index);
          break;
        case kHost:
          moved |= ReadHost(flows[w.index], w.index, buf);
          break;
        case kForged:
          while (recv(fds[j].fd, buf, sizeof(buf), 0) > 0) moved = true;
          break;
      }
    }
    for (size_t j = forged_polled; j < forged_fds.size(); ++j) {
      while (recv(forged_fds[j], buf, sizeof(buf), 0) > 0) moved = true;
    }
    return moved;
  }

  bool Accept(int v6, int i) {
    bool moved = false;
    for (int fd; (fd = accept4(Ports().listen_fd[v6][i], nullptr, nullptr,
                               SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
      moved = true;
      Flow* owner = i < static_cast<int>(flows.size()) ? &flows[i] : nullptr;
      if (i < kMaxFlows && owner != nullptr && owner->v6 == (v6 != 0) &&
          !owner->refused_port && owner->host_fd < 0 && !owner->host_done &&
          !owner->forged) {
        owner->host_fd = fd;
      } else {
        // A forged SYN's flow, or a second one on a 4-tuple a forged
        // segment reused.
        forged_fds.push_back(fd);
      }
    }
    return moved;
  }

  // Reads what host socket k holds; a short read leaves the rest (and an
  // EOF behind it) to the next turn's poll.
  bool ReadHost(Flow& f, size_t k, std::span<uint8_t> buf) {
    for (bool moved = false;; moved = true) {
      const ssize_t n = recv(f.host_fd, buf.data(), buf.size(), 0);
      if (n > 0) {
        const std::span<const uint8_t> got = buf.first(static_cast<size_t>(n));
        if (!f.forged) {
          FUZZ_CHECK(f.host_read + got.size() <= f.guest_wrote);
          FUZZ_CHECK(MatchesPattern(static_cast<int>(k), 0, f.host_read, got));
        }
        f.host_read += got.size();
        if (got.size() < buf.size()) return true;
        continue;
      }
      if (n == 0) {
        f.host_eof = true;
        // The guest's FIN is relayed after its bytes.
        if (!f.forged) {
          FUZZ_CHECK(f.guest_wr_shut || f.guest_closed);
          FUZZ_CHECK(f.host_read == f.guest_wrote);
        }
        return true;
      }
      if (errno == EAGAIN) return moved;
      f.host_done = true;  // reset: the flow ended abortively
      return true;
    }
  }

  // Reads every guest socket.
  bool GuestIo() {
    bool moved = false;
    uint8_t buf[16384];
    for (size_t k = 0; k < flows.size(); ++k) {
      Flow& f = flows[k];
      if (!f.guest || f.guest_eof) continue;
      for (;;) {
        auto n = f.guest->Read(buf);
        if (!n.ok()) {
          if (!transport::IsWouldBlock(n.status())) {
            moved = true;
            f.guest_eof = true;  // reset, refused, timed out
          }
          break;
        }
        moved = true;
        if (*n == 0) {
          f.guest_eof = true;
          // The host's FIN came after all of its bytes.
          if (f.host_wr_shut) FUZZ_CHECK(f.guest_read == f.host_wrote);
          break;
        }
        const std::span<const uint8_t> got(buf, *n);
        FUZZ_CHECK(f.guest_read + got.size() <= f.host_wrote);
        FUZZ_CHECK(MatchesPattern(static_cast<int>(k), 1, f.guest_read, got));
        f.guest_read += got.size();
      }
    }
    return moved;
  }

  void Check() const {
    const stack::StackCounters& s = stack->counters();
    FUZZ_CHECK(s.rx_frames == s.rx_consumed + s.rx_dropped_frames);
    FUZZ_CHECK(s.RxDrops() == s.rx_dropped_frames);
    const BackendCounters& c = backend->counters();
    FUZZ_CHECK(c.tcp_flows_closed <= c.tcp_flows_opened);
    const uint64_t open = c.tcp_flows_opened - c.tcp_flows_closed;
    FUZZ_CHECK(backend->tcp_flow_count() >= open);
    if (quiet) FUZZ_CHECK(backend->tcp_flow_count() == open);
    FUZZ_CHECK(backend->tcp_flow_count() <= backend->config().limits.max_tcp_flows);
    FUZZ_CHECK(c.tcp_host_fds_open <= backend->tcp_flow_count());
    FUZZ_CHECK(std::accumulate(c.tcp_ends.begin(), c.tcp_ends.end(),
                               uint64_t{0}) == c.tcp_flows_closed);
    FUZZ_CHECK(c.tcp_inbound_opened == 0);
  }

  void Connect(bool v6, bool refused) {
    if (flows.size() >= kMaxFlows) return;
    const int k = static_cast<int>(flows.size());
    const HostPorts& p = Ports();
    Flow& f = flows.emplace_back();
    f.v6 = v6;
    f.refused_port = refused;
    f.guest = guest_tcp->Open(v6 ? transport::Family::kIpv6
                                 : transport::Family::kIpv4);
    const uint16_t port = refused ? p.refusing_port[v6] : p.listen_port[v6][k];
    const SocketAddress dst{v6 ? IpAddress(gateway6) : IpAddress(gateway4), port};
    FUZZ_CHECK(f.guest->Connect(dst).ok());
    f.guest_port = f.guest->local_address().port;
  }

  void GuestWrite(Flow& f, int k, size_t n) {
    if (!f.guest || f.guest_wr_shut) return;
    std::vector<uint8_t> bytes(n);
    FillPattern(k, 0, f.guest_wrote, bytes);
    auto w = f.guest->Write(bytes);
    if (w.ok()) {
      f.guest_wrote += *w;
    } else if (!transport::IsWouldBlock(w.status())) {
      // The write took the socket's error (a reset): reads now see the
      // end of the stream, so nothing more is checked on them.
      f.guest_eof = true;
    }
  }

  void HostWrite(Flow& f, int k, size_t n) {
    if (f.host_fd < 0 || f.host_done || f.host_wr_shut) return;
    std::vector<uint8_t> bytes(n);
    FillPattern(k, 1, f.host_wrote, bytes);
    const ssize_t w = send(f.host_fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (w > 0) {
      f.host_wrote += static_cast<uint64_t>(w);
    } else if (w < 0 && errno != EAGAIN) {
      // As for the guest: the send took the reset, and a recv after it
      // returns 0 as if at a FIN.
      f.host_done = true;
    }
  }

  // A TCP segment the guest's stack did not send.
  void Forge(fuzz::FuzzInput& in) {
    const uint8_t b = in.U8();
    const bool v6 = b & 1;
    const HostPorts& p = Ports();
    uint16_t sport, dport;
    uint32_t seq = in.U32(), ack = in.U32();
    switch ((b >> 1) % 3) {
      case 0: {  // a live flow's 4-tuple, near the guest's numbers
        std::vector<size_t> live;
        for (size_t k = 0; k < flows.size(); ++k) {
          if (flows[k].v6 == v6 && flows[k].host_fd >= 0) live.push_back(k);
        }
        if (live.empty()) return;
        Flow& f = flows[live[(b >> 3) % live.size()]];
        f.forged = true;
        sport = f.guest_port;
        dport = p.listen_port[v6][&f - flows.data()];
        seq = f.last_seq + static_cast<uint32_t>(static_cast<int16_t>(seq));
        ack = f.last_ack + static_cast<uint32_t>(static_cast<int16_t>(ack));
        break;
      }
      case 1:  // to the forged-SYN listener
        sport = kForgedPortBase + (b >> 3);
        dport = p.listen_port[v6][kMaxFlows];
        forged_syn_listener[v6] = true;
        break;
      default:
        sport = kForgedPortBase + (b >> 3);
        dport = p.refusing_port[v6];
        break;
    }
    const uint8_t flags = in.U8();
    const uint16_t window = in.U16();
    const auto options = in.Record();
    const size_t opt_len = std::min<size_t>(options.size(), 40) & ~size_t{3};
    const auto payload_in = in.Record();
    const auto payload = payload_in.first(std::min<size_t>(payload_in.size(), 1400));
    std::vector<uint8_t> l4(20 + opt_len);
    wire::StoreBe16(&l4[0], sport);
    wire::StoreBe16(&l4[2], dport);
    wire::StoreBe32(&l4[4], seq);
    wire::StoreBe32(&l4[8], ack);
    l4[12] = static_cast<uint8_t>((20 + opt_len) / 4 << 4);
    l4[13] = flags;
    wire::StoreBe16(&l4[14], window);
    std::copy_n(options.begin(), opt_len, l4.begin() + 20);
    l4.insert(l4.end(), payload.begin(), payload.end());
    backend_link->Inject(
        v6 ? fuzz::Ipv6Frame(guest_mac, backend_mac, guest6, gateway6, 6, 64,
                             std::move(l4), ident++)
           : fuzz::Ipv4Frame(guest_mac, backend_mac, guest4, gateway4, 6,
                             std::move(l4), ident++),
        now);
  }

  static inline const wire::MacAddress guest_mac =
      *wire::MacAddress::Parse("02:00:00:00:00:64");
  static inline const wire::MacAddress backend_mac =
      *wire::MacAddress::Parse("02:00:00:00:00:02");
  Instant now = absl::FromUnixSeconds(1'700'000'000);
  const wire::Ipv4Address gateway4 = *wire::Ipv4Address::Parse("10.0.2.2");
  const wire::Ipv6Address gateway6 = *wire::Ipv6Address::Parse("fd00::2");
  const wire::Ipv4Address guest4 = *wire::Ipv4Address::Parse("10.0.2.100");
  const wire::Ipv6Address guest6 = *wire::Ipv6Address::Parse("fd00::100");
  std::unique_ptr<runtime::Runtime> guest_rt, backend_rt;
  // Parts of the runtimes.
  stack::FakeLink* guest_link = nullptr;
  stack::FakeLink* backend_link = nullptr;
  stack::Stack* guest = nullptr;
  stack::Stack* stack = nullptr;
  tcp::TcpLayer* guest_tcp = nullptr;
  Backend* backend = nullptr;
  std::vector<Flow> flows;
  std::vector<int> forged_fds;
  int lose_from_guest = 0, lose_to_guest = 0;
  uint16_t ident = 1;
  bool quiet = true;
  bool forged_syn_listener[2] = {false, false};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  Ports();
  uint32_t used[2] = {0, 0};
  const size_t fds = fuzz::OpenFdCount();
  buffer::ChunkPool guest_chunks(512), backend_chunks(512);
  buffer::PacketPool guest_packets(2048), backend_packets(2048);
  {
    BackendConfig config;
    config.policy.host_loopback = true;
    const uint8_t o1 = in.U8(), o2 = in.U8();
    config.limits.max_tcp_flows = 1 + o1 % 8;
    config.limits.tcp_guest_timeout = absl::Seconds((o1 >> 3) % 8);
    if (o2 & 1) {
      config.limits.guest_to_host_pending = 8 << 10;
      config.limits.host_to_guest_buffer = 16 << 10;
    }
    Fuzz f(config, guest_chunks, guest_packets, backend_chunks, backend_packets);
    f.flows.reserve(kMaxFlows);
    for (int step = 0; step < kMaxSteps && !in.done(); ++step) {
      const uint8_t op = in.U8();
      const uint8_t arg = in.U8();
      Flow* flow = f.flows.empty() ? nullptr : &f.flows[arg % f.flows.size()];
      const int k = flow ? static_cast<int>(flow - f.flows.data()) : 0;
      switch (op % 9) {
        case 0:
          f.Connect(arg & 1, (arg & 6) == 6);
          break;
        case 1:
          if (flow) f.GuestWrite(*flow, k, in.U16() % (kMaxWrite + 1));
          break;
        case 2:
          if (!flow || !flow->guest) break;
          switch ((arg >> 4) % 3) {
            case 0:
              if (flow->guest->Shutdown(false, true).ok()) flow->guest_wr_shut = true;
              break;
            case 1:
              flow->guest->Close();
              flow->guest.reset();
              flow->guest_closed = true;
              break;
            default:
              flow->guest->Abort();
              flow->guest.reset();
              break;
          }
          break;
        case 3:
          if (flow) f.HostWrite(*flow, k, in.U16() % (kMaxWrite + 1));
          break;
        case 4:
          if (!flow || flow->host_fd < 0 || flow->host_done) break;
          switch ((arg >> 4) % 4) {
            case 0:
              if (shutdown(flow->host_fd, SHUT_WR) == 0) flow->host_wr_shut = true;
              break;
            case 1:
              close(flow->host_fd);
              flow->host_fd = -1;
              flow->host_done = true;
              break;
            case 2:
              CloseAbortively(flow->host_fd);
              flow->host_fd = -1;
              flow->host_done = true;
              break;
            default:
              flow->host_reading = !flow->host_reading;
              break;
          }
          break;
        case 5:
        case 6:
          f.Forge(in);
          break;
        case 7:
          f.lose_from_guest = arg & 7;
          f.lose_to_guest = (arg >> 3) & 7;
          break;
        default:
          f.now += absl::Milliseconds(in.U16() % 2000);
          if (arg & 0x80) f.now += absl::Seconds(arg & 0x3f);
          break;
      }
      f.Settle();
      if (Verbose()) {
        std::fprintf(stderr, "step %d op %u arg %u: flows %zu quiet %d\n%s",
                     step, op % 9, arg, f.backend->tcp_flow_count(), f.quiet,
                     f.backend->FormatCounters().c_str());
      }
      f.Check();
    }
    for (const Flow& fl : f.flows) used[fl.v6] |= 1u << (&fl - f.flows.data());
    for (int v6 = 0; v6 < 2; ++v6) {
      if (f.forged_syn_listener[v6]) used[v6] |= 1u << kMaxFlows;
    }
  }
  FUZZ_CHECK(guest_chunks.stats().in_use == 0);
  FUZZ_CHECK(backend_chunks.stats().in_use == 0);
  FUZZ_CHECK(guest_packets.stats().in_use == 0);
  FUZZ_CHECK(backend_packets.stats().in_use == 0);
  DrainListeners(used);
  FUZZ_CHECK(fuzz::OpenFdCount() == fds);
  return 0;
}

}  // namespace netstack::backend
