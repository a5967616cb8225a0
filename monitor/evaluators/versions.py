"""The version of each built-in prompt, for rubric versions (``monitor.rubrics`` is handed ``builtin_version``: the
rubric schema knows nothing of prompts or the judge)."""

from __future__ import annotations

from monitor.evaluators.adaptive import adaptive_prompt_texts
from monitor.evaluators.code import RUNNER
from monitor.evaluators.gecko import gecko_prompt_texts
from monitor.evaluators.prompt_based import prompt_evaluator_texts
from monitor.evaluators.prompts import fingerprint
from monitor.evaluators.static import static_prompt_texts
from monitor.evaluators.weighted import weighted_prompt_texts
from monitor.rubrics.builtin import BUILTIN_METRICS


def builtin_version(kind: str, metric: str | None = None) -> str:
    """The version of a built-in prompt, named like Vertex's (``general_quality_v1``): the metric (or kind)
    and a fingerprint of every prompt text it sends, e.g. ``general_quality_3f9a1c2b``. A change to any of its
    prompt text changes it, and with it the version of every rubric using it (see ``rubrics.loader``), so
    metric series and regression baselines never mix prompts."""
    if kind == "weighted":
        texts = weighted_prompt_texts()
    elif kind == "adaptive":
        texts = adaptive_prompt_texts(BUILTIN_METRICS[metric or "general_quality"])
    elif kind == "prompt":
        texts = prompt_evaluator_texts()
    elif kind == "code":
        texts = (RUNNER.read_text(encoding="utf-8"),)  # how the grader is run is part of what it measures
    elif kind == "endpoint":
        texts = ("endpoint", "1")
    elif kind.startswith("gecko_"):
        texts = gecko_prompt_texts(kind)
    else:
        texts = static_prompt_texts(kind)
    return f"{metric if kind == 'adaptive' and metric else kind}_{fingerprint(texts)}"
