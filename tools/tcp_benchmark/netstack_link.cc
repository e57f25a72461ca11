#include "tools/tcp_benchmark/netstack_link.h"

#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "link/gso_endpoint.h"
#include "netstack/stack/route_table.h"
#include "netstack/runtime/link_chain.h"
#include "tools/tcp_benchmark/flags.h"

namespace netstack::tools::bench {

using runtime::DecorateLink;
using runtime::HostLinkOptions;
using runtime::LinkDecorators;
using runtime::OpenHostLink;

namespace {

absl::Status Usage(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

absl::StatusOr<GsoMode> GsoModeFromFlags() {
  const bool sw = absl::GetFlag(FLAGS_swgso);
  const bool host = absl::GetFlag(FLAGS_hostgso);
  const int size = absl::GetFlag(FLAGS_gso);
  if (sw && host) return Usage("--swgso and --hostgso exclude each other");
  if (size < 0 || size > 65535) {
    return Usage(absl::StrCat("--gso ", size, " out of range [0, 65535]"));
  }
  if (size == 0) return GsoMode::kOff;
  if (sw) return GsoMode::kSoftware;
  if (host) return GsoMode::kHost;
  return GsoMode::kOff;
}

absl::StatusOr<link::FaultProfile> FaultsFromFlags() {
  link::FaultProfile f;
  f.loss = absl::GetFlag(FLAGS_loss);
  f.duplicate = absl::GetFlag(FLAGS_duplicate);
  f.reorder = absl::GetFlag(FLAGS_reorder);
  f.delay = absl::GetFlag(FLAGS_latency);
  for (auto [name, v] : {std::pair{"loss", f.loss},
                         std::pair{"duplicate", f.duplicate},
                         std::pair{"reorder", f.reorder}}) {
    if (!(v >= 0 && v <= 1)) {
      return Usage(absl::StrCat("--", name, " ", v,
                                " is not a fraction in [0, 1] (0.01 = 1%)"));
    }
  }
  if (f.delay < absl::ZeroDuration()) {
    return Usage("--latency must not be negative");
  }
  return f;
}

}  // namespace

const char* GsoModeName(GsoMode mode) {
  switch (mode) {
    case GsoMode::kOff:
      return "off";
    case GsoMode::kSoftware:
      return "sw";
    case GsoMode::kHost:
      return "host";
  }
  return "?";
}

class NetstackLink::Handler : public eventloop::Handler {
 public:
  explicit Handler(link::LinkEndpoint& link) : link_(link) {}
  void OnReadable(Instant now) override { link_.OnReadable(now); }

