"""One py_test per relay mode for a test file that takes --mode=MODE."""

MODES = ["splice", "copy", "auto"]

def splice_proxy_mode_tests(name, src):
    """Declares <name>_<mode>_test for each mode, running `src --mode=<mode>`.

    Args:
      name: prefix of the test names.
      src: the test file; it reads --mode=splice|copy|auto.
    """
    for mode in MODES:
        native.py_test(
            name = "%s_%s_test" % (name, mode),
            size = "large",
            srcs = [src],
            main = src,
            args = ["--mode=" + mode],
            data = ["//tools/splice_proxy"],
            python_version = "PY3",
            tags = [
                "exclusive",
                "local",
                "no-sandbox",
            ],
            deps = [":proxy_harness"],
        )
