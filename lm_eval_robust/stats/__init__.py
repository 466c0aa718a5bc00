"""Layer 6, aggregation: numbers over many docs (classification metrics, margins,
certificates, bootstrap intervals, robustness and stderr aggregations, the stock metrics of
wrapped tasks); ``fit`` holds the fit of a correction (constant and ridge, with its
cross-validation, radii and measurements)."""
