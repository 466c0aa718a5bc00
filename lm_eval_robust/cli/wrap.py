"""``lm-eval-robust wrap data|list``: local data for stock tasks, and variant names of tasks.

``wrap data`` writes the local copies that ``--metadata '{"local_data": DIR}'`` reads
(:mod:`lm_eval_robust.tasks.wrap.convert`); ``wrap list`` prints the perturbed-variant names of
tasks, groups or tags lm-eval knows, comma-separated for ``--tasks``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli.args import PROG, CommandParser

__all__ = ["build_parser", "main"]


def build_parser() -> CommandParser:
    p = CommandParser(
        "wrap",
        "Perturbed variants of stock lm-eval tasks (<task>_robust_text, <task>_robust_format, "
        "resolved by lm_eval itself). 'data' converts BIG-bench task.json folders and GSM8K's "
        'test.jsonl into the files --metadata \'{"local_data": "OUT"}\' points stock tasks at; '
        "'list' prints the variant names of tasks, groups or tags; 'debias' fits a label offset "
        "on a "
        "run of <task>_robust_<kind>_train and applies it to a run of ..._test (fixed label sets "
        "only).",
        f"{PROG} wrap data --bigbench ../shared/data/bigbench --gsm8k ../shared/data/gsm8k "
        "-o ~/lmer-data",
    )
    p.add_argument("action", choices=("data", "list", "debias"), help="what to do")
    p.add_argument(
        "names", nargs="*", help="list: task, group or tag names; debias: TRAIN_RUN TEST_RUN"
    )
    p.add_argument("--bigbench", help="data: folder of BIG-bench <task>/task.json folders")
    p.add_argument("--gsm8k", help="data: GSM8K's test.jsonl or its folder")
    p.add_argument("-o", "--output", help="data: folder to write (local_data)")
    p.add_argument("--kinds", default="text,format", help="list: text, format or both")
    p.add_argument("--split", default="all", choices=("all", "train", "test", "holdout"))
    return p


def _data(bigbench: str | None, gsm8k: str | None, output: str | None) -> None:
    from lm_eval_robust.tasks.wrap.convert import convert_bigbench, convert_gsm8k

    if not output or not (bigbench or gsm8k):
        raise UserError("wrap data needs -o OUT and --bigbench DIR and/or --gsm8k DIR")
    out = Path(output).expanduser()
    if bigbench:
        for task, n in convert_bigbench(bigbench, out).items():
            print(f"bigbench/{task}_zero_shot/default.jsonl: {n} rows")
    if gsm8k:
        print(f"gsm8k/main/test.jsonl: {convert_gsm8k(gsm8k, out)} rows")
    print(f'use: --metadata \'{{"local_data": "{out}"}}\'')


def _list(names: Sequence[str], kinds: Sequence[str], split: str) -> None:
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._index import Kind

    import lm_eval_robust
    from lm_eval_robust.tasks.wrap.names import variant_names

    if not names:
        raise UserError("wrap list needs task, group or tag names")
    lm_eval_robust.register()
    tm = TaskManager()
    index = tm.task_index
    leaves: list[str] = []

    def walk(name: str, depth: int = 0) -> None:
        entry = index.get(name)
        if entry is None:
            raise UserError(f"lm-eval knows no task, group or tag {name!r}")
        if entry.kind == Kind.TAG:
            for t in sorted(entry.tags):
                walk(t, depth + 1)
        elif entry.kind == Kind.GROUP and depth < 10:
            cfg = tm._factory._load_full_config(entry, None)
            for member in cfg.get("task") or []:
                walk(member if isinstance(member, str) else str(member.get("task")), depth + 1)
        elif name not in leaves:
            leaves.append(name)

    for name in names:
        walk(name)
    wanted = tuple(k.strip() for k in kinds if k.strip())
    print(",".join(v for t in leaves for v in variant_names(t, wanted, split)))


def _debias(names: Sequence[str]) -> None:
    from lm_eval_robust.report.wrap_debias import DebiasError, debias_task, to_markdown
    from lm_eval_robust.tasks.wrap.names import parse
    from lm_eval_robust.values.pairing import load_run

    if len(names) != 2:
        raise UserError("wrap debias needs TRAIN_RUN TEST_RUN (runs of ..._train and ..._test)")
    train, test = load_run(names[0]), load_run(names[1])
    results, notes = [], []
    for name, tr in sorted(train.tasks.items()):
        v = parse(name)
        if v is None or v.split != "train":
            continue
        twin = f"{v.base}_robust_{v.kind}_test"
        if twin not in test.tasks:
            notes.append(f"{name}: no {twin} in {names[1]}; skipped")
            continue
        try:
            results.append(debias_task(tr, test.tasks[twin]))
        except DebiasError as exc:
            notes.append(str(exc))
    if results:
        print(to_markdown(results))
    for note in notes:
        print(f"- {note}")
    if not results and not notes:
        raise UserError(f"{names[0]} has no <task>_robust_<kind>_train task")


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    if args.action == "data":
        _data(args.bigbench, args.gsm8k, args.output)
    elif args.action == "debias":
        _debias(args.names)
    else:
        _list(args.names, args.kinds.split(","), args.split)
    return 0
