"""Foundry's code-based evaluators: ``def grade(sample, item) -> float`` run in a separate process.

Each evaluation starts ``code_runner.py`` with the interpreter's isolated mode (``-I -S``: no user site, no
environment-supplied paths), in a new session and an empty temporary directory, with no environment but ``PATH``
and the locale. The runner limits its address space (``memory_mb``) and CPU time, removes its own network access
(or, where namespaces are forbidden, guards it with an audit hook: see ``code_runner``), then runs the grader
with ``sample`` (``output_text``: the judged reply, ``output_json``: the reply parsed as JSON or null,
``output_tools``: its turn's tool calls) and ``item`` (the conversation's fields, as ``data_schema`` declares).

The daemon never runs the operator's code itself and never waits past ``timeout_seconds``: the process group is
killed at the limit. Every failure is the evaluation's, recorded ``unscored`` with its reason:
``code_timeout`` (wall clock or CPU limit), ``code_memory`` (``MemoryError`` or killed at the memory limit),
``code_error`` (an exception, with its message), ``code_crash`` (another signal or exit), ``invalid_result`` (a
value that does not fit ``metrics``). At most ``CodeEvaluator.max_processes`` graders run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor.evaluators.base import EvaluationContext, InvalidReply, JudgeUsage, extract_json, unscored_result
from monitor.evaluators.foundry import check_data, conversation_fields, missing_data, parse_metrics, scored_result
from monitor.evaluators.views import EachReply, Target
from monitor.models import Conversation, EvaluationResult
from monitor.rubrics.evaluator_kinds import CodeEvaluatorRubric

RUNNER = Path(__file__).with_name("code_runner.py")
MAX_REPLY_BYTES = 1 << 20
"""The runner's reply is read up to this size; a grader returning more is ``invalid_result``."""
MAX_STDERR_BYTES = 8192
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


@dataclass(frozen=True)
class RunOutcome:
    value: Any = None
    problem: str | None = None
    """``code_timeout``, ``code_memory``, ``code_error``, ``code_crash`` or ``invalid_result``; None on success."""
    detail: str = ""
    isolation: str | None = None


