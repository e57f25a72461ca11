// A minimal JSON object writer for pcap_inspect's --json output. Keys are
// written in insertion order; strings are escaped per RFC 8259.
#ifndef NETSTACK_TOOLS_PCAP_INSPECT_JSON_H_
#define NETSTACK_TOOLS_PCAP_INSPECT_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace netstack::tools {

class JsonObject {
 public:
  JsonObject& Add(std::string_view key, std::string_view value);
  JsonObject& Add(std::string_view key, const char* value) {
    return Add(key, std::string_view(value));
  }
  JsonObject& Add(std::string_view key, uint64_t value);
  JsonObject& Add(std::string_view key, int64_t value);
  JsonObject& Add(std::string_view key, uint32_t value) {
    return Add(key, uint64_t{value});
  }
  JsonObject& Add(std::string_view key, int value) {
    return Add(key, int64_t{value});
  }
  JsonObject& Add(std::string_view key, bool value);
  JsonObject& Add(std::string_view key, const JsonObject& value);
  // `json` must already be valid JSON (an array built by the caller).
  JsonObject& AddRaw(std::string_view key, std::string_view json);

  std::string ToString() const { return "{" + body_ + "}"; }
  bool empty() const { return body_.empty(); }

 private:
  void Key(std::string_view key);
  std::string body_;
};

// Appends `s` to `out` as a quoted, escaped JSON string.
void AppendJsonString(std::string& out, std::string_view s);

}  // namespace netstack::tools

#endif  // NETSTACK_TOOLS_PCAP_INSPECT_JSON_H_
