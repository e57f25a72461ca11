#include "tools/tcp_benchmark/netstack_link.h"

#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "link/gso_endpoint.h"
#include "link/fault_injector.h"
#include "netstack/stack/route_table.h"
#include "tools/tcp_benchmark/flags.h"

namespace netstack::tools::bench {

using runtime::HostLinkOptions;
using runtime::LinkDecorators;

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

absl::StatusOr<GsoMode> LinkOptionsFromFlags(runtime::RuntimeOptions& options) {
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

  HostLinkOptions& host = options.host;
  host.tap_name = tap;
  host.packet_interface = packet;
  host.netns = absl::GetFlag(FLAGS_netns);
  host.mtu = static_cast<uint32_t>(mtu);
  if (*mode == GsoMode::kHost) {
    host.host_gso_max_size = static_cast<uint32_t>(gso_size);
  }
  LinkDecorators& decorators = options.decorators;
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
  options.nic_name = tap.empty() ? packet : tap;

  for (const std::string& a : absl::GetFlag(FLAGS_addr)) {
    auto cidr = stack::ParseIpv4Cidr(a);
    if (!cidr) {
      return Usage(absl::StrCat("--addr: bad IPv4 CIDR '", a,
                                "' (want e.g. 10.9.0.2/24)"));
    }
    options.addrs4.push_back(*cidr);
  }
  for (const std::string& a : absl::GetFlag(FLAGS_addr6)) {
    auto cidr = stack::ParseIpv6Cidr(a);
    if (!cidr) {
      return Usage(absl::StrCat("--addr6: bad IPv6 CIDR '", a,
                                "' (want e.g. fd00:9::2/64)"));
    }
    options.addrs6.push_back(*cidr);
  }
  if (options.addrs4.empty() && options.addrs6.empty()) {
    return Usage("--stack=netstack needs --addr or --addr6");
  }
  return *mode;
}

std::string FormatLinkCounters(runtime::Runtime& rt, GsoMode mode) {
  // Frames, drops and syscalls are the stack's link.NIC.* lines (the same
  // endpoint); here only what those do not say.
  const link::LinkEndpoint& outer = rt.link();
  const link::LinkStats s = outer.Stats();
  std::string text = absl::StrCat(
      "link.name ", outer.Name(), "\n", "link.gso_mode ", GsoModeName(mode),
      "\n", "link.tx_bytes ", s.tx_bytes, "\n", "link.rx_bytes ", s.rx_bytes,
      "\n");
  if (const link::GsoEndpoint* gso = rt.gso(); gso != nullptr) {
    const link::GsoStats& g = gso->gso_stats();
    absl::StrAppend(&text, "gso.super_segments ", g.super_segments, "\n",
                    "gso.packets_out ", g.packets_out, "\n",
                    "gso.passed_through ", g.passed_through, "\n",
                    "gso.malformed ", g.malformed, "\n", "gso.bad_gso_size ",
                    g.bad_gso_size, "\n", "gso.no_buffer ", g.no_buffer,
                    "\n", "gso.too_many_views ", g.too_many_views, "\n");
  }
  if (const link::FaultInjector* faults = rt.faults(); faults != nullptr) {
    for (auto [dir, f] : {std::pair{"egress", &faults->egress_stats()},
                          std::pair{"ingress", &faults->ingress_stats()}}) {
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
