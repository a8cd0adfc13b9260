"""Output files that appear whole or not at all: a temporary file beside the target, put in
place only when everything was written.

The temporary file has no name while it is written (Linux ``O_TMPFILE``), so a run killed
outright (SIGKILL, the OOM killer) leaves nothing behind; it is linked under the target's
name at the end. Without ``--force`` that link is exclusive: of two runs writing one new
output at once, the second to finish is refused (exit 5) instead of silently replacing the
first. Where ``O_TMPFILE`` is missing, a named temporary file beside the target is used.
"""

import contextlib
import os
import stat
import sys
import tempfile
from typing import Iterable, Iterator, Optional

from tracemerge.errors import OutputError
from tracemerge.files.codecs import Stream, codec_for, writer


def check_output(path: str, inputs: Iterable[str], force: bool) -> None:
    """Refuse an output that would overwrite an input, or an existing file without ``force``."""
    if path == "-":
        return
    codec_for(path)  # a .zst name without zstandard fails here, before any work
    target = os.path.realpath(path)
    for p in inputs:
        if os.path.realpath(p) == target:
            raise OutputError(f"{path}: the output is also an input; choose another -o")
    check_kind(path, force)
    if os.path.isdir(path):  # before "exists": --force would not help
        raise OutputError(f"{path}: is a directory")
    if os.path.exists(path) and not force:
        raise OutputError(f"{path}: exists; pass --force to overwrite it")
    # checked before any work, so a long merge never ends in "cannot write"
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise OutputError(f"{path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK) or not _can_create_in(directory):
        raise OutputError(f"{path}: the directory {directory} is not writable")
    # with --force the file is first linked under a temporary name beside the target (_commit)
    check_name_length(path, TEMPORARY_NAME_EXTRA if force else 0)


# bytes a temporary name beside a file output adds to its name: ".NAME.<12 hex>.tmp" (_commit)
TEMPORARY_NAME_EXTRA = len(".") + len(".") + 12 + len(".tmp")


def check_name_length(path: str, extra: int = 0) -> None:
    """Refuse an output whose name (with the ``extra`` bytes of the temporary name beside it)
    is longer than its filesystem holds (PC_NAME_MAX, 255 bytes on most): checked before any
    work, where it once ended a finished merge in exit 5 (``--report``'s NAME.report.txt is
    longer than NAME.json)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        limit = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return  # a filesystem that says no limit
    size = len(os.fsencode(os.path.basename(os.path.abspath(path))))
    if size + extra > limit:
        more = f" and its temporary name beside it {extra} more" if extra else ""
        raise OutputError(f"{path}: the file name is {size} bytes{more}; this filesystem holds names of at "
                          f"most {limit}")


# what a path that is not a regular file is, said in the refusal
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(path: str) -> Optional[str]:
    """What ``path`` is when it exists and is neither a regular file nor a directory (a FIFO,
    a device, a socket; a symbolic link is judged by what it leads to), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return next((name for test, name in _KINDS if test(mode)), None)


def check_kind(path: str, force: bool = False) -> None:
    """Refuse an output that is a special file, with or without ``--force``: replacing it
    would destroy a device node or a pipe another program reads (as root, ``-o /dev/null
    --force`` replaced /dev/null), and writing into it cannot be taken back whole. The
    stream a pipe or terminal wants is ``-o -`` (docs/errors.md)."""
    kind = special_kind(path)
    if kind is not None:
        hint = "" if kind == "a socket" else f" (to stream into it: -o - > {path})"
        raise OutputError(f"{path}: is {kind}, not a regular file: tracemerge writes and replaces only regular "
                          f"files{hint}")
    if force and os.path.islink(path):  # replacing the link itself: /dev/stdout, as root
        raise OutputError(f"{path}: is a symbolic link (to {os.path.realpath(path)}): --force replaces only a "
                          "regular file; name the file it leads to")


def _can_create_in(directory: str) -> bool:
    """Whether a file can be made in ``directory``: os.access says yes to root even where
    the filesystem or an immutable directory says no."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def atomic_output(path: str, compress: bool = True, force: bool = True) -> Iterator[Stream]:
    """A binary stream for ``path`` ("-" is stdout); ``.gz`` and ``.zst`` names are
    compressed (unless ``compress`` is false: the caller writes members or frames itself).
    Without ``force`` an output that appeared meanwhile (another run) is not replaced.

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
        fd, tmp = _temporary(directory, path)
    except OSError as e:
        raise OutputError(f"{path}: cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as raw:
            with writer(codec_for(path) if compress else None, raw) as out:
                yield out
            raw.flush()
            os.fchmod(raw.fileno(), 0o666 & ~current_umask())
            _commit(raw.fileno(), tmp, path, force)
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, BrokenPipeError):
            # disk full, quota, a vanished directory: name the output, not the temporary file
            raise OutputError(f"{path}: cannot write: {e.strerror or e}") from None
        raise


def _temporary(directory: str, path: str) -> tuple[int, Optional[str]]:
    """(descriptor, name) of a new temporary file in ``directory``; name None for an
    unnamed (O_TMPFILE) one, which vanishes by itself if the process is killed."""
    if hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd"):
        try:
            return os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o600), None
        except OSError:
            pass  # a filesystem without O_TMPFILE: a named file
    return tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)


def _commit(fd: int, tmp: Optional[str], path: str, force: bool) -> None:
    """Give the written file ``path`` as its name: without ``force`` only if no file has
    that name by now (an exclusive link), with it replacing what is there."""
    source = tmp if tmp is not None else f"/proc/self/fd/{fd}"
    check_kind(path, force)  # again: a FIFO or device made there while this run worked is not replaced
    if not force:
        try:
            _link(source, path)
        except FileExistsError:
            raise OutputError(f"{path}: exists; pass --force to overwrite it") from None
        if tmp is not None:
            os.unlink(tmp)
        return
    if tmp is None:
        # a name of its own first, then renamed over the target in one step
        for _ in range(100):
            named = os.path.join(os.path.dirname(os.path.abspath(path)),
                                 f".{os.path.basename(path)}.{os.urandom(6).hex()}.tmp")
            try:
                _link(source, named)
                break
            except FileExistsError:
                continue
        else:
            raise OutputError(f"{path}: cannot name the temporary file")
        try:
            os.replace(named, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(named)
            raise
        return
    os.replace(tmp, path)


def _link(source: str, path: str) -> None:
    """A hard link ``path`` to ``source``, following a /proc/self/fd link to the open file:
    os.link calls link(2), which does not follow it, unless given a directory descriptor
    (then linkat(2) with AT_SYMLINK_FOLLOW)."""
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(source, os.path.basename(path), dst_dir_fd=directory, follow_symlinks=True)
    finally:
        os.close(directory)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
