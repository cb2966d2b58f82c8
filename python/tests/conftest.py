"""Shared pytest setup: the tests run against the installed package (pip install ./python)."""

try:
    import echo_allreduce.reference  # noqa: F401
except ImportError as e:
    if "_reference" not in str(e):
        raise
    raise ImportError("echo_allreduce was imported without its compiled module (from the source tree python/?): "
                      "install the package (pip install ./python) and run pytest from the repository root") from e
