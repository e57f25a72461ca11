#include "tools/tcp_benchmark/iperf3_client.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/transport/errors.h"
#include "tools/tcp_benchmark/report.h"

namespace netstack::tools::bench {

using iperf3::FrameReader;

const char* Iperf3Client::PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kConnecting: return "connecting";
    case Phase::kParamExchange: return "waiting for PARAM_EXCHANGE";
    case Phase::kCreateStreams: return "waiting for CREATE_STREAMS";
    case Phase::kTestStart: return "waiting for TEST_START";
    case Phase::kTestRunning: return "waiting for TEST_RUNNING";
    case Phase::kRunning: return "running the test";
    case Phase::kExchangeResults: return "waiting for EXCHANGE_RESULTS";
    case Phase::kResults: return "waiting for the server's results";
    case Phase::kDisplayResults: return "waiting for DISPLAY_RESULTS";
    case Phase::kServerError: return "reading a SERVER_ERROR";
    case Phase::kDone: return "done";
  }
  return "?";
}

Iperf3Client::Iperf3Client(Net& net, ClientOptions options,
                           absl::AnyInvocable<void()> on_done)
    : net_(net), loop_(net.loop()), options_(std::move(options)),
      on_done_(std::move(on_done)),
      rng_(options_.seed != 0
               ? options_.seed
               : static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()))),
      intervals_(loop_, options_.interval, options_.progress),
      end_timer_([this](Instant now) { EndTest(now); }),
      watchdog_([this](Instant) {
        Finish(absl::DeadlineExceededError(
            absl::StrCat("no answer from the server while ", PhaseName(phase_),
                         " (", absl::FormatDuration(options_.phase_timeout),
                         ")")));
      }) {}

Iperf3Client::~Iperf3Client() {
  // Streams and the control channel close themselves.
}

absl::Status Iperf3Client::Start() {
  if (options_.streams < 1 || options_.streams > 128) {
    return absl::InvalidArgumentError("--streams must be in 1..128");
  }
  if (!(options_.duration > 0)) {
    return absl::InvalidArgumentError("--duration must be positive");
  }
  cookie_ = iperf3::MakeCookie(rng_);
  absl::StatusOr<std::unique_ptr<Stream>> stream =
      net_.Connect(options_.server, options_.stream_options);
  if (!stream.ok()) return stream.status();
  ControlChannel::Callbacks callbacks;
  callbacks.on_input = [this] { OnControlInput(); };
  callbacks.on_failure = [this](absl::Status s) {
    Finish(absl::Status(s.code(), absl::StrCat("control connection failed while ",
                                               PhaseName(phase_), ": ",
                                               std::string(s.message()))));
  };
  callbacks.on_connected = [this] {
    std::fprintf(options_.progress, "Connecting to host %s, port %d\n",
                 options_.server.ip.ToString().c_str(), options_.server.port);
    if (absl::Status s = control_->Send(cookie_); !s.ok()) return Finish(s);
    SetPhase(Phase::kParamExchange);
  };
  control_ = std::make_unique<ControlChannel>(*std::move(stream),
                                              std::move(callbacks),
                                              /*connecting=*/true);
  SetPhase(Phase::kConnecting);
  return absl::OkStatus();
}

void Iperf3Client::SetPhase(Phase phase) {
  phase_ = phase;
  if (phase == Phase::kRunning || phase == Phase::kDone) {
    loop_.timers().Cancel(watchdog_);
  } else {
    loop_.timers().Schedule(watchdog_, loop_.Now() + options_.phase_timeout);
  }
}

void Iperf3Client::OnControlInput() {
  bool progressed = true;
  while (!done_ && progressed) {
    progressed = false;
    if (absl::Status s = Step(progressed); !s.ok()) return Finish(s);
  }
  if (done_ || !control_->eof()) return;
  Finish(absl::UnavailableError(absl::StrCat(
      "the server closed the control connection while ", PhaseName(phase_))));
}

// Consumes at most one message; `progressed` tells whether it did.
absl::Status Iperf3Client::Step(bool& progressed) {
  FrameReader& reader = control_->reader();
  if (phase_ == Phase::kServerError) {
    if (reader.buffered() < 8) return absl::OkStatus();
    const int32_t iperf_errno = *reader.TakeInt32();
    const int32_t sys_errno = *reader.TakeInt32();
    return absl::UnavailableError(absl::StrCat(
        "the server reported an error (iperf3 error ", iperf_errno,
        sys_errno != 0 ? absl::StrCat(", ", std::strerror(sys_errno)) : "",
        ")"));
  }
  if (phase_ == Phase::kResults) {
    absl::StatusOr<std::optional<JsonValue>> json = reader.TakeJson();
    if (!json.ok()) return json.status();
    if (!json->has_value()) return absl::OkStatus();
    progressed = true;
    return HandleServerResults(**json);
  }
  std::optional<int8_t> state = reader.TakeState();
  if (!state) return absl::OkStatus();
  progressed = true;
  return HandleState(*state);
}

