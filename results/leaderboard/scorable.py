"""Print the ni_leaderboard tasks whose labels MODEL can score (comma list); name the rest on stderr.

debiased_hf refuses a task whose labels do not differ in one token for the model's tokenizer
(lm_eval_robust.scoring.heads.check_label_tokens); lm_eval then stops the whole run. This applies the same
check to every doc of every preset task first, so one run covers the tasks the model can score.
usage: python scorable.py MODEL_ALIAS METADATA_JSON
"""

from __future__ import annotations

import json
import sys

from transformers import AutoTokenizer

from lm_eval_robust.base.offline_models import resolve_pretrained
from lm_eval_robust.requests.ni_yamls import LEADERBOARD_SETTINGS
from lm_eval_robust.scoring.heads import LabelTokenError, check_label_tokens
from lm_eval_robust.tasks.ni import build_docs
from lm_eval_robust.tasks.settings import NIConfig
from lm_eval_robust.tasks.specs import TASK_ORDER


def main() -> None:
    model, md = sys.argv[1], json.loads(sys.argv[2])
    tok = AutoTokenizer.from_pretrained(resolve_pretrained(model))
    cfg = NIConfig.from_metadata({**LEADERBOARD_SETTINGS, **md})
    keep = []
    for kind in ("format", "text"):
        for task in TASK_ORDER:
            name = f"{task}_{kind}_lb"
            try:
                for doc in build_docs(task, kind, "test", cfg):
                    enc = {c: tok(" " + c, add_special_tokens=False)["input_ids"] for c in doc["choices"]}
                    check_label_tokens(name, enc)
                keep.append(name)
            except LabelTokenError as exc:
                print(f"{model}: left out: {exc}", file=sys.stderr)
    print(",".join(keep))


if __name__ == "__main__":
    main()
