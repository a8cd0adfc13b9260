"""References to code by module name, imported on first use: what a registry lists without
importing what it lists.

A registry (output formats, alignment methods) names each entry and says what ``--help``
says of it in its own line, and points at the module that implements it by name. So
``tracemerge combine --help`` reads the names and summaries without loading numpy, the
readers or the writers, and a merge imports the one format it writes. This module imports
nothing but the standard library's ``importlib`` (no click: the library's registries use it).
Nothing is cached here: after the first use the import system's own module table answers.
"""

from __future__ import annotations

import importlib
from typing import Any, Iterator, Mapping, TypeVar

T = TypeVar("T")


class Deferred:
    """``module`` (or its attribute ``name``), imported on first use."""

    __slots__ = ("_module", "_name")

    def __init__(self, module: str, name: str | None = None) -> None:
        self._module, self._name = module, name

    def resolve(self) -> Any:
        module = importlib.import_module(self._module)
        return module if self._name is None else getattr(module, self._name)

    def __getattr__(self, attr: str) -> Any:
        if attr in Deferred.__slots__:  # not set yet (copy, pickle): not the target's
            raise AttributeError(attr)
        return getattr(self.resolve(), attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __getitem__(self, key: Any) -> Any:
        return self.resolve()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.resolve())

    def __len__(self) -> int:
        return len(self.resolve())

    def __contains__(self, item: Any) -> bool:
        return item in self.resolve()

    def __repr__(self) -> str:
        return f"Deferred({self._module!r}{', ' + repr(self._name) if self._name else ''})"

    def __reduce__(self) -> tuple[Any, ...]:  # pickled by its names (a Dask task may carry one)
        return (Deferred, (self._module, self._name))


class Registry(Mapping[str, T]):
    """``{name: "module:attribute"}`` read as ``{name: value}``: the names are known at once,
    a value is imported when it is looked up (``registry[name]``, ``.values()``)."""

    __slots__ = ("_where",)

    def __init__(self, where: Mapping[str, str]) -> None:
        self._where = dict(where)

    def __getitem__(self, name: str) -> T:
        module, _, attribute = self._where[name].partition(":")
        value: T = Deferred(module, attribute).resolve()
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, name: object) -> bool:  # without importing the entry
        return name in self._where

    def extended(self, where: Mapping[str, str]) -> "Registry[T]":
        """A new registry: these entries and ``where``'s after them (a registry is never changed)."""
        return Registry({**self._where, **where})

    def __repr__(self) -> str:
        return f"Registry({self._where!r})"
