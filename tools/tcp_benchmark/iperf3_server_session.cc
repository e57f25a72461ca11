#include "tools/tcp_benchmark/iperf3_server_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/transport/errors.h"
#include "tools/tcp_benchmark/report.h"

namespace netstack::tools::bench {

// A data connection until its cookie has arrived.
struct ServerSession::Pending {
  std::unique_ptr<Stream> stream;
  std::string cookie;
  bool matched = false;
  bool dead = false;
};

const char* ServerSession::PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kCookie: return "waiting for the cookie";
    case Phase::kParams: return "waiting for the test parameters";
    case Phase::kCreateStreams: return "waiting for the data connections";
    case Phase::kRunning: return "running the test";
    case Phase::kResults: return "waiting for the client's results";
    case Phase::kDone: return "waiting for IPERF_DONE";
    case Phase::kFinished: return "finished";
  }
  return "?";
}

ServerSession::ServerSession(eventloop::EventLoop& loop,
                             std::unique_ptr<Stream> control,
                             SessionOptions options, DoneCallback on_done)
    : loop_(loop), options_(options), on_done_(std::move(on_done)),
      peer_(control->Describe()),
      intervals_(loop, options.interval, options.progress),
      watchdog_([this](Instant) {
        Finish(absl::DeadlineExceededError(
            absl::StrCat("the client went silent while ", PhaseName(phase_))));
      }),
      promote_([this](Instant now) { PromotePending(now); }),
      stream_grace_([this](Instant) { Finish(stream_failure_); }) {
  ControlChannel::Callbacks callbacks;
  callbacks.on_input = [this] { OnControlInput(); };
  callbacks.on_failure = [this](absl::Status s) {
    Finish(absl::Status(s.code(), absl::StrCat("control connection failed while ",
                                               PhaseName(phase_), ": ",
                                               std::string(s.message()))));
  };
  control_ = std::make_unique<ControlChannel>(std::move(control),
                                              std::move(callbacks));
  SetPhase(Phase::kCookie);
}

ServerSession::~ServerSession() = default;

void ServerSession::SetPhase(Phase phase) {
  phase_ = phase;
  Duration limit = options_.phase_timeout;
  if (phase == Phase::kRunning) {
    // The client ends the test; allow its duration and a margin.
    limit = params_.duration > 0
                ? absl::Seconds(params_.duration + params_.omit) +
                      3 * options_.phase_timeout
                : absl::Hours(24);
  }
  if (phase == Phase::kFinished) {
    loop_.timers().Cancel(watchdog_);
  } else {
    loop_.timers().Schedule(watchdog_, loop_.Now() + limit);
  }
}

void ServerSession::OnControlInput() {
  bool progressed = true;
  while (phase_ != Phase::kFinished && progressed) {
    progressed = false;
    if (absl::Status s = Step(progressed); !s.ok()) {
      return Finish(s, iperf3::kErrMessage);
    }
  }
  if (phase_ == Phase::kFinished || !control_->eof()) return;
  if (phase_ == Phase::kDone) return Finish(summary_);
  if (phase_ == Phase::kCookie && control_->reader().buffered() == 0) {
    empty_connection_ = true;
  }
  Finish(absl::UnavailableError(absl::StrCat(
      "the client closed the control connection while ", PhaseName(phase_))));
}

absl::Status ServerSession::Step(bool& progressed) {
  iperf3::FrameReader& reader = control_->reader();
  switch (phase_) {
    case Phase::kCookie: {
      std::optional<std::string> cookie = reader.TakeBytes(iperf3::kCookieSize);
      if (!cookie) return absl::OkStatus();
      progressed = true;
      return HandleCookie(*cookie);
    }
    case Phase::kParams:
    case Phase::kResults: {
      absl::StatusOr<std::optional<JsonValue>> json = reader.TakeJson();
      if (!json.ok()) return json.status();
      if (!json->has_value()) return absl::OkStatus();
      progressed = true;
      return phase_ == Phase::kParams ? HandleParams(**json)
                                      : HandleClientResults(**json);
    }
    default: {
      std::optional<int8_t> state = reader.TakeState();
      if (!state) return absl::OkStatus();
      progressed = true;
      return HandleRunningState(*state);
    }
  }
}

