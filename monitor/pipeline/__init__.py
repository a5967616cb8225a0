"""The one place that knows the order of the stages. In: the built stages. Out: a ``CycleReport`` per cycle.

``Pipeline`` runs the scoring stages (pull → store → assemble → sample → judge → record → prune), ``Cycle`` adds
the steps after them (``steps``), and ``Backfill`` runs the same source, assembler, evaluator and store over a
past window.
"""

from monitor.pipeline.budget import BudgetGate
from monitor.pipeline.cycle import CycleReport, Pipeline, RubricProvider
from monitor.pipeline.steps import AlertsStep, CanaryStep, Cycle, GaugesStep, HealthStep, Step, WriteBackStep

__all__ = ["AlertsStep", "BudgetGate", "CanaryStep", "Cycle", "CycleReport", "GaugesStep", "HealthStep", "Pipeline",
           "RubricProvider", "Step", "WriteBackStep"]
