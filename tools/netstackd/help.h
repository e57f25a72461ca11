// netstackd --help: the usage lines, what netstackd does, its flags in
// groups by task, and the exit status. The flags themselves (their help
// text and defaults) are defined in config.cc; this file only says which
// group each one belongs to. tests/docs/man_pages_test fails when a flag
// is in no group, and docs/man/netstackd.1's OPTIONS are made from this.
#ifndef TOOLS_NETSTACKD_HELP_H_
#define TOOLS_NETSTACKD_HELP_H_

#include "tools/common/cli.h"

namespace netstack::tools {

HelpPage NetstackdHelpPage();

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_HELP_H_