absl::Status ServerSession::HandleCookie(const std::string& cookie) {
  if (!iperf3::IsWellFormedCookie(cookie)) {
    return absl::InvalidArgumentError(
        "the client's cookie is not 36 printable characters and a NUL");
  }
  cookie_ = cookie;
  // peer_ is the stream's "local -> remote": say which end is which.
  std::fprintf(options_.progress,
               "Accepted a connection: %s (ours -> the client's)\n",
               peer_.c_str());
  SetPhase(Phase::kParams);
  return control_->Send(iperf3::EncodeState(iperf3::kParamExchange));
}

absl::Status ServerSession::HandleParams(const JsonValue& json) {
  absl::StatusOr<iperf3::TestParams> params = iperf3::DecodeParams(json);
  if (!params.ok()) {
    Finish(params.status(), iperf3::kErrRecvParams);
    return absl::OkStatus();
  }
  if (!params->tcp || params->udp || params->sctp || params->bidirectional ||
      params->bytes > 0 || params->blocks > 0) {
    Finish(absl::UnimplementedError(
               "only TCP tests limited by time are supported (no UDP, SCTP, "
               "--bidir, -n or -k)"),
           iperf3::kErrProtocol);
    return absl::OkStatus();
  }
  params_ = *params;
  SetPhase(Phase::kCreateStreams);
  return control_->Send(iperf3::EncodeState(iperf3::kCreateStreams));
}

void ServerSession::OfferConnection(std::unique_ptr<Stream> stream) {
  auto pending = std::make_unique<Pending>();
  pending->stream = std::move(stream);
  Pending* p = pending.get();
  p->stream->SetHandler([this, p](uint32_t) { OnPendingReadable(p); });
  pending_.push_back(std::move(pending));
}

void ServerSession::OnPendingReadable(Pending* p) {
  if (p->dead || p->matched) return;
  // Read exactly the cookie: what follows is test data.
  uint8_t buf[iperf3::kCookieSize];
  absl::StatusOr<size_t> n =
      p->stream->Read({buf, iperf3::kCookieSize - p->cookie.size()});
  if (!n.ok() && transport::IsWouldBlock(n.status())) return;
  if (!n.ok() || *n == 0) {
    p->dead = true;
    p->stream->Close();
    return;
  }
  p->cookie.append(reinterpret_cast<const char*>(buf), *n);
  if (p->cookie.size() < iperf3::kCookieSize) return;
  if (p->cookie == cookie_) {
    p->matched = true;
  } else {
    std::fprintf(stderr,
                 "tcp_benchmark: refused data connection %s: wrong cookie\n",
                 p->stream->Describe().c_str());
    const uint8_t denied = static_cast<uint8_t>(iperf3::kAccessDenied);
    (void)p->stream->Write({&denied, 1});
    p->dead = true;
    p->stream->Close();
  }
  // Moving a stream to its DataStream replaces its handler: not from
  // inside that handler.
  loop_.timers().Schedule(promote_, loop_.Now());
}

void ServerSession::PromotePending(Instant now) {
  std::vector<std::unique_ptr<Pending>> keep;
  for (auto& p : pending_) {
    if (p->dead) continue;
    if (!p->matched) {
      keep.push_back(std::move(p));
      continue;
    }
    if (phase_ != Phase::kCreateStreams ||
        static_cast<int>(streams_.size()) >= params_.parallel) {
      p->stream->Close();  // one stream too many
      continue;
    }
    const int id = iperf3::StreamId(static_cast<int>(streams_.size()));
    streams_.push_back(std::make_unique<DataStream>(
        id, std::move(p->stream), loop_, "", params_.len,
        [this](int id, absl::Status s) { OnStreamFailed(id, std::move(s)); }));
  }
  pending_ = std::move(keep);
  if (phase_ == Phase::kCreateStreams &&
      static_cast<int>(streams_.size()) == params_.parallel) {
    if (absl::Status s = StartTest(); !s.ok()) Finish(s);
  }
}

