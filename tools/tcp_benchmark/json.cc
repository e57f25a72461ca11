#include "tools/tcp_benchmark/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace netstack::tools::bench {

JsonValue JsonValue::Bool(bool b) {
  JsonValue v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  return v;
}
JsonValue JsonValue::Number(double d) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.number_ = d;
  return v;
}
JsonValue JsonValue::String(std::string s) {
  JsonValue v;
  v.type_ = Type::kString;
  v.string_ = std::move(s);
  return v;
}
JsonValue JsonValue::Array(std::vector<JsonValue> items) {
  JsonValue v;
  v.type_ = Type::kArray;
  v.items_ = std::move(items);
  return v;
}
JsonValue JsonValue::Object(std::vector<Member> members) {
  JsonValue v;
  v.type_ = Type::kObject;
  v.members_ = std::move(members);
  return v;
}

const JsonValue* JsonValue::Find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const Member& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

std::optional<double> JsonValue::GetNumber(std::string_view key) const {
  const JsonValue* v = Find(key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->number();
}

std::optional<int64_t> JsonValue::GetInt(std::string_view key) const {
  std::optional<double> d = GetNumber(key);
  // 2^63 is exactly representable; anything at or past it is out of range.
  if (!d || *d != std::floor(*d) || *d < -9.2233720368547758e18 ||
      *d >= 9.2233720368547758e18) {
    return std::nullopt;
  }
  return static_cast<int64_t>(*d);
}

std::optional<bool> JsonValue::GetBool(std::string_view key) const {
  const JsonValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_bool()) return v->bool_value();
  if (v->is_number()) return v->number() != 0;
  return std::nullopt;
}

std::optional<std::string> JsonValue::GetString(std::string_view key) const {
  const JsonValue* v = Find(key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->string();
}

namespace {

// Recursive descent over RFC 8259's grammar.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    absl::StatusOr<JsonValue> v = ParseValue(0);
    if (!v.ok()) return v;
    SkipSpace();
    if (pos_ != text_.size()) return Error("trailing characters");
    return v;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("bad JSON at offset ", pos_, ": ", what));
  }
  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::StatusOr<JsonValue> ParseValue(int depth) {
    if (depth >= kJsonMaxDepth) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end");
    const char c = text_[pos_];
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') {
      absl::StatusOr<std::string> s = ParseString();
      if (!s.ok()) return s.status();
      return JsonValue::String(*std::move(s));
    }
    if (Consume("true")) return JsonValue::Bool(true);
    if (Consume("false")) return JsonValue::Bool(false);
    if (Consume("null")) return JsonValue();
    return ParseNumber();
  }

  absl::StatusOr<JsonValue> ParseObject(int depth) {
    ++pos_;  // '{'
    std::vector<JsonValue::Member> members;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return JsonValue::Object(std::move(members));
    }
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') {
        return Error("expected a member name");
      }
      absl::StatusOr<std::string> key = ParseString();
      if (!key.ok()) return key.status();
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      absl::StatusOr<JsonValue> value = ParseValue(depth + 1);
      if (!value.ok()) return value.status();
      members.emplace_back(*std::move(key), *std::move(value));
      SkipSpace();
      if (pos_ >= text_.size()) return Error("unterminated object");
      if (text_[pos_++] == '}') return JsonValue::Object(std::move(members));
      if (text_[pos_ - 1] != ',') return Error("expected ',' or '}'");
    }
  }

  absl::StatusOr<JsonValue> ParseArray(int depth) {
    ++pos_;  // '['
    std::vector<JsonValue> items;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return JsonValue::Array(std::move(items));
    }
    while (true) {
      absl::StatusOr<JsonValue> value = ParseValue(depth + 1);
      if (!value.ok()) return value.status();
      items.push_back(*std::move(value));
      SkipSpace();
      if (pos_ >= text_.size()) return Error("unterminated array");
      if (text_[pos_++] == ']') return JsonValue::Array(std::move(items));
      if (text_[pos_ - 1] != ',') return Error("expected ',' or ']'");
    }
  }

  absl::StatusOr<JsonValue> ParseNumber() {
    // Check the grammar ourselves (strtod would also take "inf", hex...).
    const size_t start = pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        ++pos_;
      }
      return pos_ > from;
    };
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    if (!digits()) return Error("expected a value");
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!digits()) return Error("bad number");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) {
        ++pos_;
      }
      if (!digits()) return Error("bad number");
    }
    const std::string literal(text_.substr(start, pos_ - start));
    const double value = std::strtod(literal.c_str(), nullptr);
    // Past a double's range strtod says infinity, which JSON cannot say
    // back (the writer makes it null). Underflow rounds toward zero: fine.
    if (!std::isfinite(value)) return Error("number out of range");
    return JsonValue::Number(value);
  }

  // Four hex digits of a \u escape.
  std::optional<uint32_t> Hex4() {
    if (text_.size() - pos_ < 4) return std::nullopt;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else return std::nullopt;
    }
    return v;
  }

  static void AppendUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  // A \u escape, with its low surrogate when it is a high one. Lone
  // surrogates become U+FFFD rather than an error: tolerant reading.
  absl::Status ParseUnicodeEscape(std::string& out) {
    std::optional<uint32_t> cp = Hex4();
    if (!cp) return Error("bad \\u escape");
    if (*cp >= 0xd800 && *cp < 0xdc00 && Consume("\\u")) {
      std::optional<uint32_t> low = Hex4();
      if (!low) return Error("bad \\u escape");
      if (*low >= 0xdc00 && *low < 0xe000) {
        AppendUtf8(out, 0x10000 + ((*cp - 0xd800) << 10) + (*low - 0xdc00));
        return absl::OkStatus();
      }
      AppendUtf8(out, 0xfffd);
      cp = low;
    }
    AppendUtf8(out, (*cp >= 0xd800 && *cp < 0xe000) ? 0xfffd : *cp);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ParseString() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) return Error("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        return Error("control character in string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) return Error("unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u':
          if (absl::Status s = ParseUnicodeEscape(out); !s.ok()) return s;
          break;
        default:
          return Error("bad escape");
      }
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<JsonValue> ParseJson(std::string_view text) {
  return Parser(text).ParseDocument();
}

