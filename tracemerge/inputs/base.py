"""What an input format is: how a file is recognised and read."""

from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class InputFormat:
    """One input format; registered by one line in :data:`tracemerge.inputs.READERS`.

    ``read(path) -> RankTrace``: the full reader. ``describe(path) -> RankInfo``: what the
    clock model needs (pass 1), equal to ``describe(read(path))``. ``head(path) -> RankInfo
    or None``: a partial RankInfo from the file's head alone, None when the head cannot
    tell. ``sniff(first_bytes) -> bool`` on the first decompressed bytes: whether the file
    is this format's; None for the fallback, which takes every file no other claims.
    """

    name: str
    read: Callable[[str], Any]
    describe: Callable[[str], Any]
    head: Optional[Callable[[str], Any]] = None
    sniff: Optional[Callable[[bytes], bool]] = None
