"""Store a run folder's logged samples compressed: ``samples_*.jsonl`` -> ``samples_*.jsonl.gz``.

``report``, ``select``, ``plan`` and ``replay`` read either form. Each file is written beside the
original (gzip with a zero timestamp, so the same samples give the same bytes), read back and
compared, then moved into place; only then is the ``.jsonl`` removed.

    python scripts/compress_samples.py results/            # every run folder below results/
    python scripts/compress_samples.py RUN --dry-run        # what would change
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
from pathlib import Path


def compress(path: Path) -> int:
    """Compress one samples file; return the bytes saved."""
    data = path.read_bytes()
    target = path.with_name(path.name + ".gz")
    tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
    with tmp.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(data)
    if gzip.decompress(tmp.read_bytes()) != data:
        tmp.unlink()
        raise SystemExit(f"compress_samples: {path}: the compressed copy differs; left as is")
    os.replace(tmp, target)
    path.unlink()
    return len(data) - target.stat().st_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="run folders (searched recursively)")
    ap.add_argument("--dry-run", action="store_true", help="list the files, change nothing")
    args = ap.parse_args(argv)
    saved = 0
    files = sorted(f for d in args.folders for f in d.rglob("samples_*.jsonl") if f.is_file())
    for f in files:
        if f.with_name(f.name + ".gz").exists():
            print(f"compress_samples: {f}.gz exists already; left as is", file=sys.stderr)
            continue
        if args.dry_run:
            print(f)
            continue
        saved += compress(f)
    print(f"{len(files)} samples file(s); {saved / 1e6:.1f} MB saved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
