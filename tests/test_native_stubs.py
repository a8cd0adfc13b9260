"""The compiled modules' stubs (``native/_core.pyi``, ``_proto.pyi``: all mypy knows of them)
against the built modules: every name a stub declares is defined, every public name a
module defines is declared, and what the scan's calls return has the shape the stub says."""

import ast
import os

import pytest

from tracemerge import native

NATIVE = os.path.dirname(native.__file__)
built = pytest.mark.skipif(native._core is None or native._proto is None, reason="the compiled core is not built")


def _declared(stub, within=None):
    """The public names the stub file ``stub`` declares at its top level, or in its class ``within``."""
    with open(os.path.join(NATIVE, stub)) as f:
        body = ast.parse(f.read()).body
    if within is not None:
        body = next(node.body for node in body if isinstance(node, ast.ClassDef) and node.name == within)
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def _defined(obj):
    return {n for n in dir(obj) if not n.startswith("_")}


# a flow start with an id and an instant with a scope: the scan's id and extra-key columns
DOC = (b'{"traceEvents":[{"ph":"s","name":"f","cat":"c","id":7,"pid":1,"tid":1,"ts":1},'
       b'{"ph":"i","name":"m","s":"p","pid":1,"tid":1,"ts":2,"args":{"x":1}}],"deviceProperties":[]}')


@built
def test_each_stub_declares_what_its_module_defines():
    # Scan is the type of what scan() returns: the stub names it, the module does not export it
    assert _declared("_core.pyi") - {"Scan"} == _defined(native._core)
    assert _declared("_proto.pyi") == _defined(native._proto)


@built
def test_the_scan_stub_declares_what_a_scan_has():
    scan = native._core.scan(DOC)
    assert not isinstance(scan, str), scan
    assert _declared("_core.pyi", within="Scan") == _defined(type(scan))


@built
def test_the_scan_returns_what_its_stub_says():
    scan = native._core.scan(DOC)
    # flow_ids: (indices, ids), lists of ints
    assert scan.flow_ids(0) == ([0], [7])
    # extra_tokens takes the key as a str: (indices, the raw value bytes)
    assert scan.extra_tokens("s") == ([1], [b'"p"'])
    assert scan.args_with(b'"x"') == [1]
    assert scan.top == {"traceEvents": None, "deviceProperties": (DOC.rindex(b"[]"), DOC.rindex(b"[]") + 2)}
    assert [type(c) for c in scan.columns()] == [bytes] * 4
    assert scan.n == 2 and isinstance(scan.keys, list)
    assert isinstance(native._core.scan(b"["), str)  # why the core does not take it
