// A minimal JSON reader and writer for the iperf3 control protocol: the
// parameters and results documents both peers exchange, and the --json
// output. No dependency beyond the standard library and Abseil.
//
// The reader is tolerant of what a peer may legitimately send (any key
// order, unknown keys, whitespace, escapes, exponents) and strict about
// structure: anything that is not one complete JSON value is an
// InvalidArgument error, never a crash. Nesting is limited (kMaxDepth) so
// a hostile document cannot exhaust the stack.
#ifndef TOOLS_TCP_BENCHMARK_JSON_H_
#define TOOLS_TCP_BENCHMARK_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace netstack::tools::bench {

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;  // null
  static JsonValue Bool(bool b);
  static JsonValue Number(double d);
  static JsonValue String(std::string s);
  static JsonValue Array(std::vector<JsonValue> items = {});
  static JsonValue Object(std::vector<Member> members = {});

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Meaningful only for the matching type (default values otherwise).
  bool bool_value() const { return bool_; }
  double number() const { return number_; }
  const std::string& string() const { return string_; }
  const std::vector<JsonValue>& items() const { return items_; }
  const std::vector<Member>& members() const { return members_; }

  // Object member lookup (the first one with that key); null when this is
  // not an object or has no such key.
  const JsonValue* Find(std::string_view key) const;
  // Typed lookups: nullopt when missing or of another type. GetInt also
  // refuses non-integral numbers and ones outside int64_t. GetBool accepts
  // a number too (iperf3 writes some flags as 0/1).
  std::optional<double> GetNumber(std::string_view key) const;
  std::optional<int64_t> GetInt(std::string_view key) const;
  std::optional<bool> GetBool(std::string_view key) const;
  std::optional<std::string> GetString(std::string_view key) const;

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<JsonValue> items_;
  std::vector<Member> members_;
};

inline constexpr int kJsonMaxDepth = 64;

// Parses exactly one JSON value (surrounding whitespace allowed).
absl::StatusOr<JsonValue> ParseJson(std::string_view text);

// Builds compact JSON text. Calls must nest properly (Begin/End pairs, a
// Key before each value inside an object); the writer inserts the commas.
class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view s);
  JsonWriter& Int(int64_t v);
  JsonWriter& Uint(uint64_t v);
  // Non-finite numbers have no JSON form: written as null.
  JsonWriter& Double(double v);
  JsonWriter& Bool(bool b);
  JsonWriter& Null();

  const std::string& text() const { return out_; }

 private:
  void BeforeValue();

  std::string out_;
  // Per open container: whether it has an element yet.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

// `s` as a quoted JSON string.
std::string JsonQuote(std::string_view s);

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_JSON_H_
