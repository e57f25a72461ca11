#!/bin/bash
# Code-break proof for the conformance suite (issue #16, must-show 4):
# for each tests/conformance/mutations/NAME.patch (a minimal edit that
# breaks one behaviour in netstack's own code), apply it, build netstackd,
# run the suite against the netstack DUT only, record which cases failed,
# and revert the patch. Each patch names, in its header, the behaviour
# and the scenarios that must fail ("expect: a,b"); the run fails if one
# of them passed, or if a patch does not apply or does not build.
#
#   tests/conformance/mutations.sh              every patch
#   tests/conformance/mutations.sh paws nagle_off
#
# Needs root (the suite makes namespaces). Refuses to start with
# uncommitted changes in the files a patch touches, reverts the patch
# also on Ctrl-C, and rebuilds the unpatched netstackd at the end.
set -u
cd "$(git rev-parse --show-toplevel)" || exit 2
dir=tests/conformance/mutations
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for p in "$dir"/*.patch; do names+=("$(basename "$p" .patch)"); done
fi

applied=""
revert() {
  if [ -n "$applied" ]; then
    git apply -R "$applied" || echo "mutations.sh: could not revert $applied" >&2
    applied=""
  fi
}
trap 'revert; exit 130' INT TERM
trap revert EXIT

for n in "${names[@]}"; do
  p="$dir/$n.patch"
  files=$(git apply --numstat "$p" | cut -f3)
  if ! git diff --quiet HEAD -- $files; then
    echo "mutations.sh: $files has uncommitted changes; refusing" >&2
    exit 2
  fi
done

log=$(mktemp -d /tmp/mutations.XXXXXX)
bad=0
for n in "${names[@]}"; do
  p="$dir/$n.patch"
  what=$(sed -n 's/^behaviour: //p' "$p")
  expect=$(sed -n 's/^expect: //p' "$p" | tr ',' ' ')
  git apply "$p" || { echo "$n: does not apply"; bad=1; continue; }
  applied="$p"
  if ! bazel build --jobs=2 //tools/netstackd >"$log/$n.build" 2>&1; then
    echo "$n: does not build (see $log/$n.build)"
    bad=1
    revert
    continue
  fi
  NST_CONFORMANCE_DUTS=netstack NETSTACKD=bazel-bin/tools/netstackd/netstackd \
    timeout 1200 python3 -m tests.conformance.conformance_test \
    >"$log/$n.log" 2>&1
  revert
  failed=$(sed -nE 's#^([a-z0-9_]+)/netstack \(.*\) \.\.\. (FAIL|ERROR)$#\1#p' \
    "$log/$n.log" | sort -u)
  count=$(echo "$failed" | grep -c .)
  missed=""
  for e in $expect; do
    echo "$failed" | grep -qx "$e" || missed="$missed $e"
  done
  echo "$n ($what): $count failed: $(echo $failed)"
  if [ -n "$missed" ]; then
    echo "  NOT CAUGHT:$missed"
    bad=1
  fi
done
# Leave the unpatched binary behind.
bazel build --jobs=2 //tools/netstackd >"$log/clean.build" 2>&1 || bad=1
echo "logs in $log"
exit $bad
