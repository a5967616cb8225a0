"""Rubric hot reload through a mounted Kubernetes ConfigMap.

kubelet mounts a ConfigMap as ``<dir>/..<timestamp>/<key>`` files, a ``..data`` symlink to the current
timestamped directory and one top-level ``<key> -> ..data/<key>`` symlink per key. An update writes a new
timestamped directory, points a temporary symlink at it, renames that over ``..data`` (atomic) and deletes the old
directory (kubernetes/pkg/volume/util/atomic_writer.go). This test lays files out and swaps them the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from monitor.evaluators.versions import builtin_version
from monitor.rubrics.registry import RubricRegistry
from monitor.rubrics.schema import Rubric

_generation = 0


def written(rubrics: list[Rubric]) -> list[tuple[str, str]]:
    """(name, version as written in the file): the registry appends the built-in prompt's version after "+"."""
    return sorted((r.name, (r.version or "").split("+", 1)[0]) for r in rubrics)


def weighted(name: str, version: str) -> str:
    return yaml.safe_dump({"name": name, "kind": "weighted", "version": version, "agents": ["*"], "dimensions": [
        {"id": "resolution", "description": "Resolves the request within policy.", "weight": 9},
        {"id": "tone", "description": "Polite and concise throughout the conversation.", "weight": 3},
    ]})


def kubelet_write(mount: Path, files: dict[str, str]) -> None:
    """Publish ``files`` as kubelet's atomic writer does: new timestamped dir, ``..data`` swapped by rename,
    top-level symlinks for new keys, stale ones and the old directory removed."""
    global _generation
    _generation += 1
    mount.mkdir(exist_ok=True)
    data_link = mount / "..data"
    old = os.readlink(data_link) if data_link.is_symlink() else None
    new_dir = mount / f"..2026_12_01_11_00_00.{_generation:09d}"
    new_dir.mkdir()
    for key, text in files.items():
        (new_dir / key).write_text(text, encoding="utf-8")
    tmp_link = mount / "..data_tmp"
    os.symlink(new_dir.name, tmp_link)
    os.rename(tmp_link, data_link)
    for key in files:
        if not (mount / key).is_symlink():
            os.symlink(f"..data/{key}", mount / key)
    for entry in mount.iterdir():
        if not entry.name.startswith("..") and entry.name not in files:
            entry.unlink()
    if old is not None:
        for stale in (mount / old).iterdir():
            stale.unlink()
        (mount / old).rmdir()


def test_configmap_mount_loads_each_rubric_once(tmp_path: Path) -> None:
    mount = tmp_path / "rubrics"
    kubelet_write(mount, {"support.yaml": weighted("support", "1"), "billing.yaml": weighted("billing", "1")})
    registry = RubricRegistry(mount, builtin_version)
    rubrics = registry.load()
    assert written(rubrics) == [("billing", "1"), ("support", "1")]
    assert {p.name for p in registry.sources().values()} == {"support.yaml", "billing.yaml"}
    assert registry.problems == {}


def test_configmap_symlink_swap_is_hot_reloaded(tmp_path: Path) -> None:
    mount = tmp_path / "rubrics"
    kubelet_write(mount, {"support.yaml": weighted("support", "1"), "billing.yaml": weighted("billing", "1")})
    registry = RubricRegistry(mount, builtin_version)
    registry.load()

    # kubectl apply of an edited ConfigMap: one rubric changes version, one is removed, one is added.
    kubelet_write(mount, {"support.yaml": weighted("support", "2"), "refunds.yaml": weighted("refunds", "1")})
    changes = registry.refresh()

    assert changes.updated == ("support",)
    assert changes.added == ("refunds",)
    assert changes.removed == ("billing",)
    assert changes.rejected == ()
    assert written(registry.active()) == [("refunds", "1"), ("support", "2")]
    assert registry.problems == {}

    # A second swap to a broken file keeps the previous version active and names the file.
    kubelet_write(mount, {"support.yaml": "name: support\ndimensions: 3\n", "refunds.yaml": weighted("refunds", "1")})
    changes = registry.refresh()
    assert changes.rejected == (str(mount / "support.yaml"),)
    assert written(registry.active()) == [("refunds", "1"), ("support", "2")]
    assert list(registry.problems) == [str(mount / "support.yaml")]
