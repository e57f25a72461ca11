#include "tools/netstackd/services/discard_service.h"

#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/transport/errors.h"

namespace netstack::tools {

class DiscardService::Connection {
 public:
  const tcp::TcpSocket& socket() const { return *socket_; }
  Connection(DiscardService& service, std::unique_ptr<tcp::TcpSocket> socket)
      : service_(service), socket_(std::move(socket)) {}

  void Start() {
    socket_->set_callback([this](uint32_t events) { OnEvent(events); });
    Drain();  // data may have arrived before the callback was set
  }

 private:
  void OnEvent(uint32_t events) {
    if (done_) return;
    if ((events & transport::event::kError) != 0 &&
        !socket_->TakeError().ok()) {
      Finish(/*error=*/true);
      return;
    }
    Drain();
  }

  void Drain() {
    while (!done_) {
      absl::StatusOr<size_t> n = socket_->Read(std::span<uint8_t>(
          service_.scratch_.get(), DiscardService::kScratchBytes));
      if (!n.ok()) {
        if (!transport::IsWouldBlock(n.status())) Finish(/*error=*/true);
        return;
      }
      if (*n == 0) {
        Finish(/*error=*/false);
        return;
      }
      service_.counters_.tcp_bytes += *n;
    }
  }

  void Finish(bool error) {
    done_ = true;
    if (error) ++service_.counters_.tcp_errors;
    socket_->Close();
    service_.conns_.Retire(this);
  }

  DiscardService& service_;
  std::unique_ptr<tcp::TcpSocket> socket_;
  bool done_ = false;
};

absl::StatusOr<std::unique_ptr<DiscardService>> DiscardService::Start(
    ServiceContext& ctx, uint16_t port) {
  std::unique_ptr<DiscardService> s(new DiscardService());
  DiscardService* self = s.get();
  auto listeners =
      TcpListeners::Open(*ctx.tcp, port, /*backlog=*/1024,
                         [self](std::unique_ptr<tcp::TcpSocket> c) {
                           self->Accept(std::move(c));
                         });
  if (!listeners.ok()) return listeners.status();
  s->listeners_ = std::move(*listeners);
  auto udp = BindUdpBoth(*ctx.udp, port);
  if (!udp.ok()) return udp.status();
  s->udp_ = std::move(*udp);
  for (auto& u : s->udp_) {
    udp::UdpSocket* raw = u.get();
    u->set_callback([self, raw](uint32_t events) {
      if ((events & transport::event::kReadable) != 0)
        self->OnUdpReadable(*raw);
    });
  }
  return s;
}

DiscardService::DiscardService() = default;

DiscardService::~DiscardService() = default;

void DiscardService::Sweep() { conns_.Sweep(); }

void DiscardService::Accept(std::unique_ptr<tcp::TcpSocket> s) {
  ++counters_.tcp_connections;
  conns_.Add(std::make_unique<Connection>(*this, std::move(s)))->Start();
}

void DiscardService::OnUdpReadable(udp::UdpSocket& s) {
  while (true) {
    // The payload stays in the received chunk; nothing is copied.
    absl::StatusOr<udp::ReceivedDatagram> d = s.RecvDatagram();
    if (!d.ok()) return;  // WouldBlock: drained
    ++counters_.udp_datagrams;
    counters_.udp_bytes += d->payload.size();
  }
}

std::string DiscardService::FormatCounters() const {
  return absl::StrCat(
      "service.discard.tcp_connections ", counters_.tcp_connections, "\n",
      "service.discard.tcp_open ", conns_.size(), "\n",
      "service.discard.tcp_bytes ", counters_.tcp_bytes, "\n",
      "service.discard.tcp_errors ", counters_.tcp_errors, "\n",
      "service.discard.udp_datagrams ", counters_.udp_datagrams, "\n",
      "service.discard.udp_bytes ", counters_.udp_bytes, "\n");
}

std::string DiscardService::FormatConnections() const {
  std::string out;
  conns_.ForEach([&](const Connection& c) {
    absl::StrAppend(
        &out, DescribeConnection("service.discard.connection", c.socket()));
  });
  return out;
}

}  // namespace netstack::tools
