#include "tools/common/cli.h"

#include <utility>

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace netstack::tools {

void DashesToUnderscores(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (a[0] != '-' || a[1] != '-') continue;
    if (a[2] == '\0') break;
    for (char* p = a + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

void HelpListsFlagsUnder(std::string dir) {
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [dir = std::move(dir)](absl::string_view file) {
    return absl::StrContains(file, dir);
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
}

}  // namespace netstack::tools
