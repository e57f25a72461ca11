#include "link/gso_endpoint.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace netstack::link {

absl::StatusOr<std::unique_ptr<GsoEndpoint>> GsoEndpoint::Create(
    std::unique_ptr<LinkEndpoint> inner, buffer::PacketPool& packets,
    const GsoEndpointOptions& options) {
  if (inner == nullptr) {
    return absl::InvalidArgumentError("gso: no inner endpoint to wrap");
  }
  if (options.gso_max_size > kMaxGsoIpLen) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gso(", inner->Name(), "): gso_max_size ", options.gso_max_size,
        " exceeds ", kMaxGsoIpLen, ", the largest IP length field"));
  }
  const uint32_t mtu = inner->Capabilities().mtu;
  if (options.gso_max_size <= mtu) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gso(", inner->Name(), "): gso_max_size ", options.gso_max_size,
        " must be above the link MTU ", mtu));
  }
  return std::unique_ptr<GsoEndpoint>(
      new GsoEndpoint(std::move(inner), packets, options));
}

GsoEndpoint::GsoEndpoint(std::unique_ptr<LinkEndpoint> inner,
                         buffer::PacketPool& packets,
                         const GsoEndpointOptions& options)
    : inner_(std::move(inner)), packets_(packets), options_(options) {}

LinkCapabilities GsoEndpoint::Capabilities() const {
  LinkCapabilities caps = inner_->Capabilities();
  caps.gso_max_size = options_.gso_max_size;
  // The splitter cuts TCP only: UDP super-datagrams are cut above it.
  caps.udp_gso = false;
  return caps;
}

void GsoEndpoint::Attach(LinkReceiver* receiver) { inner_->Attach(receiver); }

size_t GsoEndpoint::Transmit(buffer::PacketChain& chain, Instant now) {
  const uint32_t mtu = inner_->Capabilities().mtu;
  while (buffer::PacketPtr p = chain.PopFront()) {
    const size_t before = wire_.size();
    const GsoSplitStatus s = SplitGso(std::move(p), packets_, wire_, mtu);
    stats_.Count(s, wire_.size() - before);
  }
  const size_t sent = inner_->Transmit(wire_, now);
  // What the inner endpoint left goes back in front of whatever the caller
  // has queued meanwhile (nothing, today: the chain was emptied above).
  wire_.Append(std::move(chain));
  chain.Append(std::move(wire_));
  return sent;
}

int GsoEndpoint::ReadFd() const { return inner_->ReadFd(); }

void GsoEndpoint::OnReadable(Instant now) { inner_->OnReadable(now); }

int GsoEndpoint::WriteFd() const { return inner_->WriteFd(); }

Instant GsoEndpoint::NextDeadline() const { return inner_->NextDeadline(); }

void GsoEndpoint::Poll(Instant now) { inner_->Poll(now); }

LinkStats GsoEndpoint::Stats() const { return inner_->Stats(); }

std::string GsoEndpoint::Name() const {
  return absl::StrCat("gso(sw ", options_.gso_max_size, ") -> ",
                      inner_->Name());
}

}  // namespace netstack::link
