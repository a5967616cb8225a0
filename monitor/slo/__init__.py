"""Quality SLOs: an objective on a rubric's verdicts, its error budget, and multi-window burn-rate alerts.

"The airline agent passes its policy rubric 95 % of the time over 28 days": the SLI is the share of good
evaluations (passed, or a dimension scored at least a minimum) among the scored evaluations of the newest
configuration; unscored evaluations are left out, and a series that cannot be judged suspends the SLO's alerts.

- ``spec``: the definitions, from settings (``slos:``) and from rubric files (``slo:``); pure data (rubrics import
  it, so it imports nothing of the judge).
- ``rules``: the Prometheus recording and alerting rules (the Google SRE workbook's multi-window, multi-burn-rate
  alerts, guarded by a minimum of evaluations in the long window).
- ``status``: the same figures computed by the daemon from the store (``rubric-monitor slo status``, the SLO
  gauges and the daemon's own SLO notifications).
- ``export``: Sloth and OpenSLO specs.
- ``service``: the daemon's step: gauges, and SLO alerts through the regression alerts' lifecycle and outbox.
"""
