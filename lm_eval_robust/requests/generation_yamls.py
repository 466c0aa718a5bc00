"""YAMLs of the generation tasks; :func:`lm_eval_robust.requests.ni_yamls.render_yamls` includes
them."""

from __future__ import annotations

from lm_eval_robust.base.harness_names import GEN_KINDS, gen_task_name, metric
from lm_eval_robust.tasks.generation.metrics import metric_names
from lm_eval_robust.tasks.generation.tasks import GEN_TASKS, GenConfig, GenTask

_BASE = """output_type: generate_until
custom_dataset: !function lm_eval_robust.tasks.generation.tasks.load_dataset
test_split: test
doc_to_text: prompt
doc_to_target: target
process_results: !function lm_eval_robust.tasks.generation.tasks.process_results
generation_kwargs:
  until:
{until}  do_sample: false
  temperature: 0.0
  max_gen_toks: {max_gen_toks}
metric_list:
{metrics}metadata:
  version: 1.0
  n_examples: {c.n_examples}
  n_train: {c.n_train}
  n_perturbations: {c.n_perturbations}
  n_fit_perturbations: {c.n_fit_perturbations}
  seed: {c.seed}
  text_rate: {c.text_rate}
  text_scope: {c.text_scope}
"""

_METRIC = """  - metric: {name}
    aggregation: !function {path}
    higher_is_better: {hib}
"""

_VARIANT = """include: {template}
task: {name}
{tag}dataset_kwargs:
  lmer_gen_task: {short}
  lmer_kind: {kind}
  lmer_split: {split}
"""


def _yaml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _template(task: GenTask, perturbed: bool) -> str:
    return _BASE.format(
        until="".join(f"    - {_yaml_str(u)}\n" for u in task.until),
        max_gen_toks=task.max_gen_toks,
        metrics="".join(
            _METRIC.format(
                name=m.harness_name,
                path=m.aggregation_path,
                hib="true" if m.higher_is_better else "false",
            )
            for m in map(metric, metric_names(task.metric, perturbed))
        ),
        c=GenConfig(),
    )


def render_gen_yamls(header: str) -> dict[str, str]:
    """File name -> content: per task two templates (clean, perturbed) and four variants."""
    files: dict[str, str] = {}
    for short, task in GEN_TASKS.items():
        for kind, suffix in GEN_KINDS:
            tag = "gen_clean" if kind == "clean" else None
            template = f"_gen_{short}{suffix}_yaml"
            files[template] = header + _template(task, kind == "text")
            for split in ("test", "train"):
                name = gen_task_name(short, kind, split)
                tag_name = tag or "gen_text_pert"
                files[f"{name}.yaml"] = header + _VARIANT.format(
                    template=template,
                    name=name,
                    tag=f"tag: {tag_name}\n" if split == "test" else "",
                    short=short,
                    kind=kind,
                    split=split,
                )
    return files