std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_element_.empty()) {
    if (has_element_.back()) out_ += ',';
    has_element_.back() = true;
  }
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue();
  out_ += '{';
  has_element_.push_back(false);
  return *this;
}
JsonWriter& JsonWriter::EndObject() {
  out_ += '}';
  has_element_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::BeginArray() {
  BeforeValue();
  out_ += '[';
  has_element_.push_back(false);
  return *this;
}
JsonWriter& JsonWriter::EndArray() {
  out_ += ']';
  has_element_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::Key(std::string_view key) {
  BeforeValue();
  out_ += JsonQuote(key);
  out_ += ':';
  after_key_ = true;
  return *this;
}
JsonWriter& JsonWriter::String(std::string_view s) {
  BeforeValue();
  out_ += JsonQuote(s);
  return *this;
}
JsonWriter& JsonWriter::Int(int64_t v) {
  BeforeValue();
  out_ += std::to_string(v);
  return *this;
}
JsonWriter& JsonWriter::Uint(uint64_t v) {
  BeforeValue();
  out_ += std::to_string(v);
  return *this;
}
JsonWriter& JsonWriter::Double(double v) {
  if (!std::isfinite(v)) return Null();
  BeforeValue();
  char buf[32];
  // Shortest text that reads back as the same double.
  const auto result = std::to_chars(buf, buf + sizeof(buf), v);
  out_.append(buf, result.ptr);
  return *this;
}
JsonWriter& JsonWriter::Bool(bool b) {
  BeforeValue();
  out_ += b ? "true" : "false";
  return *this;
}
JsonWriter& JsonWriter::Null() {
  BeforeValue();
  out_ += "null";
  return *this;
}

}  // namespace netstack::tools::bench
