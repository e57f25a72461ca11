#include "tools/tcp_benchmark/iperf3_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/transport/errors.h"

namespace netstack::tools::bench {

Iperf3Server::Iperf3Server(Net& net, ServerOptions options,
                           absl::AnyInvocable<void(int)> on_exit)
    : net_(net), loop_(net.loop()), options_(std::move(options)),
      on_exit_(std::move(on_exit)),
      reaper_([this](Instant now) { Reap(now); }) {}

Iperf3Server::~Iperf3Server() = default;

absl::Status Iperf3Server::Start() {
  absl::StatusOr<std::unique_ptr<Listener>> listener =
      net_.Listen(options_.local, options_.stream_options);
  if (!listener.ok()) return listener.status();
  listener_ = *std::move(listener);
  listener_->SetHandler([this] { OnAcceptable(); });
  std::fprintf(options_.session.progress,
               "-----------------------------------------------------------\n"
               "Server listening on %d (%s)\n"
               "-----------------------------------------------------------\n",
               options_.local.port, net_.Describe().c_str());
  std::fflush(options_.session.progress);
  return absl::OkStatus();
}

void Iperf3Server::OnAcceptable() {
  for (int i = 0; i < 64 && !exiting_; ++i) {
    absl::StatusOr<std::unique_ptr<Stream>> stream = listener_->Accept();
    if (!stream.ok()) {
      if (!transport::IsWouldBlock(stream.status())) {
        std::fprintf(stderr, "tcp_benchmark: accept: %s\n",
                     std::string(stream.status().message()).c_str());
      }
      return;
    }
    if (session_ == nullptr) {
      session_ = std::make_unique<ServerSession>(
          loop_, *std::move(stream), options_.session,
          [this](absl::StatusOr<TestSummary> r) { OnSessionDone(std::move(r)); });
    } else if (session_->accepting_streams()) {
      session_->OfferConnection(*std::move(stream));
    } else {
      // Busy: like iperf3, answer without reading (the cookie could block
      // the running test) and close.
      const uint8_t denied = static_cast<uint8_t>(iperf3::kAccessDenied);
      (void)(*stream)->Write({&denied, 1});
      (*stream)->Close();
    }
  }
}

void Iperf3Server::OnSessionDone(absl::StatusOr<TestSummary> result) {
  std::FILE* text = options_.session.progress;
  const std::string peer = session_->peer();
  const bool counts = !session_->empty_connection();
  if (result.ok()) {
    if (options_.json) {
      SummaryContext c{"server", options_.stack_name, net_.Describe(), peer,
                       session_->reverse()};
      std::fprintf(options_.out, "%s\n", FormatSummaryJson(*result, c).c_str());
      std::fflush(options_.out);
    }
    std::fprintf(text, "%s", FormatSummaryText(*result, session_->reverse()).c_str());
  } else if (counts) {
    std::fprintf(stderr, "tcp_benchmark: test with %s failed: %s\n",
                 peer.c_str(), std::string(result.status().message()).c_str());
  }
  std::fflush(text);
  finished_.push_back(std::move(session_));
  loop_.timers().Schedule(reaper_, loop_.Now());
  if (options_.one_off && counts && !exiting_) Exit(result.ok() ? 0 : 1);
}

void Iperf3Server::Reap(Instant) { finished_.clear(); }

void Iperf3Server::Stop() {
  if (exiting_) return;
  if (session_ != nullptr) {
    options_.one_off = false;  // the session's end is not the test's verdict
    session_->Terminate();     // calls OnSessionDone
  }
  Exit(0);
}

void Iperf3Server::Exit(int status) {
  exiting_ = true;
  listener_.reset();
  if (on_exit_) on_exit_(status);
}

}  // namespace netstack::tools::bench
