"""What an input format is: how a file is recognised and read."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from tracemerge.model import RankTrace

if TYPE_CHECKING:
    from tracemerge.inputs.rankinfo import RankInfo


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
    read: Callable[[str], RankTrace]
    describe: Callable[[str], "RankInfo"]
    head: Optional[Callable[[str], Optional["RankInfo"]]] = None
    sniff: Optional[Callable[[bytes], bool]] = None