async def _read_bounded(stream: asyncio.StreamReader, limit: int) -> bytes:
    """Up to ``limit`` bytes; the rest is read and dropped, so a chatty grader neither blocks nor fills memory."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return bytes(kept)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_grader(code: str, function: str, sample: Any, item: Any, init_parameters: dict[str, Any],
                     timeout_seconds: float, memory_mb: int, namespaces: bool = True) -> RunOutcome:
    """Run the grader once in its own process; never raises for anything the grader does."""
    request = json.dumps({"code": code, "function": function, "sample": sample, "item": item,
                          "init_parameters": init_parameters}, ensure_ascii=False, default=str).encode()
    cpu_seconds = max(1, int(timeout_seconds) + 1)
    with tempfile.TemporaryDirectory(prefix="rubric-monitor-code-") as workdir:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", str(RUNNER), str(memory_mb * 1024 * 1024), str(cpu_seconds),
            *(() if namespaces else ("--no-namespace",)),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=workdir, env=_ENV, start_new_session=True,
        )
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None

        async def talk() -> tuple[bytes, bytes]:
            assert process.stdin is not None and process.stdout is not None and process.stderr is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                process.stdin.write(request)
                await process.stdin.drain()
                process.stdin.close()
            out, err = await asyncio.gather(_read_bounded(process.stdout, MAX_REPLY_BYTES + 1),
                                            _read_bounded(process.stderr, MAX_STDERR_BYTES))
            await process.wait()
            return out, err

        try:
            out, err = await asyncio.wait_for(talk(), timeout_seconds)
        except TimeoutError:
            _kill_group(process.pid)
            await process.wait()
            return RunOutcome(problem="code_timeout", detail=f"still running after {timeout_seconds:g} s: killed")
        except BaseException:
            _kill_group(process.pid)  # cancelled (shutdown): the grader must not outlive the evaluation
            await process.wait()
            raise
        finally:
            _kill_group(process.pid)  # whatever the grader started in its session ends with it
    return _outcome(process.returncode, out, err, memory_mb)


def _outcome(returncode: int | None, out: bytes, err: bytes, memory_mb: int) -> RunOutcome:
    line = out.decode("utf-8", errors="replace").strip().splitlines()
    reply: dict[str, Any] | None = None
    if line and len(out) <= MAX_REPLY_BYTES:
        with contextlib.suppress(ValueError):
            parsed = json.loads(line[-1])
            reply = parsed if isinstance(parsed, dict) else None
    if reply is None:
        tail = err.decode("utf-8", errors="replace").strip()[-300:]
        if returncode is not None and returncode < 0:
            number = -returncode
            if number == signal.SIGXCPU:
                return RunOutcome(problem="code_timeout", detail="CPU time limit reached")
            if number == signal.SIGKILL:
                return RunOutcome(problem="code_memory", detail=f"killed (memory limit {memory_mb} MB)")
            return RunOutcome(problem="code_crash", detail=f"ended by signal {signal.Signals(number).name}")
        if len(out) > MAX_REPLY_BYTES:
            return RunOutcome(problem="invalid_result", detail=f"the result is over {MAX_REPLY_BYTES} bytes")
        if "MemoryError" in tail:
            return RunOutcome(problem="code_memory", detail=f"out of memory (limit {memory_mb} MB)")
        shown = f": {tail}" if tail else ""
        return RunOutcome(problem="code_crash", detail=f"exit status {returncode}, no result{shown}")
    isolation = reply.get("isolation") if isinstance(reply.get("isolation"), str) else None
    if reply.get("ok"):
        return RunOutcome(value=reply.get("value"), isolation=isolation)
    kind, error = reply.get("kind"), str(reply.get("error") or "")
    if kind == "memory":
        return RunOutcome(problem="code_memory", detail=f"{error} (limit {memory_mb} MB)", isolation=isolation)
    return RunOutcome(problem="code_error", detail=error, isolation=isolation)


def grader_sample(fields: dict[str, Any]) -> dict[str, Any]:
    """``sample`` as OpenAI's Python graders receive it: the model output under test."""
    text = str(fields.get("response", ""))
    try:
        as_json = extract_json(text) if text.strip().startswith(("{", "[", "```")) else None
    except (InvalidReply, ValueError):
        as_json = None
    tools = [call for message in fields.get("response_messages", ()) for call in message.get("tool_calls", ())]
    return {"output_text": text, "output_json": as_json, "output_tools": tools}


class CodeEvaluator(EachReply[CodeEvaluatorRubric]):
    kinds: tuple[str, ...] = ("code",)

    def __init__(self, max_processes: int | None = None, namespaces: bool = True) -> None:
        self.max_processes = max_processes or max(1, os.cpu_count() or 1)
        self.namespaces = namespaces
        """False: skip the network namespace and rely on the audit hook (tests of the fallback)."""
        self._slots = asyncio.Semaphore(self.max_processes)

    async def _evaluate_target(
        self, conversation: Conversation, rubric: CodeEvaluatorRubric, context: EvaluationContext, target: Target
    ) -> EvaluationResult:
        all_fields = conversation_fields(target)
        fields, problem = check_data(rubric, all_fields)
        if problem is not None:
            return missing_data(conversation, rubric, context, target, problem)
        async with self._slots:
            outcome = await run_grader(rubric.code_text or "", rubric.function, grader_sample(all_fields), fields,
                                       rubric.initialization_parameters, rubric.timeout_seconds, rubric.memory_mb,
                                       self.namespaces)
        usage = JudgeUsage()
        extra = {"network_isolation": outcome.isolation} if outcome.isolation else {}
        if outcome.problem is None:
            try:
                values, reason = parse_metrics(rubric, outcome.value)
            except (InvalidReply, ValueError) as exc:
                outcome = RunOutcome(problem="invalid_result", detail=str(exc), isolation=outcome.isolation)
            else:
                return scored_result(conversation, rubric, context, target, usage, values, reason, extra)
        return unscored_result(conversation, rubric, context, target.turn_index, usage,
                               f"{outcome.problem}: {outcome.detail}", f"Unscored: the grader failed "
                               f"({outcome.problem}): {outcome.detail}", details=extra)
