"""Monte Carlo validity of the per-example certificates (the world of tests/test_certify.py).

A linear 3-class classifier on x in R^5, 300 examples x 40 perturbed variants (Gaussian noise,
or bounded and biased uniform noise); certificates from 20 estimation variants per example;
then 400 fresh perturbed variants per example measure how often certified examples fail.
Run from the repository root: python results/certificate_validity/run.py > results/certificate_validity/result.md
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from test_certify import _linear_world

import lm_eval_robust.stats.certificates as ct
from lm_eval_robust.stats.certificates import CertConfig

PHI = 0.2  # 3 classes: phi_j = 0.1 > eps_B = 1/21
print(
    "| noise | Chebyshev ν | certificate | certified | error of certified on fresh variants "
    "| worst certified example | error of uncertified |"
)
print("|---|---|---|---:|---:|---:|---:|")
for noise in ("gauss", "uniform"):
    table, fresh, gold = _linear_world(noise, seed=7)
    wrong = fresh != gold[:, None]
    for cheb in ("reference", "empirical"):
        cert = ct.certify(table, CertConfig(phi=PHI, chebyshev=cheb))
        for name, flags in (("p_H", cert.certified_h), ("p_C", cert.certified_c)):
            print(
                f"| {noise} | {cheb} | {name} | {flags.sum()}/{len(flags)} | "
                f"{wrong[flags].mean():.4f} (φ = {PHI}) | {wrong[flags].mean(axis=1).max():.3f} | "
                f"{wrong[~flags].mean():.3f} |"
            )
