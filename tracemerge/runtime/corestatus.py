"""Which core runs (the compiled one or the Python path), told without loading either.

``tracemerge --version`` says it; importing :mod:`tracemerge.native` to ask would load
numpy, msgspec and the chrome reader (about 80 ms), so this module answers from the
environment and from whether the compiled core's shared object is there for this Python.
:func:`tracemerge.native.describe` gives the same line from the import itself.
"""

from __future__ import annotations

import importlib.machinery
import os

ENV = "TRACEMERGE_CORE"
OLD_ENV = "TRACEMERGE_KERNEL"  # its name before the package was renamed: still honoured
NATIVE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "native")


def chosen() -> str:
    """The core the environment asks for: ``TRACEMERGE_CORE``, else its older name."""
    return os.environ.get(ENV, os.environ.get(OLD_ENV, "")).strip().lower()


def built() -> bool:
    """Whether ``tracemerge/native`` holds ``_core`` built for this Python (an extension
    suffix the import system would load), found as the import would find it, without
    importing the package."""
    finder = importlib.machinery.FileFinder(
        NATIVE, (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES))
    return finder.find_spec("tracemerge.native._core") is not None


def describe(core_loaded: bool) -> str:
    """One line for ``--version``: which core is active and why (``core_loaded``: whether
    the compiled core is there: imported, or :func:`built`)."""
    if not core_loaded:
        return "core: python (the compiled core is not built here)"
    if chosen() == "python":
        return f"core: python ({ENV}=python)"
    return f"core: native (compiled core; {ENV}=python selects the reference path)"
