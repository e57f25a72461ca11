// The runtime: netstack wired once, for every program that runs it.
//
// A Runtime owns the pools, the link chain, the Stack with one NIC, the
// TCP and UDP layers, the event loop with its pollers, and (for a network
// backend) the Backend and its port forwards. It runs one ordered
// end-of-turn step, so no embedder has to know the order:
//
//   each turn of the loop:
//     1. the link's readable fd: a batch of frames up through the stack
//     2. timers (TCP, the backend's flows, DNS)
//     3. pollers: the stack (reassembly), the link (queued frames), and a
//        transport poller that keeps the loop awake for TCP's deadlines
//     4. end of turn: readiness callbacks (Notifier::Dispatch); the
//        sweeps (AddSweep: services, the backend's finished flows); TCP's
//        Poll (sends what the turn made pending); Stack::Flush (UDP)
//
// Two ways to drive it:
//   - its own loop: Run() until Stop() (from a callback) or an error;
//   - the caller's loop, smoltcp's poll/poll_at shape: wait until fd() is
//     readable or NextDeadline() has come, then call Poll(). fd() is the
//     loop's epoll fd: one fd stands for every fd the runtime watches.
//
//   RuntimeOptions o;
//   o.host.tap_name = "tap0";
//   o.addrs4 = {{wire::Ipv4Address(10, 0, 2, 2), 24}};
//   o.backend = backend::BackendConfig{};
//   absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Create(o);
//   if (!rt.ok()) ...;
//   (*rt)->Run();
//
// Threads: a Runtime belongs to one thread at a time; nothing in it is
// locked, and nothing in it is global, so two Runtimes in one process are
// independent (each its own pools, loop and keys).
#ifndef NETSTACK_RUNTIME_RUNTIME_H_
#define NETSTACK_RUNTIME_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/backend/backend.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/runtime/link_chain.h"
#include "netstack/runtime/port_forwards.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/notifier.h"
#include "netstack/udp/udp_layer.h"

namespace netstack::runtime {

// Opens the link's host endpoint with the runtime's pools (an embedder's
// own endpoint: a channel, a callback link, a fuzzer's).
using LinkFactory =
    absl::AnyInvocable<absl::StatusOr<std::unique_ptr<link::LinkEndpoint>>(
        buffer::ChunkPool& chunks, buffer::PacketPool& packets)>;

struct RuntimeOptions {
  // Payload chunks (64 KiB each) and packet headers. 1024 chunks is
  // 64 MiB at most, an eighth of it kept for receiving (chunk.h).
  size_t chunks = 1024;
  size_t packets = 16384;
  // Pools the caller owns, used instead of the two above when set; they
  // must outlive the runtime. For two runtimes on one in-memory channel
  // (its frames are copied into one pool), and for a fuzzer that checks
  // every chunk came back once the runtime is gone.
  buffer::ChunkPool* chunk_pool = nullptr;
  buffer::PacketPool* packet_pool = nullptr;

  // The link: `open_link` when set, else OpenHostLink(host). Then the
  // decorators (pcap, faults, software GSO) around it.
  LinkFactory open_link;
  HostLinkOptions host;
  LinkDecorators decorators;
  // The NIC's name in counters and logs; empty: the link's Name().
  std::string nic_name;

  // Our addresses on the NIC and the default routes.
  std::vector<stack::Ipv4Cidr> addrs4;
  std::vector<stack::Ipv6Cidr> addrs6;
  std::optional<wire::Ipv4Address> gateway4;
  std::optional<wire::Ipv6Address> gateway6;

  stack::StackOptions stack;
  // tcp.seed and udp_seed: 0 takes 64 random bits from the kernel (the
  // ISN and SYN-cookie keys and the ephemeral ports must not be
  // guessable). Fuzzers and tests set them to be repeatable.
  tcp::TcpLayerOptions tcp;
  uint64_t udp_seed = 0;

  // A network backend: the NIC is the guest's gateway (backend.h).
  std::optional<backend::BackendConfig> backend;
  // With a backend: its TCP flows only (the first Backend::Create), no
  // UDP flows, ping, DNS forwarder or guest configuration. For harnesses
  // of the TCP flow table (fuzz/tcp_flows_fuzzer.cc).
  bool backend_tcp_only = false;
  // With a backend: host -> guest forwards (port_forwards.h). Its `loop`
  // and `backend` are the runtime's, whatever is set here.
  PortForwards::Options forwards;

  // The loop's clock (event_loop.h); unset: CLOCK_MONOTONIC. Fuzzers and
  // tests drive a runtime on a fake clock.
  eventloop::EventLoop::Clock clock;
  // The loop's timer wheel (timer_wheel.h). A fuzzer that makes a runtime
  // per input and schedules no loop timers takes a small one: building and
  // clearing 512 slots was most of what the runtime added per input.
  eventloop::TimerWheelOptions timers;
};

class Runtime {
 public:
  // Builds everything, in order. Errors name the part that failed
  // ("link: ...", "address 10.0.2.2/24: ...", "backend: ...").
  static absl::StatusOr<std::unique_ptr<Runtime>> Create(
      RuntimeOptions options);
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  // Tears down in the reverse order: forwards, the backend's flows, the
  // layers' sockets, the loop, the link, the pools (those it owns).
  ~Runtime();

