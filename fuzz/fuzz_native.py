"""Fuzz target of the compiled core: every input goes through the differential check
(:mod:`fuzz.differential`): the core declines, or it agrees with the Python
path in every column and every written byte, or both paths refuse the input. A crash, a
sanitizer report or a Mismatch is a finding.

    fuzz/run [SECONDS]                     # builds the sanitized extension, then fuzzes
    python fuzz/fuzz_native.py --replay fuzz/seeds tests/corpus    # the check on files only

Two stages (fuzz/run), because the machine has gcc and no clang, so the C code cannot get
libFuzzer's coverage instrumentation:

1. atheris (libFuzzer, bundled in its wheel) with the normally built extension, guided by
   the coverage of the Python code around it (wrapper, readers, transform); it grows a
   corpus. Run under gcc's ASan it would get no coverage at all: gcc's libasan defines the
   ``__sanitizer_cov_*`` hooks libFuzzer needs, and the preloaded stubs win.
2. ``--mutate``: the extension built with gcc's AddressSanitizer and
   UndefinedBehaviorSanitizer (runtimes LD_PRELOADed, ``TRACEMERGE_FUZZ_CORE`` and
   ``TRACEMERGE_FUZZ_PROTO`` name the builds of _core and _proto), replaying stage 1's corpus and then mutating it with a small byte/token
   mutator of its own; any sanitizer report aborts, any Mismatch is saved to
   fuzz/findings/.
"""

import glob
import importlib.util
import os
import sys
import zlib

# the checker lives beside this script (fuzz/differential.py), imported as fuzz.differential
# from the checkout's root, as the tests import it
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_core():
    from tracemerge import native
    # the sanitized builds of the core and of the .pftrace writer, where fuzz/run made them
    for env, name in (("TRACEMERGE_FUZZ_CORE", "_core"), ("TRACEMERGE_FUZZ_PROTO", "_proto")):
        so = os.environ.get(env)
        if so:
            spec = importlib.util.spec_from_file_location(f"tracemerge.native.{name}", so)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            setattr(native, name, module)
    if native.active() != "native":
        sys.exit("fuzz_native: the compiled core is not active (not built, or TRACEMERGE_CORE=python)")
    return native


def test_one_input(data):
    from fuzz.differential import check_bytes
    check_bytes(data)


def replay(paths):
    import gzip
    from collections import Counter

    from fuzz.differential import check_bytes
    seen = Counter()
    # directories are walked whole (the malformed-file corpus keeps its rank-file pairs in one)
    files = [f for p in paths
             for f in (sorted(glob.glob(os.path.join(p, "**", "*"), recursive=True)) if os.path.isdir(p) else [p])
             if os.path.isfile(f)]
    for f in files:
        with open(f, "rb") as fh:
            data = fh.read()
        if f.endswith(".gz"):
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error):  # corrupt or cut: the reader's business, not the core's
                seen["unreadable gzip"] += 1
                continue
        seen[check_bytes(data, os.path.basename(f).removesuffix(".gz")).split(":")[0]] += 1
    print(f"differential check: {sum(seen.values())} inputs, " +
          ", ".join(f"{n} {what}" for what, n in seen.most_common()) + "; no disagreement")


TOKENS = [b"{", b"}", b"[", b"]", b":", b",", b'"', b"\\u00e9", b'\\"', b"\\\\", b"null", b"true", b"-0",
          b"1e400", b"0.001", b"18446744073709551616", b"9" * 30, b'"traceEvents"', b'"ph"', b'"X"', b'"M"',
          b'"name"', b'"pid"', b'"tid"', b'"ts"', b'"dur"', b'"args"', b'"id"', b'"id2"', b'"bind_id"',
          b'"External id"', b'"process_name"', b"\xff", b"\xc3\xa9", b"\x00", b"[" * 600]


def mutate(data, rnd):
    """1-4 random edits of ``data``: byte flips, inserts, deletes, duplicated ranges, tokens."""
    data = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        n = len(data)
        op = rnd.randrange(6)
        at = rnd.randint(0, n)
        if op == 0 and n:
            data[min(at, n - 1)] ^= 1 << rnd.randrange(8)
        elif op == 1:
            data[at:at] = bytes([rnd.randrange(256)])
        elif op == 2 and n:
            del data[at:at + rnd.randint(1, 16)]
        elif op == 3 and n:
            lo = rnd.randrange(n)
            data[at:at] = data[lo:lo + rnd.randint(1, 64)]
        elif op == 4:
            data[at:at] = rnd.choice(TOKENS)
        else:
            data = data[:at]
    return bytes(data)


def mutate_loop(corpus_dirs, seconds, findings="fuzz/findings"):
    import random
    import time

    from fuzz.differential import Mismatch, check_bytes
    inputs = []
    for d in corpus_dirs:
        for f in sorted(glob.glob(os.path.join(d, "*"))):
            with open(f, "rb") as fh:
                inputs.append(fh.read())
    rnd = random.Random(int(os.environ.get("FUZZ_SEED", "0")) or None)
    end = time.monotonic() + seconds
    runs = 0
    for data in inputs:  # the corpus itself first
        check_bytes(data)
        runs += 1
    while time.monotonic() < end and inputs:
        data = mutate(rnd.choice(inputs), rnd)
        try:
            check_bytes(data)
        except Mismatch:
            os.makedirs(findings, exist_ok=True)
            path = os.path.join(findings, f"mismatch-{runs}.json")
            with open(path, "wb") as fh:
                fh.write(data)
            print(f"fuzz_native: MISMATCH, input saved to {path}")
            raise
        runs += 1
    print(f"fuzz_native --mutate: {runs} inputs ({len(inputs)} from the corpus) under the sanitizers, no finding")


def main():
    if "--mutate" in sys.argv:
        args = [a for a in sys.argv[1:] if a != "--mutate"]
        _load_core()
        mutate_loop(args[1:], float(args[0]))
        return
    if "--replay" in sys.argv:
        _load_core()
        replay([a for a in sys.argv[1:] if a != "--replay"])
        return
    import atheris
    with atheris.instrument_imports(include=["tracemerge"]):  # Python-side coverage guides the mutations
        import fuzz.differential  # noqa: F401
    _load_core()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
