"""Output formats of ``combine``: one module per format, each defining its ``FORMAT``
(:class:`~tracemerge.formats.base.Format`), and this registry listing them. A new format
is one new module and one line in :data:`FORMATS` (its name, where its ``FORMAT`` is);
``--format``'s choices and the routing of output names by suffix come from here. A format's
module is imported when it is looked up, so ``--format``'s choices load no writer."""

from typing import TYPE_CHECKING, Optional

from tracemerge.registry import Registry

if TYPE_CHECKING:
    from tracemerge.formats.base import Format

FORMATS: "Registry[Format]" = Registry({
    "json": "tracemerge.formats.chrome:FORMAT",
    "perfetto": "tracemerge.formats.perfetto:FORMAT",
})
DEFAULT = "json"    # for outputs no format's suffix names (stdout, trace.txt)


def output_format(output: str, fmt: Optional[str] = None) -> str:
    """The format's name: ``fmt`` when given, else the one whose suffix ``output`` ends with
    (a compression suffix aside), else :data:`DEFAULT`."""
    if fmt:
        return fmt
    from tracemerge.files.codecs import plain_name  # here: the registry's names need no codec

    name = plain_name(output)
    return next((f.name for f in FORMATS.values() if f.suffixes and name.endswith(f.suffixes)), DEFAULT)
