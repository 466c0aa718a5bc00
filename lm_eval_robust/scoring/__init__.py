"""Layer 4, model + correction: scoring requests (the ``debiased_hf`` and ``debiased_vllm``
models, label scores, feature collection, the prefix cache) and changing the scores (the
correction file and its maths, LoRA); ``fit`` holds the ridge solver and its folds, ``generation``
the intermediate-layer correction of the generation tasks."""
