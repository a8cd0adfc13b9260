"""Swapping the function behind a decorator wrapper, and putting it back.

``rpc.rpc_sync`` and the collectives are ``functools.wraps`` wrappers whose only free
variable is the decorated function. Other code holds the wrapper object itself (C++
keeps ``rpc_sync``/``rpc_async``/``remote`` to build RRef proxies, users write
``from torch.distributed import all_reduce``), so rebinding module attributes would miss
those references. Replacing the function inside the wrapper's closure reaches every
holder at once, and keeps ``rpc_api is rpc_async`` identity checks true.
"""

import contextlib


def _cell(wrapper):
    code = wrapper.__code__
    if code.co_freevars != ("func",):
        raise RuntimeError(
            f"tracemerge cannot instrument {wrapper.__qualname__}: unexpected closure "
            f"{code.co_freevars} (unsupported torch version?)"
        )
    return wrapper.__closure__[0]


@contextlib.contextmanager
def swapped(replacements):
    """Within the block, each wrapper in ``replacements`` calls ``make(original)``.

    ``replacements`` maps a wrapper to ``make``; every swap is undone on exit, even if a
    later swap failed.
    """
    done = []
    try:
        for wrapper, make in replacements.items():
            cell = _cell(wrapper)
            original = cell.cell_contents
            cell.cell_contents = make(original)
            done.append((cell, original))
        yield
    finally:
        for cell, original in reversed(done):
            cell.cell_contents = original

