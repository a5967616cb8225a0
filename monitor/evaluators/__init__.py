"""④ Evaluators: a rubric and a conversation in, ``EvaluationResult`` objects out, through the judge. ``Evaluator``
is the contract; ``WeightedEvaluator`` (Foundry rubrics), ``AdaptiveEvaluator`` (Vertex adaptive rubrics) and
``StaticMetricEvaluator`` (grounding, hallucination, safety, reference match) implement it; run over the
``ScriptedJudge`` they are their own in-memory twins. ``build_evaluators`` maps each rubric kind to its evaluator.
"""

from __future__ import annotations

from monitor.evaluators.adaptive import AdaptiveEvaluator
from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.evaluators.cache import VerdictCache
from monitor.evaluators.item_cache import InMemoryItemCache, ItemStore, PersistentItemCache
from monitor.evaluators.static import StaticMetricEvaluator
from monitor.evaluators.weighted import WeightedEvaluator

__all__ = ["AdaptiveEvaluator", "EvaluationContext", "Evaluator", "StaticMetricEvaluator", "WeightedEvaluator",
           "build_evaluators"]


def build_evaluators(cache_size: int, item_store: ItemStore | None = None) -> dict[str, Evaluator]:
    items = PersistentItemCache(item_store, cache_size) if item_store else InMemoryItemCache(cache_size)
    evaluators: list[Evaluator] = [
        WeightedEvaluator(VerdictCache(cache_size)),
        AdaptiveEvaluator(items),
        StaticMetricEvaluator(),
    ]
    return {kind: evaluator for evaluator in evaluators for kind in evaluator.kinds}
