"""One virtualenv per producer pin set (``requirements/<name>.txt``), built once and cached.

``ensure_venv(name)`` returns the venv's python, building it first if needed: ``python -m venv`` then
``pip install -r requirements/<name>.txt`` into ``<cache>/<name>-<sha256 of the requirements file, 12 hex>``,
where ``<cache>`` is ``$PRODUCER_VENV_CACHE`` or ``<repo>/.cache/producer-venvs`` (which ignores itself in git).
A venv is complete when its marker file ``.complete`` exists (written last, with the build time); an
incomplete one (a build that died) is removed and rebuilt. A file lock makes concurrent callers (pytest-xdist
workers, two runs) build a venv once. Only PyPI is needed.

    python -m tests.producers.venvs [NAME ...]     # build (or find) these venvs, or all of them
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = Path(__file__).resolve().parent / "requirements"
MARKER = ".complete"
log = logging.getLogger("producers.venvs")


def names() -> list[str]:
    return sorted(p.stem for p in REQUIREMENTS.glob("*.txt"))


def cache_root() -> Path:
    root = Path(os.environ.get("PRODUCER_VENV_CACHE") or REPO / ".cache" / "producer-venvs")
    root.mkdir(parents=True, exist_ok=True)
    ignore = root / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    return root


def requirements_file(name: str) -> Path:
    path = REQUIREMENTS / f"{name}.txt"
    if not path.is_file():
        raise KeyError(f"no requirements file for producer venv {name!r} ({path})")
    return path


def venv_path(name: str) -> Path:
    digest = hashlib.sha256(requirements_file(name).read_bytes()).hexdigest()[:12]
    return cache_root() / f"{name}-{digest}"


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def is_complete(name: str) -> bool:
    return (venv_path(name) / MARKER).is_file()


def ensure_venv(name: str, *, base_python: str = sys.executable) -> Path:
    """The python of the complete venv for ``name``, building it if it is missing or incomplete."""
    venv = venv_path(name)
    if (venv / MARKER).is_file():
        return python_of(venv)
    lock_path = venv.with_name(venv.name + ".lock")
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / MARKER).is_file():
            return python_of(venv)
        if venv.exists():
            shutil.rmtree(venv)
        started = time.monotonic()
        log.warning("building producer venv %s in %s", name, venv)
        subprocess.run([base_python, "-m", "venv", str(venv)], check=True)
        pip = [str(python_of(venv)), "-m", "pip", "--disable-pip-version-check", "--no-input"]
        result = subprocess.run([*pip, "install", "-q", "-r", str(requirements_file(name))],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"pip install for producer venv {name} failed ({result.returncode}):\n"
                               f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        seconds = time.monotonic() - started
        (venv / MARKER).write_text(f"built in {seconds:.1f}s\n")
        log.warning("built producer venv %s in %.1fs", name, seconds)
        return python_of(venv)


def build_seconds(name: str) -> float | None:
    """How long the cached venv took to build (from its marker), or None when it is not built."""
    marker = venv_path(name) / MARKER
    if not marker.is_file():
        return None
    return float(marker.read_text().split()[2].rstrip("s"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="venvs to build (default: all)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for name in args.names or names():
        python = ensure_venv(name)
        print(f"{name}: {python} (built in {build_seconds(name)}s)")


if __name__ == "__main__":
    main()
