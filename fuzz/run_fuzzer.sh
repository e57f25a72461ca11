#!/usr/bin/env bash
# Runs one libFuzzer binary as a Bazel test (fuzz/fuzz.bzl NAME_fuzz_test,
# --config=fuzz): first every input of its committed corpus, then new
# inputs for $FUZZ_SECONDS (default 30). New corpus entries go to the
# test's temporary directory, never into the source tree. A crash, leak,
# timeout or out-of-memory fails the test; the input is kept in the test's
# outputs (bazel-testlogs/fuzz/NAME_fuzz_test/test.outputs/outputs.zip;
# Bazel 4 zips them) and printed here, its path and its bytes in hex, so
# the log alone reproduces it.
#
#   run_fuzzer.sh BINARY CORPUS_DIR [libFuzzer flags...]
set -uo pipefail
bin=$1
seeds=$2
shift 2
secs=${FUZZ_SECONDS:-30}
out=${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR:-/tmp}}
work=${TEST_TMPDIR:-/tmp}/new_corpus
mkdir -p "$work" "$out"
name=$(basename "$bin")
log=$out/$name.log

"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$out/" "$@" "$work" "$seeds" \
  >"$log" 2>&1
rc=$?

# The last status line (execs, cov, ft, corpus) and the final stats.
grep -E '^#[0-9]+.*(DONE|pulse|INITED)' "$log" | tail -n 2
grep -E '^stat::' "$log"
if ((rc != 0)); then
  echo "FUZZ FAILURE: $name exited with $rc; log: $log" >&2
  tail -n 60 "$log" >&2
  for f in "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* \
      "$out"/slow-unit-*; do
    [[ -e $f ]] || continue
    zip=bazel-testlogs/fuzz/${TEST_TARGET##*:}/test.outputs/outputs.zip
    echo "crash input: $(basename "$f") in $zip (here: $f)" >&2
    echo "  unzip -o $zip $(basename "$f") -d /tmp &&" \
      "bazel run --config=fuzz //fuzz:$name -- /tmp/$(basename "$f")" >&2
    echo "  then keep it: cp /tmp/$(basename "$f") fuzz/regressions/$name/" >&2
    od -A x -t x1z -v "$f" | head -n 40 >&2
  done
  exit 1
fi
echo "$name: no crash in ${secs} s"
