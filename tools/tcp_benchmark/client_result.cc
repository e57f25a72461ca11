#include "tools/tcp_benchmark/client_result.h"

#include <cctype>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace netstack::tools::bench {
namespace {

class Scanner {
 public:
  explicit Scanner(std::string_view text) : text_(text) {}

  void SkipSpace() {
    while (pos_ < text_.size() &&
           std::isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  bool Eat(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }
  bool String(std::string& out);
  bool Scalar(std::string& out);  // number, true, false, null

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

bool Scanner::String(std::string& out) {
  if (!Eat('"')) return false;
  out.clear();
  while (pos_ < text_.size()) {
    const char c = text_[pos_++];
    if (c == '"') return true;
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (pos_ == text_.size()) return false;
    const char e = text_[pos_++];
    switch (e) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case '"':
      case '\\':
      case '/':
        out.push_back(e);
        break;
      default:
        out.push_back('\\');
        out.push_back(e);
    }
  }
  return false;
}

bool Scanner::Scalar(std::string& out) {
  SkipSpace();
  const size_t start = pos_;
  while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '}' &&
         !std::isspace(static_cast<unsigned char>(text_[pos_]))) {
    ++pos_;
  }
  out = std::string(text_.substr(start, pos_ - start));
  return !out.empty() && out[0] != '{' && out[0] != '[';
}

template <typename T>
absl::Status Number(const FlatJson& json, std::string_view key, T& out) {
  auto it = json.find(key);
  if (it == json.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("client JSON has no \"", std::string(key), "\""));
  }
  bool ok;
  if constexpr (std::is_same_v<T, double>) {
    ok = absl::SimpleAtod(it->second, &out);
  } else {
    ok = absl::SimpleAtoi(it->second, &out);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("client JSON: \"", std::string(key),
                     "\" is not a number: ", it->second));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FlatJson> ParseFlatJsonObject(std::string_view text) {
  Scanner scan(text);
  FlatJson json;
  if (!scan.Eat('{')) return absl::InvalidArgumentError("expected '{'");
  if (scan.Eat('}')) return json;
  do {
    std::string key, value;
    if (!scan.String(key) || !scan.Eat(':')) {
      return absl::InvalidArgumentError("expected \"key\":");
    }
    scan.SkipSpace();
    const bool ok = scan.String(value) || scan.Scalar(value);
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad value of \"", key, "\""));
    }
    json[key] = value;
  } while (scan.Eat(','));
  if (!scan.Eat('}') || !scan.AtEnd()) {
    return absl::InvalidArgumentError("expected '}' at the end");
  }
  return json;
}

absl::StatusOr<ClientResult> ParseClientResult(std::string_view stdout_text) {
  // The object may be pretty-printed: it starts at the last '{' that
  // begins a line and runs to the end.
  // (Debian's Abseil has its own string_view.)
  absl::string_view object = absl::StripAsciiWhitespace(
      absl::string_view(stdout_text.data(), stdout_text.size()));
  const size_t at = object.rfind("\n{");
  if (at != absl::string_view::npos) object.remove_prefix(at + 1);
  if (!absl::StartsWith(object, "{")) {
    return absl::InvalidArgumentError("the client printed no JSON object");
  }
  absl::StatusOr<FlatJson> json =
      ParseFlatJsonObject(std::string_view(object.data(), object.size()));
  if (!json.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "client JSON: ", json.status().message(), ": ", std::string(object)));
  }
  ClientResult result;
  result.stack = (*json)["stack"];
  result.reverse = (*json)["reverse"] == "true";
  for (absl::Status s :
       {Number(*json, "bytes", result.bytes),
        Number(*json, "seconds", result.seconds),
        Number(*json, "gbps", result.gbps),
        Number(*json, "retransmits", result.retransmits),
        Number(*json, "sender_cpu_util", result.sender_cpu_util),
        Number(*json, "receiver_cpu_util", result.receiver_cpu_util)}) {
    if (!s.ok()) return s;
  }
  return result;
}

}  // namespace netstack::tools::bench
