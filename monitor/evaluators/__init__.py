"""④ Evaluators: a rubric and a conversation in, ``EvaluationResult`` objects out, through the judge. ``Evaluator``
is the contract; ``WeightedEvaluator`` (Foundry rubrics), ``AdaptiveEvaluator`` (Vertex adaptive rubrics),
``StaticMetricEvaluator`` (grounding, hallucination, safety, reference match), Foundry's ``PromptEvaluator``,
``CodeEvaluator`` and ``EndpointEvaluator``, and ``GeckoEvaluator`` (Vertex's text-to-image and text-to-video)
implement it; run over the ``ScriptedJudge`` they are their own in-memory twins. ``build_evaluators`` maps each
rubric kind to its evaluator.
"""

from __future__ import annotations

from monitor.evaluators.adaptive import AdaptiveEvaluator
from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.evaluators.cache import VerdictCache
from monitor.evaluators.code import CodeEvaluator
from monitor.evaluators.endpoint import EndpointEvaluator
from monitor.evaluators.gecko import GeckoEvaluator
from monitor.evaluators.item_cache import InMemoryItemCache, ItemStore, PersistentItemCache
from monitor.evaluators.prompt_based import PromptEvaluator
from monitor.evaluators.static import StaticMetricEvaluator
from monitor.evaluators.weighted import WeightedEvaluator
from monitor.settings import MediaSettings

__all__ = ["AdaptiveEvaluator", "CodeEvaluator", "EndpointEvaluator", "EvaluationContext", "Evaluator",
           "GeckoEvaluator", "PromptEvaluator", "StaticMetricEvaluator", "WeightedEvaluator", "build_evaluators"]


def build_evaluators(cache_size: int, item_store: ItemStore | None = None,
                     media: MediaSettings | None = None) -> dict[str, Evaluator]:
    items = PersistentItemCache(item_store, cache_size) if item_store else InMemoryItemCache(cache_size)
    evaluators: list[Evaluator] = [
        WeightedEvaluator(VerdictCache(cache_size)),
        AdaptiveEvaluator(items),
        StaticMetricEvaluator(),
        PromptEvaluator(),
        CodeEvaluator(),
        EndpointEvaluator(),
        GeckoEvaluator(items, media),
    ]
    return {kind: evaluator for evaluator in evaluators for kind in evaluator.kinds}