absl::Status Iperf3Client::HandleState(int8_t state) {
  using namespace iperf3;
  switch (state) {
    case kAccessDenied:
      return absl::UnavailableError(
          "the server is busy running a test (ACCESS_DENIED)");
    case kServerError:
      phase_ = Phase::kServerError;
      return absl::OkStatus();
    case kServerTerminate:
      return absl::AbortedError("the server terminated the test");
  }
  auto expect = [&](Phase phase, int8_t wanted) {
    return phase_ == phase && state == wanted;
  };
  if (expect(Phase::kParamExchange, kParamExchange)) {
    TestParams p;
    p.duration = options_.duration;
    p.parallel = options_.streams;
    p.reverse = options_.reverse;
    p.len = static_cast<int64_t>(options_.block_size);
    p.no_delay = options_.stream_options.no_delay;
    p.window = options_.stream_options.send_buffer;
    p.congestion = options_.stream_options.congestion_control;
    SetPhase(Phase::kCreateStreams);
    return control_->Send(EncodeJsonMessage(EncodeParams(p)));
  }
  if (expect(Phase::kCreateStreams, kCreateStreams)) {
    SetPhase(Phase::kTestStart);
    return CreateStreams();
  }
  if (expect(Phase::kTestStart, kTestStart)) {
    SetPhase(Phase::kTestRunning);
    return absl::OkStatus();
  }
  if (expect(Phase::kTestRunning, kTestRunning)) {
    StartTest();
    return absl::OkStatus();
  }
  if (expect(Phase::kExchangeResults, kExchangeResults)) {
    SetPhase(Phase::kResults);
    return SendResults();
  }
  if (expect(Phase::kDisplayResults, kDisplayResults)) {
    absl::Status s = control_->Send(EncodeState(kIperfDone));
    Finish(s);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unexpected ", StateName(state), " from the server while ",
      PhaseName(phase_)));
}

absl::Status Iperf3Client::CreateStreams() {
  for (int i = 0; i < options_.streams; ++i) {
    absl::StatusOr<std::unique_ptr<Stream>> stream =
        net_.Connect(options_.server, options_.stream_options);
    if (!stream.ok()) return stream.status();
    streams_.push_back(std::make_unique<DataStream>(
        iperf3::StreamId(i), *std::move(stream), loop_, cookie_,
        options_.block_size, [this](int id, absl::Status s) {
          Finish(absl::Status(
              s.code(), absl::StrCat("data stream ", id, " failed while ",
                                     PhaseName(phase_), ": ",
                                     std::string(s.message()))));
        }));
  }
  return absl::OkStatus();
}

void Iperf3Client::StartTest() {
  const Instant now = loop_.Now();
  for (const auto& s : streams_) {
    std::fprintf(options_.progress, "[%s] local %s connected\n",
                 StreamLabel(s->id()).c_str(), s->Describe().c_str());
    s->Start(/*sender=*/!options_.reverse, now);
  }
  cpu_.Start(now);
  intervals_.Start(&streams_, now);
  SetPhase(Phase::kRunning);
  loop_.timers().Schedule(end_timer_, now + absl::Seconds(options_.duration));
}

void Iperf3Client::EndTest(Instant now) {
  for (const auto& s : streams_) s->Stop(now);
  intervals_.Stop(now);
  cpu_.Stop(now);
  SetPhase(Phase::kExchangeResults);
  if (absl::Status s = control_->Send(iperf3::EncodeState(iperf3::kTestEnd));
      !s.ok()) {
    Finish(s);
  }
}

absl::Status Iperf3Client::SendResults() {
  // A receiver counts until now, as iperf3 does (the sender may still have
  // been flushing).
  local_results_ =
      LocalResults(streams_, !options_.reverse, cpu_.result(), loop_.Now());
  return control_->Send(iperf3::EncodeJsonMessage(
      iperf3::EncodeResults(local_results_)));
}

absl::Status Iperf3Client::HandleServerResults(const JsonValue& json) {
  absl::StatusOr<iperf3::TestResults> remote = iperf3::DecodeResults(json);
  if (!remote.ok()) return remote.status();
  absl::StatusOr<TestSummary> summary =
      options_.reverse ? Summarize(*remote, local_results_)
                       : Summarize(local_results_, *remote);
  if (!summary.ok()) return summary.status();
  result_ = *std::move(summary);
  SetPhase(Phase::kDisplayResults);
  return absl::OkStatus();
}

void Iperf3Client::Interrupt() {
  if (done_) return;
  if (control_ != nullptr && !control_->closed() &&
      phase_ != Phase::kConnecting) {
    (void)control_->Send(iperf3::EncodeState(iperf3::kClientTerminate));
  }
  Finish(absl::CancelledError("interrupted"));
}

void Iperf3Client::Finish(absl::Status status) {
  if (done_) return;
  done_ = true;
  if (!status.ok()) result_ = status;
  phase_ = Phase::kDone;
  loop_.timers().Cancel(watchdog_);
  loop_.timers().Cancel(end_timer_);
  intervals_.Stop(loop_.Now());
  for (const auto& s : streams_) s->Close();
  if (control_ != nullptr) control_->Close();
  if (on_done_) on_done_();
}

}  // namespace netstack::tools::bench
