"""netstack_fuzz_target: one libFuzzer target in three Bazel targets.

For a target NAME with an entry function LLVMFuzzerTestOneInput in srcs:
  NAME_lib              the entry function (a cc_library, alwayslink)
  NAME                  the libFuzzer binary; only --config=fuzz or
                        --config=fuzz-fast can build it (tag manual)
  NAME_regression_test  a gtest in every build (gcc, asan) that runs each
                        file of corpus/NAME/ and regressions/NAME/ through
                        the same entry function once
  NAME_fuzz_test        under --config=fuzz: runs the binary on its corpus,
                        then on new inputs for FUZZ_SECONDS (default 30);
                        fails on a crash and prints the input's path
                        (tag manual; //fuzz:fuzz_runs lists them all)
docs/FUZZING.md says how to run them.
"""

def netstack_fuzz_target(name, srcs, deps, dict = None, max_len = None, local_defines = []):
    native.cc_library(
        name = name + "_lib",
        testonly = True,
        srcs = srcs,
        deps = deps,
        local_defines = local_defines,
        alwayslink = True,
    )
    native.cc_binary(
        name = name,
        testonly = True,
        deps = [":" + name + "_lib"],
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual", "fuzz"],
    )
    data = native.glob(["corpus/" + name + "/*", "regressions/" + name + "/*"])
    native.cc_test(
        name = name + "_regression_test",
        size = "small",
        srcs = [],
        deps = [":" + name + "_lib", "//fuzz:replay_main"],
        data = data,
        args = ["fuzz/corpus/" + name, "fuzz/regressions/" + name],
    )
    args = ["$(rootpath :%s)" % name, "fuzz/corpus/" + name]
    run_data = [":" + name] + data
    if dict:
        args.append("-dict=$(rootpath %s)" % dict)
        run_data.append(dict)
    if max_len:
        args.append("-max_len=%d" % max_len)
    native.sh_test(
        name = name + "_fuzz_test",
        size = "medium",
        srcs = ["run_fuzzer.sh"],
        args = args,
        data = run_data,
        # external: never cached as passed, so each run fuzzes anew.
        tags = ["manual", "fuzz", "external", "cpu:1"],
    )
