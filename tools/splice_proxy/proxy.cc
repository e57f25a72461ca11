#include "tools/splice_proxy/proxy.h"

#include <string.h>
#include <unistd.h>

#include <csignal>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/splice_proxy/forward_counters.h"
#include "tools/splice_proxy/log.h"

namespace netstack::tools {

absl::StatusOr<std::unique_ptr<Proxy>> Proxy::Create(ProxyConfig config) {
  auto loop = eventloop::EventLoop::Create();
  if (!loop.ok()) return loop.status();
  return std::unique_ptr<Proxy>(new Proxy(std::move(config), std::move(*loop)));
}

Proxy::Proxy(ProxyConfig config, std::unique_ptr<eventloop::EventLoop> loop)
    : config_(std::move(config)),
      loop_(std::move(loop)),
      pipes_(config_.pipes),
      grace_timer_([this](Instant) {
        LogLine(absl::StrCat("shutdown grace over: closing ", OpenConnections(),
                             " open connections"));
        CloseEverything();
        loop_->Stop();
      }),
      trim_timer_([this](Instant) { MaybeTrimPipes(); }) {}

Proxy::~Proxy() { CloseEverything(); }

absl::StatusOr<size_t> Proxy::Start() {
  if (absl::Status s = loop_->HandleSignals(
          {SIGINT, SIGTERM, SIGUSR1},
          [this](int signo, Instant now) { OnSignal(signo, now); });
      !s.ok()) {
    return s;
  }
  loop_->AddTurnEndHook([this](Instant now) { OnTurnEnd(now); });
  for (size_t i = 0; i < config_.forwards.size(); ++i) {
    const ForwardSpec& spec = config_.forwards[i];
    forwarders_.emplace_back();
    start_errors_.emplace_back();
    const std::string name = absl::StrCat("forward ", i);
    absl::Status status = spec.error;
    if (status.ok()) {
      auto forwarder = std::make_unique<Forwarder>(
          static_cast<int>(i), spec.options, *loop_, pipes_);
      status = forwarder->Listen();
      if (status.ok()) {
        LogLine(absl::StrCat(
            name, ": listening on ", forwarder->bound().ToString(),
            ", forwarding to ", spec.options.target.ToString(), " (mode ",
            std::string(forward::RelayModeName(spec.options.relay.mode)), ")"));
        forwarders_.back() = std::move(forwarder);
        ++started_;
        continue;
      }
    }
    start_errors_.back() = std::string(status.message());
    LogLine(absl::StrCat(name, " (--listen ", spec.listen_text, " --connect ",
                         spec.connect_text,
                         ") cannot start: ", start_errors_.back()));
  }
  return started_;
}

absl::Status Proxy::Run() {
  LogLine(absl::StrCat("running, pid ", getpid(), ": ", started_, " of ",
                       config_.forwards.size(),
                       " forwards listening; SIGUSR1 prints stats, SIGINT or "
                       "SIGTERM stops"));
  const absl::Status status = loop_->Run();
  loop_->timers().Cancel(grace_timer_);
  loop_->timers().Cancel(trim_timer_);
  CloseEverything();
  PrintStats("exit");
  return status;
}

size_t Proxy::OpenConnections() const {
  size_t open = 0;
  for (const auto& f : forwarders_) {
    if (f != nullptr) open += f->open_connections();
  }
  return open;
}

void Proxy::OnSignal(int signo, Instant now) {
  if (signo == SIGUSR1) {
    PrintStats("SIGUSR1");
    return;
  }
  const std::string name = sigabbrev_np(signo) != nullptr
                               ? absl::StrCat("SIG", sigabbrev_np(signo))
                               : absl::StrCat("signal ", signo);
  if (stopping_) {
    LogLine(absl::StrCat(name, " again: closing ", OpenConnections(),
                         " open connections now"));
    CloseEverything();
    loop_->Stop();
    return;
  }
  stopping_ = true;
  loop_->timers().Cancel(trim_timer_);
  for (const auto& f : forwarders_) {
    if (f != nullptr) f->StopListening();
  }
  const size_t open = OpenConnections();
  if (open == 0) {
    LogLine(absl::StrCat(name, ": stopped listening; no open connections"));
    loop_->Stop();
    return;
  }
  LogLine(absl::StrCat(name, ": stopped listening; waiting up to ",
                       absl::FormatDuration(config_.shutdown_grace), " for ",
                       open,
                       " open connections (a second signal closes "
                       "them now)"));
  loop_->timers().Schedule(grace_timer_, now + config_.shutdown_grace);
}

void Proxy::OnTurnEnd(Instant now) {
  for (const auto& f : forwarders_) {
    if (f != nullptr) f->Reap();
  }
  const size_t open = OpenConnections();
  if (stopping_) {
    if (open == 0) loop_->Stop();
    return;
  }
  if (open > 0) {
    if (idle_) {
      idle_ = false;
      loop_->timers().Cancel(trim_timer_);
    }
    return;
  }
  if (!idle_) {
    idle_ = true;
    if (config_.pipe_idle_timeout != absl::InfiniteDuration()) {
      loop_->timers().Schedule(trim_timer_, now + config_.pipe_idle_timeout);
    }
  }
}

void Proxy::MaybeTrimPipes() {
  // Trim touches only the pooled pipes, so a connection accepted earlier
  // in this turn (before the timers ran) is no danger; it just means the
  // proxy is no longer idle, and the pool keeps its pipes.
  if (OpenConnections() > 0) return;
  const size_t pooled = pipes_.Trim();
  if (config_.verbose && pooled > 0) {
    LogLine(absl::StrCat("idle for ",
                         absl::FormatDuration(config_.pipe_idle_timeout),
                         ": closed ", pooled, " pooled pipes"));
  }
}

void Proxy::CloseEverything() {
  for (const auto& f : forwarders_) {
    if (f == nullptr) continue;
    f->StopListening();
    f->CloseAll();
    f->Reap();
  }
}

std::string Proxy::FormatStats(const std::string& why) const {
  std::string text = absl::StrCat("splice_proxy: stats (", why, "):\n");
  ForwardCounters total;
  for (size_t i = 0; i < config_.forwards.size(); ++i) {
    const ForwardSpec& spec = config_.forwards[i];
    const Forwarder* f =
        i < forwarders_.size() ? forwarders_[i].get() : nullptr;
    const std::string name = absl::StrCat("  forward ", i);
    if (f == nullptr) {
      absl::StrAppend(&text, name, ": listen=", spec.listen_text,
                      " connect=", spec.connect_text, " state=failed (",
                      i < start_errors_.size() ? start_errors_[i] : "", ")\n");
      continue;
    }
    const ForwardCounters c = f->counters();
    total.Add(c);
    absl::StrAppend(
        &text, name, ": listen=", f->bound().ToString(),
        " connect=", spec.options.target.ToString(),
        " mode=", std::string(forward::RelayModeName(spec.options.relay.mode)),
        " state=", f->listening() ? "listening" : "stopped", "\n", name,
        " connections: ", c.FormatConnections(), "\n", name,
        " client_to_server: ", c.client_to_server.Format(), "\n", name,
        " server_to_client: ", c.server_to_client.Format(), "\n");
  }
  absl::StrAppend(
      &text, "  total connections: ", total.FormatConnections(), "\n",
      "  total client_to_server: ", total.client_to_server.Format(), "\n",
      "  total server_to_client: ", total.server_to_client.Format(), "\n",
      "  pipes: ", FormatPipeStats(pipes_.stats()), "\n",
      "splice_proxy: end of stats (", why, ")\n");
  return text;
}

void Proxy::PrintStats(const std::string& why) const {
  // One write, so that the block is not interleaved with other output.
  const std::string text = FormatStats(why);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n =
        write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

}  // namespace netstack::tools
