"""rubric-monitor: score production LLM agent conversations against rubrics, continuously."""

__version__ = "0.1.0"
