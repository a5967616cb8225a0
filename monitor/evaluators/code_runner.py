"""Runs one code evaluator's grading function in this (separate, short-lived) process; standard library only.

Started by ``monitor.evaluators.code`` as ``python -I -S code_runner.py MEMORY_BYTES CPU_SECONDS
[--no-namespace]`` (the last for tests of the fallback); reads
``{"code", "function", "sample", "item", "init_parameters"}`` as JSON on stdin and writes one JSON line on
stdout: ``{"ok": true, "value": ...}`` or ``{"ok": false, "kind": "exception" | "memory" | "setup", "error": ...}``.

Before the operator's code runs, in this order:
- ``RLIMIT_AS`` (address space) and ``RLIMIT_CPU`` (CPU seconds, a backstop to the parent's wall-clock kill) are
  set, so an unbounded allocation raises ``MemoryError`` (or the kernel ends the process) in here;
- the network is removed: the process enters new user and network namespaces (``unshare``), where no interface
  but a down loopback exists, so no connection can be made, by Python or by native code. Where namespaces are
  not allowed (many container runtimes forbid them), an audit hook refuses socket creation, connections, name
  lookups, ctypes and subprocesses instead: that stops ordinary code, but it is a guard, not a sandbox: code
  written to escape a Python audit hook can. The parent records which guarantee held (``network_isolation``);
- an audit hook refuses new processes (fork, exec, subprocess, os.system) in both cases, so nothing outlives the
  run (the parent also kills the whole process group);
- what the code prints goes to a bounded buffer, not to the reply.
"""

from __future__ import annotations

import io
import json
import os
import resource
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MAX_PRINTED = 4096
_PROCESS_EVENTS = ("os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen",
                   "os.startfile", "pty.spawn")
_NETWORK_EVENTS = ("socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.gethostbyname",
                   "socket.gethostbyaddr", "socket.sendto", "socket.sendmsg", "ctypes.dlopen", "ctypes.dlsym",
                   "ctypes.call_function", "ctypes.cdata")


def _isolate_network() -> str:
    """'namespace' when the process now has no network; 'audit_hook' when only the hook below guards it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
            return "namespace"
    except Exception:
        pass
    return "audit_hook"


def _install_hook(block_network: bool) -> None:
    blocked = _PROCESS_EVENTS + (_NETWORK_EVENTS if block_network else ())

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event in blocked or (block_network and event == "import" and args and args[0] in ("ctypes", "_ctypes")):
            raise PermissionError(f"{event} is not allowed in a code evaluator")

    sys.addaudithook(hook)


class _Bounded(io.TextIOBase):
    def __init__(self) -> None:
        self.kept: list[str] = []
        self.size = 0

    def write(self, text: str) -> int:
        if self.size < MAX_PRINTED:
            self.kept.append(text[: MAX_PRINTED - self.size])
            self.size += len(text)
        return len(text)


def main() -> None:
    memory, cpu = int(sys.argv[1]), int(sys.argv[2])
    reply = os.fdopen(os.dup(1), "w", encoding="utf-8")
    try:
        request = json.loads(sys.stdin.read())
    except ValueError as exc:
        reply.write(json.dumps({"ok": False, "kind": "setup", "error": f"bad request: {exc}"}) + "\n")
        return
    isolation = _isolate_network() if "--no-namespace" not in sys.argv[3:] else "audit_hook"
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    _install_hook(block_network=isolation != "namespace")
    printed = _Bounded()
    sys.stdout = sys.stderr = printed
    outcome: dict[str, object] = {"isolation": isolation}
    try:
        parameters = request.get("init_parameters") or {}
        namespace: dict[str, object] = {"__name__": "code_evaluator", "init_parameters": parameters}
        exec(compile(request["code"], "<code evaluator>", "exec"), namespace)  # the operator's grader
        function = namespace.get(request["function"])
        if not callable(function):
            raise NameError(f"the code defines no function {request['function']}(sample, item)")
        value = function(request["sample"], request["item"])
        text = json.dumps({"ok": True, "value": value, **outcome}, allow_nan=False)
    except MemoryError:
        text = json.dumps({"ok": False, "kind": "memory", "error": "MemoryError", **outcome})
    except BaseException as exc:  # the grader's failure is the result, whatever it is
        message = f"{type(exc).__name__}: {exc}"[:1000]
        text = json.dumps({"ok": False, "kind": "exception", "error": message, **outcome})
    reply.write(text + "\n")
    reply.flush()


if __name__ == "__main__":
    main()
