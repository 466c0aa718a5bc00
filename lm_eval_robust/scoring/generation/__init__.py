"""Intermediate-layer debiasing of the generation tasks: decoder layers and state collection
(``layers``), the layer correction and its file (``fit``), the tuning of its settings
(``tune``) and the scoring of generations under it (``gen_score``)."""
