"""Swapping the function behind a decorator wrapper, and putting it back.

``rpc.rpc_sync`` and the collectives are ``functools.wraps`` wrappers whose only free
variable is the decorated function. Other code holds the wrapper object itself (C++
keeps ``rpc_sync``/``rpc_async``/``remote`` to build RRef proxies, users write
``from torch.distributed import all_reduce``), so rebinding module attributes would miss
those references. Replacing the function inside the wrapper's closure reaches every
holder at once, and keeps ``rpc_api is rpc_async`` identity checks true.
"""

import contextlib
from types import CellType, FunctionType
from typing import Any, Callable, Iterator, List, Mapping, Tuple, cast

# A function as torch defines it (any signature: the wrapper passes its call through), and
# what makes the replacement of one from the original it wraps.
Function = Callable[..., Any]
Make = Callable[[Function], Function]


def _cell(wrapper: Function) -> CellType:
    function = cast(FunctionType, wrapper)  # torch's stubs type them as callables: each is a plain function
    code, closure = function.__code__, function.__closure__
    if code.co_freevars != ("func",) or closure is None:
        raise RuntimeError(
            f"tracemerge cannot instrument {function.__qualname__}: unexpected closure "
            f"{code.co_freevars} (unsupported torch version?)"
        )
    return closure[0]


@contextlib.contextmanager
def swapped(replacements: Mapping[Function, Make]) -> Iterator[None]:
    """Within the block, each wrapper in ``replacements`` calls ``make(original)``.

    ``replacements`` maps a wrapper to ``make``; every swap is undone on exit, even if a
    later swap failed.
    """
    done: List[Tuple[CellType, Function]] = []
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

