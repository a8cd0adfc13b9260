"""Write the fuzz target's seed corpus (fuzz/seeds/): the malformed-file corpus as it is,
and from each sample rank a few small documents (its head keys and the first events), so
every seed stays small enough for the fuzzer to mutate quickly.

    python fuzz/make_seeds.py
"""

import glob
import gzip
import json
import os
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "seeds")
MAX_BYTES = 16 << 10


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in glob.glob(os.path.join(OUT, "*")):
        os.remove(old)
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "corpus", "*.json*"))):
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".gz"):
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error):
                continue
        _write(f"corpus-{os.path.basename(path).split('.')[0]}", data)
    for path in sorted(glob.glob(os.path.join(ROOT, "samples", "*", "*.json.gz"))):
        with gzip.open(path, "rb") as f:
            text = f.read()
        doc = json.loads(text)
        events = doc.pop("traceEvents")
        doc.pop("tracemerge", None)  # its records make seeds large; tests/corpus has blocks
        name = path.split(os.sep)[-2] + "-" + os.path.basename(path).split(".")[0]
        for k, (lo, n) in enumerate(((0, 12), (len(events) // 2, 12), (len(events) - 8, 8))):
            part = dict(doc, traceEvents=events[max(0, lo):max(0, lo) + n])
            data = json.dumps(part, indent=2 if k != 1 else None, ensure_ascii=False).encode()
            if len(data) <= MAX_BYTES:
                _write(f"{name}-{k}", data)


def _write(name, data):
    with open(os.path.join(OUT, name + ".json"), "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
