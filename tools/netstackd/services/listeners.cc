#include "tools/netstackd/services/listeners.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "netstack/transport/address.h"
#include "netstack/transport/errors.h"

namespace netstack::tools {
namespace {

transport::SocketAddress AnyAddress(transport::Family family, uint16_t port) {
  transport::SocketAddress a;
  a.ip = family == transport::Family::kIpv4
             ? transport::IpAddress(wire::Ipv4Address())
             : transport::IpAddress(wire::Ipv6Address());
  a.port = port;
  return a;
}

// Names the socket in the message; keeps the code and the errno payload.
absl::Status Annotate(const char* proto, const transport::SocketAddress& a,
                      const absl::Status& s) {
  absl::Status out(s.code(), absl::StrCat(proto, " ", a.ToString(), ": ",
                                          std::string(s.message())));
  s.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpListeners>> TcpListeners::Open(
    tcp::TcpLayer& tcp, uint16_t port, uint32_t backlog,
    AcceptCallback on_accept) {
  std::unique_ptr<TcpListeners> l(new TcpListeners());
  l->on_accept_ = std::move(on_accept);
  const transport::Family families[2] = {transport::Family::kIpv4,
                                         transport::Family::kIpv6};
  for (int i = 0; i < 2; ++i) {
    const transport::SocketAddress any = AnyAddress(families[i], port);
    std::unique_ptr<tcp::TcpSocket> s = tcp.Open(families[i]);
    if (auto st = s->Bind(any); !st.ok()) return Annotate("TCP", any, st);
    if (auto st = s->Listen(backlog); !st.ok()) return Annotate("TCP", any, st);
    tcp::TcpSocket* raw = s.get();
    TcpListeners* self = l.get();
    s->set_callback([self, raw](uint32_t) { self->AcceptAll(*raw); });
    l->sockets_[i] = std::move(s);
  }
  return l;
}

void TcpListeners::AcceptAll(tcp::TcpSocket& listener) {
  while (true) {
    absl::StatusOr<std::unique_ptr<tcp::TcpSocket>> c = listener.Accept();
    if (!c.ok()) {
      if (!transport::IsWouldBlock(c.status())) ++accept_errors_;
      // A listener's pending error (if any) is not the new connection's.
      (void)listener.TakeError();
      return;
    }
    ++accepted_;
    on_accept_(std::move(*c));
  }
}

absl::StatusOr<std::array<std::unique_ptr<udp::UdpSocket>, 2>> BindUdpBoth(
    udp::UdpLayer& udp, uint16_t port) {
  std::array<std::unique_ptr<udp::UdpSocket>, 2> out;
  const transport::Family families[2] = {transport::Family::kIpv4,
                                         transport::Family::kIpv6};
  for (int i = 0; i < 2; ++i) {
    const transport::SocketAddress any = AnyAddress(families[i], port);
    out[i] = udp.Open(families[i]);
    if (auto st = out[i]->Bind(any); !st.ok()) return Annotate("UDP", any, st);
  }
  return out;
}

}  // namespace netstack::tools
