#include "netstack/runtime/link_chain.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "link/packet_endpoint.h"
#include "link/sniffer_endpoint.h"
#include "link/tap_endpoint.h"

namespace netstack::runtime {
namespace {

// (Debian's Abseil: StrCat takes no std::string_view.)
absl::Status Prefixed(const char* prefix, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// The fields TapOptions and PacketOptions share.
template <typename EndpointOptions>
EndpointOptions CommonOptions(const HostLinkOptions& options) {
  EndpointOptions o;
  o.netns = options.netns;
  o.mac = options.mac;
  if (options.mtu != 0) o.mtu = options.mtu;
  o.host_gso = options.host_gso_max_size > 0;
  if (o.host_gso) o.gso_max_size = options.host_gso_max_size;
  return o;
}

}  // namespace

absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> OpenHostLink(
    const HostLinkOptions& options, buffer::ChunkPool& chunks,
    std::vector<std::string>* notes) {
  if (options.tap_fd >= 0) {
    if (!options.packet_interface.empty() || !options.tap_name.empty()) {
      return absl::InvalidArgumentError(
          "a host link needs exactly one of an interface, a TAP name and a "
          "TAP fd");
    }
    auto o = CommonOptions<link::TapOptions>(options);
    auto ep = link::TapEndpoint::FromFd(options.tap_fd, o, chunks);
    if (!ep.ok()) return ep.status();
    return std::unique_ptr<link::LinkEndpoint>(std::move(*ep));
  }
  if (options.packet_interface.empty() == options.tap_name.empty()) {
    return absl::InvalidArgumentError(
        "a host link needs exactly one of an interface and a TAP name");
  }
  if (!options.tap_name.empty()) {
    auto o = CommonOptions<link::TapOptions>(options);
    o.name = options.tap_name;
    o.netns_fd = options.tap_netns_fd;
    o.tx_queue_len = options.tap_tx_queue_len;
    o.queues = options.tap_queues;
    auto ep = link::TapEndpoint::Open(o, chunks);
    if (!ep.ok()) return ep.status();
    if ((*ep)->queue_count() < o.queues && notes != nullptr) {
      notes->push_back(absl::StrCat(
          (*ep)->Name(), " has one queue (it was made without multi_queue): "
          "a guest's flood of new flows shares it with the established ones"));
    }
    return std::unique_ptr<link::LinkEndpoint>(std::move(*ep));
  }
  auto o = CommonOptions<link::PacketOptions>(options);
  o.interface = options.packet_interface;
  auto ep = link::PacketEndpoint::Open(o, chunks);
  if (!ep.ok()) return ep.status();
  return std::unique_ptr<link::LinkEndpoint>(std::move(*ep));
}

absl::StatusOr<LinkChain> DecorateLink(std::unique_ptr<link::LinkEndpoint> host,
                                       const LinkDecorators& decorators,
                                       buffer::ChunkPool& chunks,
                                       buffer::PacketPool& packets) {
  LinkChain chain;
  chain.host = host.get();
  chain.read_fd = host->ReadFd();
  chain.outer = std::move(host);
  if (!decorators.pcap.empty()) {
    auto sniffer =
        link::SnifferEndpoint::Create(std::move(chain.outer), decorators.pcap);
    if (!sniffer.ok()) return Prefixed("--pcap: ", sniffer.status());
    chain.outer = std::move(*sniffer);
  }
  if (decorators.faults.has_value()) {
    auto fi = link::FaultInjector::Create(std::move(chain.outer), packets,
                                          chunks, *decorators.faults);
    if (!fi.ok()) return Prefixed("faults: ", fi.status());
    chain.faults = fi->get();
    chain.outer = std::move(*fi);
  }
  if (decorators.software_gso_max_size > 0) {
    link::GsoEndpointOptions go;
    go.gso_max_size = decorators.software_gso_max_size;
    auto gso = link::GsoEndpoint::Create(std::move(chain.outer), packets, go);
    if (!gso.ok()) return Prefixed("--gso: ", gso.status());
    chain.gso = gso->get();
    chain.outer = std::move(*gso);
  }
  return chain;
}

}  // namespace netstack::runtime
