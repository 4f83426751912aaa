"""``ctxpolicy tune``: search a policy's numbers on recorded traces (docs/tune.md).

* :mod:`ctxpolicy.tune.space` — parameters, default ranges, the policy overlay;
* :mod:`ctxpolicy.tune.objectives` — cost, retention and constraints from ``simulate``'s metrics;
* :mod:`ctxpolicy.tune.runner` — the seeded optuna study, held-out check and ablation;
* :mod:`ctxpolicy.tune.diff` — the reviewed output: a validated policy diff;
* :mod:`ctxpolicy.tune.report` — HTML report, Pareto plot and ``--json`` document.

Importing this package is light (no optuna); the CLI imports the runner lazily.
"""
