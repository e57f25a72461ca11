#include "tools/netstackd/slirp4netns_mode.h"

namespace netstack::tools {

bool InvokedAsSlirp4netns(int, char**) { return false; }
int RunAsSlirp4netns(int, char**) { return 1; }

}  // namespace netstack::tools
