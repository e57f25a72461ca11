#include "netstack/tcp/tcp_test_util.h"

#include <algorithm>

namespace netstack::tcp::testing {

namespace {
uint64_t Next(uint64_t& s) {
  s += 0x9e3779b97f4a7c15ull;
  uint64_t z = s;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double Uniform(uint64_t& s) {
  return static_cast<double>(Next(s) >> 11) / 9007199254740992.0;
}
}  // namespace

Host::Host(uint8_t host_id, const TcpLayerOptions& options, uint32_t mtu)
    : id(host_id) {
  link::LinkCapabilities caps;
  caps.mtu = mtu;
  caps.mac = wire::MacAddress{};
  caps.mac.bytes = {0x02, 0, 0, 0, 0, host_id};
  link = std::make_unique<stack::FakeLink>(chunks, caps);
  // Two hosts on the link: 16 neighbours are plenty. (The default 1,024
  // reserves and destroys two 1,024-entry tables per Host: a tenth of
  // tcp_conn_fuzzer's time, which builds two Hosts per input.)
  stack::StackOptions so;
  so.neighbor.capacity = 16;
  stack = std::make_unique<stack::Stack>(so, chunks, packets);
  const stack::NicId nic = *stack->AddNic(link.get(), "fake");
  (void)stack->AddAddress(
      nic, stack::Ipv4Cidr{wire::Ipv4Address::FromU32(0x0a000000u | host_id),
                           24});
  wire::Ipv6Address v6 = *wire::Ipv6Address::Parse("fd00::");
  v6.bytes[15] = host_id;
  (void)stack->AddAddress(nic, stack::Ipv6Cidr{v6, 64});
  TcpLayerOptions o = options;
  o.seed = options.seed + host_id;
  tcp = std::make_unique<TcpLayer>(*stack, chunks, packets, notifier, o);
}

transport::IpAddress Host::v4() const {
  return transport::IpAddress(wire::Ipv4Address::FromU32(0x0a000000u | id));
}

transport::IpAddress Host::v6() const {
  wire::Ipv6Address v6 = *wire::Ipv6Address::Parse("fd00::");
  v6.bytes[15] = id;
  return transport::IpAddress(v6);
}

Network::Network(const TcpLayerOptions& options, uint32_t mtu, uint64_t seed)
    : a_(std::make_unique<Host>(1, options, mtu)),
      b_(std::make_unique<Host>(2, options, mtu)),
      now_(absl::FromUnixSeconds(1'700'000'000)),
      rng_(seed) {}

void Network::Collect(Host& h, bool a_to_b) {
  for (auto& bytes : h.link->sent) {
    WireFrame f{std::move(bytes), a_to_b, now_ + delay};
    if (jitter > absl::ZeroDuration()) f.at += jitter * Uniform(rng_);
    if (filter && !filter(f)) {
      ++frames_dropped;
      continue;
    }

    if (loss > 0 && Uniform(rng_) < loss) {
      ++frames_dropped;
      continue;
    }
    const bool dup = duplicate > 0 && Uniform(rng_) < duplicate;
    auto pos = std::upper_bound(
        in_flight_.begin(), in_flight_.end(), f.at,
        [](Instant t, const WireFrame& w) { return t < w.at; });
    if (dup) pos = in_flight_.insert(pos, f) + 1;
    in_flight_.insert(pos, std::move(f));
    for (WireFrame& x : extra) {
      auto at = std::upper_bound(
          in_flight_.begin(), in_flight_.end(), x.at,
          [](Instant t, const WireFrame& w) { return t < w.at; });
      in_flight_.insert(at, std::move(x));
    }
    extra.clear();
  }
  h.link->sent.clear();
}

void Network::PollAll() {
  for (int i = 0; i < 8; ++i) {
    a_->notifier.Dispatch();
    b_->notifier.Dispatch();
    a_->stack->Poll(now_);
    b_->stack->Poll(now_);
    a_->tcp->Poll(now_);
    b_->tcp->Poll(now_);
    if (a_->notifier.empty() && b_->notifier.empty()) break;
  }
}

void Network::Step() {
  PollAll();
  Collect(*a_, true);
  Collect(*b_, false);
  // Deliver everything due, as one batch per direction.
  std::vector<std::vector<uint8_t>> to_a;
  std::vector<std::vector<uint8_t>> to_b;
  while (!in_flight_.empty() && in_flight_.front().at <= now_) {
    WireFrame& f = in_flight_.front();
    (f.a_to_b ? to_b : to_a).push_back(std::move(f.bytes));
    in_flight_.pop_front();
  }
  if (!to_b.empty()) b_->link->Inject(to_b, now_);
  if (!to_a.empty()) a_->link->Inject(to_a, now_);
  PollAll();
  Collect(*a_, true);
  Collect(*b_, false);
}

Instant Network::NextEvent() const {
  Instant t = kNever;
  if (!in_flight_.empty()) t = in_flight_.front().at;
  t = std::min({t, a_->tcp->NextDeadline(), b_->tcp->NextDeadline(),
                a_->stack->NextDeadline(), b_->stack->NextDeadline()});
  return t;
}

bool Network::RunUntil(const std::function<bool()>& done, Duration limit) {
  const Instant end = now_ + limit;
  Step();
  while (!done()) {
    const Instant next = NextEvent();
    if (next == kNever || next > end) {
      now_ = end;
      Step();
      return done();
    }
    now_ = std::max(now_, next);
    Step();
  }
  return true;
}

void Network::RunFor(Duration d) {
  RunUntil([] { return false; }, d);
}

}  // namespace netstack::tcp::testing
