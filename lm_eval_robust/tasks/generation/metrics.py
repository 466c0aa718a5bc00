"""Scores of generated answers, and the harness aggregations of the generation tasks.

* **Exact match** (NQ-open, TriviaQA), normalised as the harness's ``nq_open``/``triviaqa`` tasks
  do: the leading whitespace of the generation is dropped and it is cut at the first stop
  sequence (the harness's ``until``); then, for prediction and every reference alike, articles
  are removed (the ``regexes_to_ignore`` of ``nq_open``), the text is lower-cased and ASCII
  punctuation removed; the score is 1 if any accepted answer (every alias) matches. We also strip
  surrounding whitespace after normalising, which the harness does not (a trailing space would
  otherwise fail a match).
* **GSM8K**: exact match of the final number: the number after ``#### `` if the generation has
  one (the harness's ``strict-match``), else its last number (``flexible-extract``); commas,
  ``$`` and a trailing ``.`` are removed on both sides.
* **XSum**: token F1 (SQuAD normalisation: lower case, no punctuation, no articles) and ROUGE-1,
  ROUGE-2 and ROUGE-L F-measures (tokens: lower-cased alphanumeric runs, no stemming).

Per-doc items carry the example and perturbation ids; every aggregation groups by them, so the
document order does not matter. ``*_drop`` is perturbed minus clean (negative is a drop), as the
classification tasks sign it.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lm_eval_robust.base.harness_names import GEN_SCORES, gen_metric_names

__all__ = [
    "exact_match_any",
    "gsm8k_number",
    "rouge_l",
    "rouge_n",
    "score_generation",
    "token_f1",
]

_ARTICLES_HARNESS = re.compile(r"\b(?:The |the |An |A |The |a |an )")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalise_answer(text: str) -> str:
    """The harness's exact-match normalisation (articles, case, punctuation), then strip."""
    text = _ARTICLES_HARNESS.sub("", text)
    return text.lower().translate(_PUNCT).strip()


