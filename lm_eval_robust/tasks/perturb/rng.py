"""Per-instance seeding: the same parts give the same stream in any process.

Python's ``hash`` is salted per process (PYTHONHASHSEED), so seeds are derived with SHA-256 over a
canonical text of the parts instead.
"""

from __future__ import annotations

import hashlib
import random


def derive_seed(*parts: object) -> int:
    """A 64-bit seed from the parts (str, int, float, bool, None or tuples of them)."""
    text = "\x1f".join(repr(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def seeded_rng(*parts: object) -> random.Random:
    """A ``random.Random`` seeded from the parts; independent of PYTHONHASHSEED and platform."""
    return random.Random(derive_seed(*parts))
