"""The checksum manifest of the feature shards under results/ (``results/features.sha256``).

    python scripts/features_manifest.py           # (re)write the manifest from the shards present
    python scripts/features_manifest.py --check   # hash every shard present against it

Feature shards (``results/<folder>/features*/<task>/rank*.safetensors``: the head inputs that
``fit``, ``replay`` and float32 rescoring read) are run artefacts: each folder's ``run.sh``
regenerates its own (``results/README.md`` lists them). The manifest is in ``sha256sum`` format
(``cd results && sha256sum -c features.sha256``), one line per shard, so that regenerated or
fetched shards can be checked against the ones the committed results were computed from. A shard
that is listed but absent (a sparse or filtered clone) is reported, not an error: regenerate it
with its folder's script. ``--check`` exits 1 on a shard whose hash differs or that is not listed.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
MANIFEST = RESULTS / "features.sha256"


def shards(results: Path = RESULTS) -> list[Path]:
    """Every feature shard under ``results`` (relative paths, sorted)."""
    return sorted(
        p.relative_to(results) for p in results.glob("*/features*/**/*.safetensors") if p.is_file()
    )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest(path: Path = MANIFEST) -> dict[str, str]:
    """relative path -> sha256, from a ``sha256sum`` file."""
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            out[name.lstrip("*")] = digest
    return out


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        listed = read_manifest()
        present = {str(p) for p in shards()}
        bad = [p for p in sorted(present) if listed.get(p) != _sha256(RESULTS / p)]
        absent = sorted(set(listed) - present)
        folders = sorted({p.split("/")[0] for p in absent})
        if absent:
            print(
                f"{len(absent)} listed shards are absent (regenerate with the run.sh of "
                f"{', '.join(folders)})"
            )
        for p in bad:
            why = "not listed" if p not in listed else "hash differs"
            print(f"features_manifest.py: {p}: {why}", file=sys.stderr)
        print(f"{len(present) - len(bad)} of {len(present)} shards present match the manifest")
        return 1 if bad else 0
    if argv:
        print("usage: python scripts/features_manifest.py [--check]", file=sys.stderr)
        return 2
    lines = [f"{_sha256(RESULTS / p)}  {p}\n" for p in shards()]
    MANIFEST.write_text("".join(lines), encoding="utf-8")
    print(f"{MANIFEST}: {len(lines)} shards")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
