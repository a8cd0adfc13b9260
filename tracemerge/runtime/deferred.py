"""Imports deferred to first use, so that the CLI starts in the time its command needs.

``tracemerge --version`` and ``--help`` need click and little else; a merge needs numpy,
msgspec, orjson, the readers and writers; ``open`` needs the HTTP server. ``cli.py`` names
what its commands use as :class:`Deferred` (a module, or a name in one, imported when the
command first calls it, reads an attribute, indexes or iterates it), its registry-backed
choices as :class:`RegistryChoice` (read when an argument is checked or the help shown),
and an option whose help or default comes from a registry as :class:`RegistryOption`.
Nothing is cached here: after the first use the import system's own module table answers.
The registries behind those choices name their entries without importing them
(:mod:`tracemerge.registry`), so showing a command's help loads none of its work.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import click

from tracemerge.registry import Deferred as Deferred  # cli.py's name for it; it needs no click


class RegistryChoice(click.Choice):
    """click.Choice over the keys of a registry, read when the option's value is checked or
    its help shown, not when the command is defined."""

    def __init__(self, registry: Callable[[], Iterable[str]], case_sensitive: bool = True) -> None:
        # click.Choice.__init__ would read the choices now; it sets nothing else but this
        self._registry = registry
        self.case_sensitive = case_sensitive

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]  # click declares a plain attribute
        return tuple(self._registry())


class RegistryOption(click.Option):
    """click.Option whose help text comes from ``help_from`` and whose callable default is
    shown as its value, both read when the help is shown (click calls a callable default
    itself when the option is used)."""

    def __init__(self, *args: Any, help_from: Callable[[], str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help_from = help_from

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        if self.help_from is not None:
            self.help = self.help_from()
        if callable(self.default):  # shown as "default: 9001", not click's "(dynamic)"
            self.default = self.default()
        return super().get_help_record(ctx)
