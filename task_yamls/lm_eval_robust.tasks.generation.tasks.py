"""``!function lm_eval_robust.tasks.generation.tasks.<name>`` for lm-eval 0.4.11.

lm-eval 0.4.11 resolves a YAML's ``!function a.b.name`` only as ``name`` in the file ``a.b.py``
beside the YAML; 0.4.12 and later import the module ``a.b`` when no such file exists. This file
is that ``a.b.py`` for 0.4.11: it hands out the real module's objects.
"""

from __future__ import annotations

from typing import Any

import lm_eval_robust.tasks.generation.tasks as _real


def __getattr__(name: str) -> Any:
    return getattr(_real, name)
