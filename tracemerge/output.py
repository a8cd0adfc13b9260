"""Output files that appear whole or not at all: a temporary file beside the target, renamed
into place only when everything was written."""

import contextlib
import os
import sys
import tempfile

from tracemerge.codecs import codec_for, writer
from tracemerge.errors import OutputError


def check_output(path, inputs, force):
    """Refuse an output that would overwrite an input, or an existing file without ``force``."""
    if path == "-":
        return
    codec_for(path)  # a .zst name without zstandard fails here, before any work
    target = os.path.realpath(path)
    for p in inputs:
        if os.path.realpath(p) == target:
            raise OutputError(f"{path}: the output is also an input; choose another -o")
    if os.path.isdir(path):  # before "exists": --force would not help
        raise OutputError(f"{path}: is a directory")
    if os.path.exists(path) and not force:
        raise OutputError(f"{path}: exists; pass --force to overwrite it")
    # checked before any work, so a long merge never ends in "cannot write"
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise OutputError(f"{path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: the directory {directory} is not writable")


@contextlib.contextmanager
def atomic_output(path, compress=True):
    """A binary stream for ``path`` ("-" is stdout); ``.gz`` and ``.zst`` names are
    compressed (unless ``compress`` is false: the caller writes members or frames itself).

    The data goes to a temporary file in the target's directory and is renamed over the
    target on success, so readers never see a half-written trace; on any error the
    temporary file is removed and the target is left as it was.
    """
    if path == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    except OSError as e:
        raise OutputError(f"{path}: cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as raw, writer(codec_for(path) if compress else None, raw) as out:
            yield out
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, BrokenPipeError):
            # disk full, quota, a vanished directory: name the output, not the temporary file
            raise OutputError(f"{path}: cannot write: {e.strerror or e}") from None
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
