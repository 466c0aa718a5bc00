"""``lm-eval-robust perturb``: a task's clean prompt beside its perturbed variants."""

from __future__ import annotations

import shutil
import textwrap
import unicodedata
from collections.abc import Sequence

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli.args import PROG, CommandParser

__all__ = ["INVISIBLE_MARK", "build_parser", "main", "show_invisible", "side_by_side"]

_INVISIBLE = {"Cf", "Cc", "Zl", "Zp"}

INVISIBLE_MARK = "◦"


def show_invisible(text: str) -> str:
    """Show each zero-width/format/control character as one ``◦`` (newlines and tabs kept)."""
    out = []
    for ch in text:
        if ch not in "\n\t" and unicodedata.category(ch) in _INVISIBLE:
            out.append(INVISIBLE_MARK)
        else:
            out.append(ch)
    return "".join(out)


def side_by_side(left: str, right: str, width: int, titles: tuple[str, str]) -> str:
    """Two texts in two columns, each wrapped to half the width."""
    col = max(20, (width - 3) // 2)

    def lines(text: str) -> list[str]:
        out: list[str] = []
        for raw in text.expandtabs(4).split("\n"):
            out.extend(
                textwrap.wrap(raw, col, replace_whitespace=False, drop_whitespace=False) or [""]
            )
        return out

    a, b = lines(left), lines(right)
    n = max(len(a), len(b))
    a += [""] * (n - len(a))
    b += [""] * (n - len(b))
    rows = [f"{titles[0]:<{col}} | {titles[1]}", f"{'-' * col}-+-{'-' * col}"]
    rows += [
        f"{x:<{col}} {'|' if x.rstrip() == y.rstrip() else '*'} {y}"
        for x, y in zip(a, b, strict=True)
    ]
    return "\n".join(rows)


def build_parser() -> CommandParser:
    p = CommandParser(
        "perturb",
        "Print a task's clean prompt beside its perturbed variants.",
        f"{PROG} perturb --task ni065 --kind format -n 5",
    )
    p.add_argument("--task", required=True, help="task, e.g. ni065 (or 065, task065)")
    p.add_argument("--kind", choices=["format", "text"], default="format", help="perturbation")
    p.add_argument("-n", type=int, default=3, help="number of perturbed variants")
    p.add_argument("--split", choices=["train", "test", "holdout"], default="test", help="split")
    p.add_argument("--example", type=int, default=0, help="index of the example in the split")
    p.add_argument(
        "--data_dir", default=None, help="local data root (else $LM_EVAL_ROBUST_DATA_DIR)"
    )
    p.add_argument("--seed", type=int, default=1234, help="perturbation seed")
    p.add_argument("--text_rate", type=float, default=0.05, help="text edits per character")
    p.add_argument(
        "--text_scope", choices=["all", "query"], default="all", help="where text edits go"
    )
    p.add_argument("--width", type=int, default=None, help="output width (default: terminal)")
    p.add_argument("--raw", action="store_true", help="do not mark invisible characters")
    return p


def main(argv: Sequence[str]) -> int:
    from lm_eval_robust.tasks.ni import NIConfig, build_docs

    args = build_parser().parse_args(list(argv))
    if args.n < 1:
        raise UserError(f"-n must be at least 1, got {args.n}")
    config = NIConfig.from_metadata(
        {
            "n_perturbations": args.n,
            "data_dir": args.data_dir,
            "seed": args.seed,
            "text_rate": args.text_rate,
            "text_scope": args.text_scope,
        }
    )
    docs = build_docs(args.task, args.kind, args.split, config)
    ids = sorted({d["example_id"] for d in docs if d["pert_id"] == 0})
    if not 0 <= args.example < len(ids):
        raise UserError(f"--example must be in [0, {len(ids) - 1}], got {args.example}")
    mine = sorted(
        (d for d in docs if d["example_id"] == ids[args.example]), key=lambda d: d["pert_id"]
    )
    width = args.width or shutil.get_terminal_size((160, 40)).columns
    fix = (lambda s: s) if args.raw else show_invisible
    clean = mine[0]
    if not args.raw:
        print(f"({INVISIBLE_MARK} marks an invisible character; * marks a line that differs)\n")
    for doc in mine[1:]:
        title = f"#{doc['pert_id']} {doc['pert_kind']} (format {doc['format_id']})"
        print(side_by_side(fix(clean["prompt"]), fix(doc["prompt"]), width, ("clean", title)))
        gold = doc["labels"][doc["gold"]]
        print(f"labels: {doc['labels']}  gold: {gold!r}  scored: {doc['choices']}\n")
    return 0