  // Its own loop: turns until Stop(). Returns OK after a Stop.
  absl::Status Run();
  void Stop() { loop_->Stop(); }

  // The caller's loop. fd() is readable when the runtime has I/O to do;
  // NextDeadline() is when it next has timed work (kNever: none;
  // InfinitePast: at once). Poll() runs one turn without blocking. Not
  // from inside a callback of this runtime.
  int fd() const { return loop_->fd(); }
  Instant NextDeadline() const { return loop_->NextDeadline(); }
  absl::Status Poll() { return loop_->RunOnce(absl::ZeroDuration()); }

  // Work to do at the end of every turn, after the readiness callbacks
  // and before TCP sends: a service's sweep of finished connections.
  // In the order added; safe to call from a callback or a sweep (a
  // removed sweep does not run again, an added one from the next turn).
  // kBeforeCallbacks runs first in the end of turn: for what the
  // callbacks read (a service context's `now`).
  using SweepId = uint64_t;
  enum class Phase { kBeforeCallbacks, kAfterCallbacks };
  SweepId AddSweep(absl::AnyInvocable<void(Instant now)> sweep,
                   Phase phase = Phase::kAfterCallbacks);
  void RemoveSweep(SweepId id);

  // Every counter, one "name value" line each: the stack, TCP, UDP, the
  // backend, the forwards, the fault injector, then each source added
  // with AddCounters (a service's, an API's), in the order added.
  std::string FormatCounters() const;
  void AddCounters(absl::AnyInvocable<std::string() const> source);

  buffer::ChunkPool& chunks() { return *chunks_; }
  buffer::PacketPool& packets() { return *packets_; }
  eventloop::EventLoop& loop() { return *loop_; }
  stack::Stack& stack() { return *stack_; }
  stack::NicId nic() const { return nic_; }
  link::LinkEndpoint& link() { return *link_; }
  // The host endpoint under the decorators (the TAP, the socket).
  link::LinkEndpoint& host_link() { return *host_link_; }
  link::FaultInjector* faults() { return faults_; }
  // The software GSO splitter (LinkDecorators::software_gso_max_size),
  // link() itself; null without one.
  link::GsoEndpoint* gso() { return gso_; }
  transport::Notifier& notifier() { return *notifier_; }
  tcp::TcpLayer& tcp() { return *tcp_; }
  udp::UdpLayer& udp() { return *udp_; }
  // Null without RuntimeOptions::backend.
  backend::Backend* backend() { return backend_.get(); }
  PortForwards* forwards() { return forwards_.get(); }
  // What a user should know about how the link was set up, one line each
  // (a TAP made without multi_queue has one queue), for the start lines.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  class LinkReadable;
  struct SweepEntry {
    SweepId id;
    Phase phase;
    absl::AnyInvocable<void(Instant now)> fn;  // null once removed
  };
  void RunSweeps(Phase phase, Instant now);
  Runtime() = default;
  absl::Status Init(RuntimeOptions& options);
  // Init's steps, in order.
  absl::Status InitLink(RuntimeOptions& o);
  absl::Status InitStack(RuntimeOptions& o);
  absl::Status InitLayers(RuntimeOptions& o);
  absl::Status InitLoop(RuntimeOptions& o);
  absl::Status InitBackend(RuntimeOptions& o);
  void EndTurn(Instant now);

  std::vector<std::string> notes_;
  // Declared in construction order; destroyed in the reverse.
  std::unique_ptr<buffer::ChunkPool> own_chunks_;  // null: borrowed
  std::unique_ptr<buffer::PacketPool> own_packets_;
  buffer::ChunkPool* chunks_ = nullptr;
  buffer::PacketPool* packets_ = nullptr;
  std::unique_ptr<link::LinkEndpoint> link_;
  link::LinkEndpoint* host_link_ = nullptr;
  link::FaultInjector* faults_ = nullptr;
  link::GsoEndpoint* gso_ = nullptr;
  int read_fd_ = -1;
  std::unique_ptr<stack::Stack> stack_;
  stack::NicId nic_{};
  std::unique_ptr<transport::Notifier> notifier_;
  std::unique_ptr<tcp::TcpLayer> tcp_;
  std::unique_ptr<udp::UdpLayer> udp_;
  std::unique_ptr<eventloop::EventLoop> loop_;
  std::unique_ptr<LinkReadable> link_readable_;
  std::vector<std::unique_ptr<eventloop::Poller>> pollers_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<PortForwards> forwards_;
  std::vector<absl::AnyInvocable<std::string() const>> counter_sources_;
  std::vector<SweepEntry> sweeps_;
  bool sweeps_dirty_ = false;
  SweepId next_sweep_id_ = 1;
};

}  // namespace netstack::runtime

#endif  // NETSTACK_RUNTIME_RUNTIME_H_
