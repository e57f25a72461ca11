"""slirp_interop_test: one libslirp interop test, run on Debian's libslirp
and, given `libslirp`, once more on that library (tests/slirp/BUILD.bazel).
"""

def slirp_interop_test(name, src, libslirp = None, data = [], deps = [],
                       size = "large"):
    """Declares `name`, the test on the system's libslirp.so.0 (the
    baseline), and, when `libslirp` names a target whose one output is a
    libslirp.so.0 (any file name), `name` + "_netstack": the same test with
    that library as data and NETSTACK_LIBSLIRP_DIR pointing at it
    (slirp_util.Libslirp resolves the runfile path)."""
    common = dict(
        size = size,
        srcs = [src],
        main = src,
        python_version = "PY3",
        tags = ["exclusive", "local", "no-sandbox"],
        deps = deps + [":slirp_util"],
    )
    native.py_test(
        name = name,
        data = data,
        **common
    )
    if libslirp:
        native.py_test(
            name = name + "_netstack",
            data = data + [libslirp],
            env = {"NETSTACK_LIBSLIRP_DIR": "$(rootpath %s)" % libslirp},
            **common
        )