absl::Status ServerSession::StartTest() {
  const Instant now = loop_.Now();
  for (const auto& p : pending_) p->stream->Close();
  pending_.clear();
  for (const auto& s : streams_) {
    std::fprintf(options_.progress, "[%s] local %s connected\n",
                 StreamLabel(s->id()).c_str(), s->Describe().c_str());
    s->Start(/*sender=*/params_.reverse, now);
  }
  cpu_.Start(now);
  intervals_.Start(&streams_, now);
  SetPhase(Phase::kRunning);
  return control_->Send(iperf3::EncodeState(iperf3::kTestStart) +
                        iperf3::EncodeState(iperf3::kTestRunning));
}

absl::Status ServerSession::HandleRunningState(int8_t state) {
  if (state == iperf3::kClientTerminate) {
    Finish(absl::AbortedError(
        absl::StrCat("the client terminated the test while ", PhaseName(phase_))));
    return absl::OkStatus();
  }
  if (phase_ == Phase::kDone && state == iperf3::kIperfDone) {
    Finish(summary_);
    return absl::OkStatus();
  }
  if (phase_ != Phase::kRunning || state != iperf3::kTestEnd) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected ", iperf3::StateName(state),
                     " from the client while ", PhaseName(phase_)));
  }
  // TEST_END: the client's clock says stop. As iperf3 does, close the data
  // connections now; bytes still in flight are not counted.
  const Instant now = loop_.Now();
  for (const auto& s : streams_) s->Stop(now);
  intervals_.Stop(now);
  local_results_ = LocalResults(streams_, params_.reverse, cpu_.Stop(now), now);
  for (const auto& s : streams_) s->Close();
  SetPhase(Phase::kResults);
  return control_->Send(iperf3::EncodeState(iperf3::kExchangeResults));
}

absl::Status ServerSession::HandleClientResults(const JsonValue& json) {
  absl::StatusOr<iperf3::TestResults> remote = iperf3::DecodeResults(json);
  if (!remote.ok()) {
    Finish(remote.status(), iperf3::kErrRecvResults);
    return absl::OkStatus();
  }
  absl::StatusOr<TestSummary> summary =
      params_.reverse ? Summarize(local_results_, *remote)
                      : Summarize(*remote, local_results_);
  if (!summary.ok()) {
    Finish(summary.status(), iperf3::kErrStreamId);
    return absl::OkStatus();
  }
  summary_ = *std::move(summary);
  SetPhase(Phase::kDone);
  return control_->Send(
      iperf3::EncodeJsonMessage(iperf3::EncodeResults(local_results_)) +
      iperf3::EncodeState(iperf3::kDisplayResults));
}

void ServerSession::Terminate() {
  if (phase_ == Phase::kFinished) return;
  (void)control_->Send(iperf3::EncodeState(iperf3::kServerTerminate));
  Finish(absl::AbortedError("the server was stopped"));
}

void ServerSession::OnStreamFailed(int id, absl::Status status) {
  if (phase_ == Phase::kFinished || !stream_failure_.ok()) return;
  stream_failure_ = absl::Status(
      status.code(), absl::StrCat("data stream ", id, " failed while ",
                                  PhaseName(phase_), ": ",
                                  std::string(status.message())));
  loop_.timers().Schedule(stream_grace_,
                          loop_.Now() + absl::Milliseconds(500));
}

void ServerSession::Finish(absl::StatusOr<TestSummary> result,
                           int32_t iperf_errno) {
  if (phase_ == Phase::kFinished) return;
  loop_.timers().Cancel(stream_grace_);
  if (!result.ok() && iperf_errno != 0 && !control_->closed()) {
    (void)control_->Send(iperf3::EncodeServerError(iperf_errno, 0));
  }
  SetPhase(Phase::kFinished);
  loop_.timers().Cancel(promote_);
  intervals_.Stop(loop_.Now());
  for (const auto& p : pending_) p->stream->Close();
  for (const auto& s : streams_) s->Close();
  control_->Close();
  if (on_done_) on_done_(std::move(result));
}

}  // namespace netstack::tools::bench
