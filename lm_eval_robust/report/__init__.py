"""Reports over lm-eval runs of our tasks: robustness per task, paired base-vs-debiased deltas,
certificates, clustered BCa CIs, Markdown/CSV/JSON tables and plots.

The command is ``lm-eval-robust report RUN [RUN ...]`` (:mod:`lm_eval_robust.cli.report`).
Nothing heavy is imported here: matplotlib loads only when plots are written.
"""
