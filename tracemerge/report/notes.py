"""A report's notes, each with its kind: what the report says beside its sections.

The kind, not the words, decides how a note is said: the text table heads each with its
kind's label, and the ``report`` command also says hints and warnings on stderr.
"""

from dataclasses import dataclass
from typing import Optional

NOTE = "note"          # said in the report only
HINT = "hint"          # something to change in the job (a callee short of server threads)
WARNING = "warning"    # something asked for that the report could not do


@dataclass(frozen=True)
class Kind:
    label: str              # the text table's word before the note
    said: Optional[str]     # the word ``report`` says it with on stderr; None: not said there


# a warning reads as a note in the report itself, where it stands among the others
KINDS = {NOTE: Kind("note", None), HINT: Kind("hint", "hint"), WARNING: Kind("note", "warning")}


@dataclass(frozen=True)
class Note:
    text: str
    kind: str = NOTE

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"note kind {self.kind!r}: one of {', '.join(KINDS)}")

    @property
    def label(self) -> str:
        return KINDS[self.kind].label

    @property
    def said(self) -> Optional[str]:
        return KINDS[self.kind].said
