// The counters netstackd prints on SIGUSR1 ("name value" lines, and the
// stack's "prefix: a=1 b=2" lines), as the members of a JSON object: the
// "counters" answer of --forward-api and --control.
#ifndef TOOLS_NETSTACKD_COUNTER_JSON_H_
#define TOOLS_NETSTACKD_COUNTER_JSON_H_

#include <string>

#include "tools/tcp_benchmark/json.h"

namespace netstack::tools {

// Writes one key per counter into the object `w` has open: "name" for a
// "name value" line, "prefix.a" for each a=N of a "prefix: ..." line.
// Values are numbers; a "name value" line whose value is not a number is
// written as a string when `keep_text`, else left out.
void WriteCounterText(bench::JsonWriter& w, const std::string& text,
                      bool keep_text);

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_COUNTER_JSON_H_