 private:
  link::LinkEndpoint& link_;
};

NetstackLink::~NetstackLink() = default;

absl::StatusOr<std::unique_ptr<NetstackLink>> NetstackLink::FromFlags(
    buffer::ChunkPool& chunks, buffer::PacketPool& packets) {
  const std::string tap = absl::GetFlag(FLAGS_tap);
  const std::string packet = absl::GetFlag(FLAGS_packet);
  if (tap.empty() == packet.empty()) {
    return Usage("--stack=netstack needs exactly one of --packet or --tap");
  }
  const int mtu = absl::GetFlag(FLAGS_mtu);
  if (mtu != 0 && (mtu < 1280 || mtu > 65535)) {
    return Usage(absl::StrCat("--mtu ", mtu, " out of range [1280, 65535]"));
  }
  const int gso_size = absl::GetFlag(FLAGS_gso);
  absl::StatusOr<GsoMode> mode = GsoModeFromFlags();
  if (!mode.ok()) return mode.status();
  absl::StatusOr<link::FaultProfile> faults = FaultsFromFlags();
  if (!faults.ok()) return faults.status();

  std::unique_ptr<NetstackLink> l(new NetstackLink());
  l->gso_mode_ = *mode;
  HostLinkOptions host;
  host.tap_name = tap;
  host.packet_interface = packet;
  host.netns = absl::GetFlag(FLAGS_netns);
  host.mtu = static_cast<uint32_t>(mtu);
  if (*mode == GsoMode::kHost) {
    host.host_gso_max_size = static_cast<uint32_t>(gso_size);
  }
  auto base = OpenHostLink(host, chunks);
  if (!base.ok()) return base.status();
  LinkDecorators decorators;
  decorators.pcap = absl::GetFlag(FLAGS_pcap);
  if (faults->Active()) {
    link::FaultInjectorOptions fo;
    fo.egress = *faults;
    fo.ingress = *faults;
    fo.seed = absl::GetFlag(FLAGS_seed);
    fo.queue_limit = 100000;
    decorators.faults = fo;
  }
  if (*mode == GsoMode::kSoftware) {
    decorators.software_gso_max_size = static_cast<uint32_t>(gso_size);
  }
  auto chain = DecorateLink(*std::move(base), decorators, chunks, packets);
  if (!chain.ok()) return chain.status();
  l->outer_ = std::move(chain->outer);
  l->faults_ = chain->faults;
  l->gso_ = chain->gso;
  l->read_fd_ = chain->read_fd;
  l->nic_name_ = tap.empty() ? packet : tap;
  return l;
}

absl::Status NetstackLink::Configure(stack::Stack& stack) {
  absl::StatusOr<stack::NicId> nic = stack.AddNic(outer_.get(), nic_name_);
  if (!nic.ok()) return nic.status();
  for (const std::string& a : absl::GetFlag(FLAGS_addr)) {
    auto cidr = stack::ParseIpv4Cidr(a);
    if (!cidr) {
      return Usage(absl::StrCat("--addr: bad IPv4 CIDR '", a,
                                "' (want e.g. 10.9.0.2/24)"));
    }
    if (absl::Status s = stack.AddAddress(*nic, *cidr); !s.ok()) return s;
  }
  for (const std::string& a : absl::GetFlag(FLAGS_addr6)) {
    auto cidr = stack::ParseIpv6Cidr(a);
    if (!cidr) {
      return Usage(absl::StrCat("--addr6: bad IPv6 CIDR '", a,
                                "' (want e.g. fd00:9::2/64)"));
    }
    if (absl::Status s = stack.AddAddress(*nic, *cidr); !s.ok()) return s;
  }
  if (absl::GetFlag(FLAGS_addr).empty() && absl::GetFlag(FLAGS_addr6).empty()) {
    return Usage("--stack=netstack needs --addr or --addr6");
  }
  return absl::OkStatus();
}

absl::Status NetstackLink::Register(eventloop::EventLoop& loop) {
  handler_ = std::make_unique<Handler>(*outer_);
  return loop.Add(read_fd_, eventloop::EventLoop::kReadable, handler_.get());
}

void NetstackLink::Unregister(eventloop::EventLoop& loop) {
  if (handler_ != nullptr && loop.IsRegistered(read_fd_)) {
    (void)loop.Remove(read_fd_);
  }
}

std::string NetstackLink::FormatCounters() const {
  // Frames, drops and syscalls are the stack's link.NIC.* lines (the same
  // endpoint); here only what those do not say.
  const link::LinkStats s = outer_->Stats();
  std::string text = absl::StrCat(
      "link.name ", outer_->Name(), "\n", "link.gso_mode ",
      GsoModeName(gso_mode_), "\n", "link.tx_bytes ", s.tx_bytes, "\n",
      "link.rx_bytes ", s.rx_bytes, "\n");
  if (gso_ != nullptr) {
    const link::GsoStats& g = gso_->gso_stats();
    absl::StrAppend(&text, "gso.super_segments ", g.super_segments, "\n",
                    "gso.packets_out ", g.packets_out, "\n",
                    "gso.passed_through ", g.passed_through, "\n",
                    "gso.malformed ", g.malformed, "\n", "gso.bad_gso_size ",
                    g.bad_gso_size, "\n", "gso.no_buffer ", g.no_buffer,
                    "\n", "gso.too_many_views ", g.too_many_views, "\n");
  }
  if (faults_ != nullptr) {
    for (auto [dir, f] : {std::pair{"egress", &faults_->egress_stats()},
                          std::pair{"ingress", &faults_->ingress_stats()}}) {
      absl::StrAppend(&text, "fault.", dir, ".in ", f->packets_in, "\n",
                      "fault.", dir, ".dropped ", f->dropped, "\n", "fault.",
                      dir, ".duplicated ", f->duplicated, "\n", "fault.", dir,
                      ".reordered ", f->reordered, "\n", "fault.", dir,
                      ".overflow ", f->overflow, "\n");
    }
  }
  return text;
}

}  // namespace netstack::tools::bench
