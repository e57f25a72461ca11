#include "netstack/runtime/runtime.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/runtime/stack_runtime.h"

namespace netstack::runtime {

// The link's fd is readable: its batch goes up through the stack.
class Runtime::LinkReadable : public eventloop::Handler {
 public:
  explicit LinkReadable(link::LinkEndpoint& link) : link_(link) {}
  void OnReadable(Instant now) override { link_.OnReadable(now); }

 private:
  link::LinkEndpoint& link_;
};

namespace {

// Runs nothing itself: it keeps the loop awake for the TCP layer's next
// deadline and, while readiness callbacks are pending, for an immediate
// turn. The work is done at the end of every turn (EndTurn).
class TransportPoller : public eventloop::Poller {
 public:
  TransportPoller(const tcp::TcpLayer& tcp, const transport::Notifier& notifier)
      : tcp_(tcp), notifier_(notifier) {}
  Instant NextDeadline() const override {
    return notifier_.empty() ? tcp_.NextDeadline() : absl::InfinitePast();
  }
  void Poll(Instant) override {}

 private:
  const tcp::TcpLayer& tcp_;
  const transport::Notifier& notifier_;
};

absl::Status Prefixed(absl::string_view what, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

// A seed the caller gave, or 64 random bits.
absl::StatusOr<uint64_t> SeedOrRandom(uint64_t given) {
  if (given != 0) return given;
  return RandomSeed();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(
    RuntimeOptions options) {
  std::unique_ptr<Runtime> rt(new Runtime());
  if (absl::Status s = rt->Init(options); !s.ok()) return s;
  return rt;
}

absl::Status Runtime::Init(RuntimeOptions& o) {
  if (o.chunk_pool == nullptr) {
    own_chunks_ = std::make_unique<buffer::ChunkPool>(o.chunks);
  }
  if (o.packet_pool == nullptr) {
    own_packets_ = std::make_unique<buffer::PacketPool>(o.packets);
  }
  chunks_ = o.chunk_pool != nullptr ? o.chunk_pool : own_chunks_.get();
  packets_ = o.packet_pool != nullptr ? o.packet_pool : own_packets_.get();
  for (absl::Status (Runtime::*step)(RuntimeOptions&) :
       {&Runtime::InitLink, &Runtime::InitStack, &Runtime::InitLayers,
        &Runtime::InitLoop, &Runtime::InitBackend}) {
    if (absl::Status s = (this->*step)(o); !s.ok()) return s;
  }
  // The end of every turn, in this order: readiness callbacks (the
  // services read and write), the sweeps (free what they finished), the
  // backend's sweep, then TCP sends what the batch and the callbacks made
  // pending (its Poll ends with Stack::Flush; the second Flush covers UDP
  // when TCP had nothing).
  loop_->AddTurnEndHook([this](Instant now) { EndTurn(now); });
  return absl::OkStatus();
}

// The link: the host endpoint, then its decorators.
absl::Status Runtime::InitLink(RuntimeOptions& o) {
  absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> host =
      o.open_link ? o.open_link(*chunks_, *packets_)
                  : OpenHostLink(o.host, *chunks_, &notes_);
  if (!host.ok()) return Prefixed("link", host.status());
  absl::StatusOr<LinkChain> chain =
      DecorateLink(*std::move(host), o.decorators, *chunks_, *packets_);
  if (!chain.ok()) return chain.status();
  link_ = std::move(chain->outer);
  host_link_ = chain->host;
  faults_ = chain->faults;
  gso_ = chain->gso;
  read_fd_ = chain->read_fd;
  return absl::OkStatus();
}

// The stack, its NIC on the link, our addresses and the default routes.
absl::Status Runtime::InitStack(RuntimeOptions& o) {
  // A backend whose guest has no IPv6 (BackendPolicy::ipv6) answers none.
  if (o.backend && !o.backend->policy.ipv6) o.stack.ipv6 = false;
  stack_ = std::make_unique<stack::Stack>(o.stack, *chunks_, *packets_);
  absl::StatusOr<stack::NicId> nic = stack_->AddNic(
      link_.get(), o.nic_name.empty() ? link_->Name() : o.nic_name);
  if (!nic.ok()) return Prefixed("nic", nic.status());
  nic_ = *nic;
  for (const stack::Ipv4Cidr& a : o.addrs4) {
    if (absl::Status s = stack_->AddAddress(nic_, a); !s.ok()) {
      return Prefixed(
          absl::StrCat("address ", a.address.ToString(), "/", a.prefix_len), s);
    }
  }
  for (const stack::Ipv6Cidr& a : o.addrs6) {
    if (absl::Status s = stack_->AddAddress(nic_, a); !s.ok()) {
      return Prefixed(
          absl::StrCat("address ", a.address.ToString(), "/", a.prefix_len), s);
    }
  }
  if (o.gateway4) {
    (void)stack_->AddRoute(stack::Route<wire::Ipv4Address>{
        stack::Ipv4Cidr{wire::Ipv4Address(), 0}, *o.gateway4, nic_});
  }
  if (o.gateway6) {
    (void)stack_->AddRoute(stack::Route<wire::Ipv6Address>{
        stack::Ipv6Cidr{wire::Ipv6Address(), 0}, *o.gateway6, nic_});
  }
  return absl::OkStatus();
}

// TCP and UDP, with their keys; both register themselves with the stack.
absl::Status Runtime::InitLayers(RuntimeOptions& o) {
  absl::StatusOr<uint64_t> tcp_seed = SeedOrRandom(o.tcp.seed);
  if (!tcp_seed.ok()) return tcp_seed.status();
  absl::StatusOr<uint64_t> udp_seed = SeedOrRandom(o.udp_seed);
  if (!udp_seed.ok()) return udp_seed.status();
  o.tcp.seed = *tcp_seed;
  notifier_ = std::make_unique<transport::Notifier>();
  tcp_ = std::make_unique<tcp::TcpLayer>(*stack_, *chunks_, *packets_,
                                         *notifier_, o.tcp);
  udp_ = std::make_unique<udp::UdpLayer>(*stack_, *chunks_, *packets_,
                                         *notifier_, *udp_seed);
  return absl::OkStatus();
}

// The loop, the link's fd on it, and the pollers that keep it awake for
// the stack, the link and TCP.
absl::Status Runtime::InitLoop(RuntimeOptions& o) {
  absl::StatusOr<std::unique_ptr<eventloop::EventLoop>> loop =
      eventloop::EventLoop::Create(o.timers, std::move(o.clock));
  if (!loop.ok()) return Prefixed("event loop", loop.status());
  loop_ = *std::move(loop);
  if (read_fd_ >= 0) {
    link_readable_ = std::make_unique<LinkReadable>(*link_);
    if (absl::Status s = loop_->Add(read_fd_, eventloop::EventLoop::kReadable,
                                    link_readable_.get());
        !s.ok()) {
      return Prefixed("link", s);
    }
  }
  pollers_.push_back(
      std::make_unique<eventloop::PollerRef<stack::Stack>>(stack_.get()));
  pollers_.push_back(
      std::make_unique<eventloop::PollerRef<link::LinkEndpoint>>(link_.get()));
  pollers_.push_back(std::make_unique<TransportPoller>(*tcp_, *notifier_));
  for (const auto& p : pollers_) loop_->AddPoller(p.get());
  return absl::OkStatus();
}

// With a backend: the NIC becomes the guest's gateway, with forwards.
absl::Status Runtime::InitBackend(RuntimeOptions& o) {
  if (!o.backend) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<backend::Backend>> b =
      o.backend_tcp_only
          ? backend::Backend::Create(*o.backend, *stack_, nic_, *tcp_, *loop_,
                                     *chunks_)
          : backend::Backend::Create(*o.backend, *stack_, nic_, *tcp_, *udp_,
                                     *loop_, *chunks_, *packets_);
  if (!b.ok()) return Prefixed("backend", b.status());
  backend_ = *std::move(b);
  PortForwards::Options fo = o.forwards;
  fo.loop = loop_.get();
  fo.backend = backend_.get();
  forwards_ = std::make_unique<PortForwards>(fo);
  return absl::OkStatus();
}

void Runtime::RunSweeps(Phase phase, Instant now) {
  // By index: a sweep may add another (it runs from the next turn on).
  const size_t n = sweeps_.size();
  for (size_t i = 0; i < n; ++i) {
    if (sweeps_[i].phase == phase && sweeps_[i].fn) sweeps_[i].fn(now);
  }
}

void Runtime::EndTurn(Instant now) {
  RunSweeps(Phase::kBeforeCallbacks, now);
  notifier_->Dispatch();
  RunSweeps(Phase::kAfterCallbacks, now);
  if (sweeps_dirty_) {
    std::erase_if(sweeps_, [](const SweepEntry& e) { return !e.fn; });
    sweeps_dirty_ = false;
  }
  if (backend_) backend_->Sweep(now);
  tcp_->Poll(now);
  stack_->Flush(now);
}

Runtime::SweepId Runtime::AddSweep(absl::AnyInvocable<void(Instant now)> sweep,
                                   Phase phase) {
  const SweepId id = next_sweep_id_++;
  sweeps_.push_back(SweepEntry{id, phase, std::move(sweep)});
  return id;
}

void Runtime::RemoveSweep(SweepId id) {
  for (SweepEntry& e : sweeps_) {
    if (e.id == id) {
      e.fn = nullptr;
      sweeps_dirty_ = true;
    }
  }
}

absl::Status Runtime::Run() { return loop_->Run(); }

void Runtime::AddCounters(absl::AnyInvocable<std::string() const> source) {
  counter_sources_.push_back(std::move(source));
}

std::string Runtime::FormatCounters() const {
  std::string text = stack_->FormatCounters();
  absl::StrAppend(&text, tcp_->FormatCounters());
  if (!text.empty() && text.back() != '\n') text.push_back('\n');
  absl::StrAppend(&text, udp_->counters().Format());
  if (backend_) absl::StrAppend(&text, backend_->FormatCounters());
  if (forwards_) absl::StrAppend(&text, forwards_->FormatCounters());
  if (faults_ != nullptr) {
    for (auto [dir, f] : {std::pair{"egress", &faults_->egress_stats()},
                          std::pair{"ingress", &faults_->ingress_stats()}}) {
      absl::StrAppend(
          &text, "fault.", dir, ".in ", f->packets_in, "\n", "fault.", dir,
          ".out ", f->packets_out, "\n", "fault.", dir, ".dropped ", f->dropped,
          "\n", "fault.", dir, ".duplicated ", f->duplicated, "\n", "fault.",
          dir, ".reordered ", f->reordered, "\n", "fault.", dir, ".corrupted ",
          f->corrupted, "\n", "fault.", dir, ".delayed ", f->delayed, "\n",
          "fault.", dir, ".overflow ", f->overflow, "\n");
    }
  }
  for (const auto& source : counter_sources_) absl::StrAppend(&text, source());
  return text;
}

Runtime::~Runtime() {
  // Forwards first (their flows belong to the backend), then the backend
  // (its flows hold the layers' sockets and the loop's timers).
  forwards_.reset();
  backend_.reset();
  if (loop_) {
    for (const auto& p : pollers_) loop_->RemovePoller(p.get());
    if (read_fd_ >= 0 && link_readable_) (void)loop_->Remove(read_fd_);
  }
}

}  // namespace netstack::runtime
