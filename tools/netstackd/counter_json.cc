#include "tools/netstackd/counter_json.h"

#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace netstack::tools {

void WriteCounterText(bench::JsonWriter& w, const std::string& text,
                      bool keep_text) {
  for (absl::string_view l : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t sp = l.find(' ');
    if (sp == absl::string_view::npos) continue;
    absl::string_view name = l.substr(0, sp);
    const absl::string_view value = l.substr(sp + 1);
    uint64_t n = 0;
    if (name.size() > 1 && name.back() == ':') {
      // "prefix: a=1 b=2" lines (the stack's): "prefix.a", "prefix.b".
      name.remove_suffix(1);
      for (absl::string_view kv :
           absl::StrSplit(value, ' ', absl::SkipEmpty())) {
        const size_t eq = kv.find('=');
        if (eq == absl::string_view::npos ||
            !absl::SimpleAtoi(kv.substr(eq + 1), &n)) {
          continue;
        }
        w.Key(absl::StrCat(name, ".", kv.substr(0, eq))).Uint(n);
      }
      continue;
    }
    if (absl::SimpleAtoi(value, &n)) {
      w.Key(std::string_view(name.data(), name.size())).Uint(n);
    } else if (keep_text) {
      w.Key(std::string_view(name.data(), name.size()));
      w.String(std::string_view(value.data(), value.size()));
    }
  }
}

}  // namespace netstack::tools
