"""Egress is explicit per destination: the base NetworkPolicy allows DNS only, and each destination (Azure HTTPS
endpoints, PostgreSQL, an in-cluster Alertmanager, an OTLP collector) is a kustomize component an overlay adds,
each rule naming where it goes. The production overlay's image is pinned by digest (tools/pin_image.py), and the
container runs with a group other than 0."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.test_deploy import DEPLOY, kubectl, one, render, validate

DESTINATIONS = {"egress-azure": [(443, "TCP")], "egress-postgresql": [(5432, "TCP")],
                "egress-alertmanager": [(9093, "TCP")], "egress-otlp-collector": [(4318, "TCP")]}
DNS = [(53, "TCP"), (53, "UDP")]


def egress_ports(policy: dict[str, Any]) -> list[tuple[int, str]]:
    return sorted((p["port"], p["protocol"]) for rule in policy["spec"]["egress"] for p in rule["ports"])


def render_dir(path: Path) -> tuple[dict[str, Any], ...]:
    result = subprocess.run([kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def test_every_egress_rule_names_its_destination() -> None:
    for overlay in ("base", "dev", "azure"):
        policy = one(render(overlay), "NetworkPolicy")
        for rule in policy["spec"]["egress"]:
            assert rule.get("to"), f"{overlay}: egress on {rule['ports']} to any destination"


def test_the_base_allows_dns_only_and_the_dev_overlay_nothing_more() -> None:
    assert egress_ports(one(render("base"), "NetworkPolicy")) == DNS
    assert egress_ports(one(render("dev"), "NetworkPolicy")) == DNS


def test_the_azure_overlay_adds_https_and_postgresql() -> None:
    assert egress_ports(one(render("azure"), "NetworkPolicy")) == sorted(DNS + [(443, "TCP"), (5432, "TCP")])


def test_each_component_adds_its_destination_and_renders_valid(tmp_path: Path) -> None:
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    overlay = copy / "overlays" / "all"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["../../base"], "components": [f"../../components/{name}" for name in DESTINATIONS]}))
    policy = one(render_dir(overlay), "NetworkPolicy")
    validate(policy, "1.31.0")
    assert egress_ports(policy) == sorted(DNS + [p for ports in DESTINATIONS.values() for p in ports])
    for rule in policy["spec"]["egress"]:
        assert rule.get("to")
    alertmanager = next(r for r in policy["spec"]["egress"] if r["ports"][0]["port"] == 9093)
    assert alertmanager["to"][0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "alertmanager"}


def test_the_deploy_doc_names_every_component() -> None:
    doc = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    for name in DESTINATIONS:
        assert f"deploy/components/{name}" in doc


def pin(overlay: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "tools" / "pin_image.py"), str(overlay), *args],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": f"{Path(kubectl()).parent}:/usr/bin:/bin"})


def test_the_production_overlay_refuses_an_image_without_a_digest(tmp_path: Path) -> None:
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    azure = copy / "overlays" / "azure"
    refused = pin(azure, "--check")
    assert refused.returncode != 0 and "no digest" in refused.stderr
    digest = "sha256:" + "0123456789abcdef" * 4
    assert pin(azure, digest).returncode == 0
    assert pin(azure, "--check").returncode == 0
    [container] = one(render_dir(azure), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/rubric-monitor/rubric-monitor@{digest}"
    with pytest.raises(AssertionError):
        assert pin(azure, "sha256:not-a-digest").returncode == 0


def test_the_container_runs_with_a_group_other_than_zero() -> None:
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    assert "--groups 0" not in dockerfile and ":0 " not in dockerfile
    assert re.search(r"^USER 10001:10001$", dockerfile, re.MULTILINE)
    for overlay in ("base", "dev", "azure"):
        context = one(render(overlay), "Deployment")["spec"]["template"]["spec"]["securityContext"]
        assert context["runAsGroup"] != 0 and context["fsGroup"] != 0
