"""The fit of a correction over many docs: the constant and ridge fits (``constant``,
``ridge_cv``), clean calibration, radii, measurements, the ``fit`` run and its ``auto`` choice."""
