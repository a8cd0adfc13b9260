def f():
    from tracemerge.merge import combine  # noqa: F401