def exact_match_any(prediction: str, answers: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised accepted answer."""
    pred = normalise_answer(prediction)
    return float(any(pred == normalise_answer(a) for a in answers))


_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")


def _clean_number(text: str) -> str:
    text = text.replace(",", "").replace("$", "").strip()
    return text[:-1] if text.endswith(".") else text


def gsm8k_number(generation: str) -> str | None:
    """The final number of a GSM8K generation (strict ``#### n``, else the last number)."""
    strict = _STRICT.findall(generation)
    if strict:
        return _clean_number(strict[0])
    found = [a or b for a, b in _FLEXIBLE.findall(generation)]
    return _clean_number(found[-1]) if found else None


def _squad_tokens(text: str) -> list[str]:
    text = text.lower().translate(_PUNCT)
    return _ARTICLES.sub(" ", text).split()


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD-style token F1 between a prediction and a reference."""
    pred, ref = _squad_tokens(prediction), _squad_tokens(reference)
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    p, r = common / len(pred), common / len(ref)
    return 2 * p * r / (p + r)


def _rouge_tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _f(overlap: int, n_pred: int, n_ref: int) -> float:
    if overlap == 0 or n_pred == 0 or n_ref == 0:
        return 0.0
    p, r = overlap / n_pred, overlap / n_ref
    return 2 * p * r / (p + r)


def rouge_n(prediction: str, reference: str, n: int) -> float:
    """ROUGE-n F-measure (clipped n-gram overlap)."""
    pt, rt = _rouge_tokens(prediction), _rouge_tokens(reference)
    pg = Counter(tuple(pt[i : i + n]) for i in range(len(pt) - n + 1))
    rg = Counter(tuple(rt[i : i + n]) for i in range(len(rt) - n + 1))
    return _f(sum((pg & rg).values()), sum(pg.values()), sum(rg.values()))


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure (longest common subsequence of tokens)."""
    pt, rt = _rouge_tokens(prediction), _rouge_tokens(reference)
    if not pt or not rt:
        return 0.0
    prev = [0] * (len(rt) + 1)
    for a in pt:
        cur = [0]
        for j, b in enumerate(rt, start=1):
            cur.append(prev[j - 1] + 1 if a == b else max(prev[j], cur[j - 1]))
        prev = cur
    return _f(prev[-1], len(pt), len(rt))


def cut_at_stop(generation: str, until: Sequence[str]) -> str:
    """The generation without leading whitespace, up to its first stop sequence."""
    text = generation.lstrip()
    for stop in until:
        if stop and stop in text:
            text = text[: text.index(stop)]
    return text


def score_generation(
    metric: str, generation: str, answers: Sequence[str], until: Sequence[str] = ()
) -> dict[str, float]:
    """Every score of one generation for a task whose primary metric is ``metric``."""
    if metric == "em":
        return {"em": exact_match_any(cut_at_stop(generation, until), answers)}
    if metric == "em_number":
        num = gsm8k_number(cut_at_stop(generation, until))
        gold = {_clean_number(a) for a in answers}
        return {"em": float(num is not None and num in gold)}
    if metric == "f1":
        text = cut_at_stop(generation, until)
        ref = answers[0]
        return {
            "f1": token_f1(text, ref),
            "rouge1": rouge_n(text, ref, 1),
            "rouge2": rouge_n(text, ref, 2),
            "rougeL": rouge_l(text, ref),
        }
    raise ValueError(f"unknown generation metric {metric!r}")


# --------------------------------------------------------------------------------------------
# aggregations (the harness calls each with the list of per-doc items)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _per_example(items: Sequence[Mapping[str, Any]], score: str, clean: bool) -> list[float]:
    """Mean score per source example over its clean (or perturbed) docs, deduplicated by id."""
    seen: dict[tuple[str, int], float] = {}
    for it in items:
        if (int(it["pert_id"]) == 0) == clean:
            seen[(str(it["example_id"]), int(it["pert_id"]))] = float(it["scores"][score])
    by_ex: dict[str, list[float]] = {}
    for (ex, _), v in sorted(seen.items()):
        by_ex.setdefault(ex, []).append(v)
    return [_mean(v) for _, v in sorted(by_ex.items())]


def score_clean(items: Sequence[Mapping[str, Any]], score: str) -> float:
    """Mean score of the clean prompts."""
    return _mean(_per_example(items, score, clean=True))


def score_pert(items: Sequence[Mapping[str, Any]], score: str) -> float:
    """Mean over examples of the mean score of their perturbed prompts."""
    return _mean(_per_example(items, score, clean=False))


def score_drop(items: Sequence[Mapping[str, Any]], score: str) -> float:
    """Perturbed minus clean (negative is a drop)."""
    return score_pert(items, score) - score_clean(items, score)


def _aggregation(score: str, which: str) -> Callable[[Sequence[Mapping[str, Any]]], float]:
    fn = {"clean": score_clean, "pert": score_pert, "drop": score_drop}[which]

    def agg(items: Sequence[Mapping[str, Any]]) -> float:
        return 100.0 * fn(items, score)

    agg.__name__ = f"{score}_{which}"
    agg.__doc__ = f"{which} {score} in percent (see :func:`score_{which}`)"
    return agg


#: score names per primary metric; metric names are ``<score>_<clean|pert|drop>``
SCORES: dict[str, tuple[str, ...]] = GEN_SCORES

em_clean = _aggregation("em", "clean")
em_pert = _aggregation("em", "pert")
em_drop = _aggregation("em", "drop")
f1_clean = _aggregation("f1", "clean")
f1_pert = _aggregation("f1", "pert")
f1_drop = _aggregation("f1", "drop")
rouge1_clean = _aggregation("rouge1", "clean")
rouge1_pert = _aggregation("rouge1", "pert")
rouge1_drop = _aggregation("rouge1", "drop")
rouge2_clean = _aggregation("rouge2", "clean")
rouge2_pert = _aggregation("rouge2", "pert")
rouge2_drop = _aggregation("rouge2", "drop")
rougeL_clean = _aggregation("rougeL", "clean")
rougeL_pert = _aggregation("rougeL", "pert")
rougeL_drop = _aggregation("rougeL", "drop")


def metric_names(metric: str, perturbed: bool) -> tuple[str, ...]:
    """The short metric names of a task (clean variants report only ``*_clean``)."""
    return gen_metric_names(metric, perturbed)
