"""The console script (``tracemerge``) and ``python -m tracemerge``.

A command takes Ctrl-C and SIGTERM over when it starts (``tracemerge.cli``): it unwinds,
removes its temporary outputs, stops its workers and exits 130 or 143. Before that the
process is still loading the command line interface (click and the commands' options,
~0.1 s) and parsing the arguments, and by default Python would print the traceback of
whichever module the signal interrupted. Here the signal ends the process at once with
one line and the same exit code: nothing has been written yet, so nothing needs cleaning
up. The command gives the signals back to this module when it ends, and a signal in the
last moment after it (click's exit) ends the process the same way, its output already
whole; once the command has returned, the signals are ignored while the interpreter exits
(its finalisation resets them to the default, which killed the process silently).
(Python's own start-up and ``tracemerge/__init__``, which run before this module, stay
Python's.)
"""

import gc
import os
import signal
import sys

from tracemerge.errors import EXIT_INTERRUPTED, EXIT_TERMINATED

ENDS = {signal.SIGINT: ("interrupted", EXIT_INTERRUPTED), signal.SIGTERM: ("terminated", EXIT_TERMINATED)}


def _end(signum: int, frame: object) -> None:
    what, code = ENDS[signal.Signals(signum)]
    try:
        sys.stdout.flush()  # what click printed (--help, a finished command's lines) is kept
    except Exception:  # noqa: BLE001 - a flush the signal itself interrupted; the exit goes on
        pass
    os.write(2, f"tracemerge: error: {what}\n".encode())
    os._exit(code)  # no command is running: no workers, no temporary files to remove


def console() -> None:
    """:func:`tracemerge.cli.main` as a process of its own, which ends with the command.
    Its objects are frozen out of the cyclic collector first: the interpreter's collections
    at exit would walk every one of them for nothing (a combine of 8 x 20 MB ranks: ~30 ms
    of its exit)."""
    for sig in ENDS:
        if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup's and a batch system's choice stays
            signal.signal(sig, _end)
    from tracemerge.cli import main
    try:
        main()
    finally:
        # the command has ended, its outputs in place and said: the interpreter's exit resets
        # the handlers to the default, and a signal then killed the process silently (-2)
        for sig in ENDS:
            signal.signal(sig, signal.SIG_IGN)
        gc.freeze()
