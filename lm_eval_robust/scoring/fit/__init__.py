"""The ridge solver of the input-dependent correction and the cross-validation folds it is
scored on; choosing and running a fit is :mod:`lm_eval_robust.stats.fit` (aggregation)."""
