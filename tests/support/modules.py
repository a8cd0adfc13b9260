"""A Python module written by a test (a toy analysis, section or output format) and imported
from its file, as an installed module would be: what a registry line would name."""

import importlib.util


def written_module(tmp, name, text):
    """The module of ``text``, written as ``tmp/NAME.py`` and imported from there."""
    path = tmp / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
