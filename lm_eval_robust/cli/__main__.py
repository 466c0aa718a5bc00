"""``python -m lm_eval_robust.cli``: the same as ``lm-eval-robust``."""

from __future__ import annotations

import os
import sys

from lm_eval_robust.cli import main

if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
