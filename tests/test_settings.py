"""Settings: one YAML file, environment overrides, secrets from files; every error names the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.errors import ConfigError
from monitor.settings import load_settings, read_secret


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_embedded_quick_start() -> None:
    settings = load_settings(None, {})
    assert settings.judge.kind == "local"
    assert settings.source.kind == "otlp_file"
    assert settings.store.url.startswith("sqlite:///")
    assert (settings.metrics.host, settings.metrics.port) == ("127.0.0.1", 9464)


def test_environment_overrides_the_file_field_by_field(tmp_path: Path) -> None:
    config = write(tmp_path, "judge:\n  kind: openai\n  model: from-file\n  concurrency: 3\n")
    settings = load_settings(config, {"RUBRIC_MONITOR_JUDGE__MODEL": "from-env"})
    assert settings.judge.model == "from-env"
    assert settings.judge.concurrency == 3  # the rest of the section still comes from the file


def test_config_path_from_environment(tmp_path: Path) -> None:
    config = write(tmp_path, "interval_seconds: 5\n")
    assert load_settings(None, {"RUBRIC_MONITOR_CONFIG": str(config)}).interval_seconds == 5


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("judge:\n  kind: openai\n  modle: x\n", "judge.modle", "Extra inputs are not permitted"),
        ("bogus: 1\n", "bogus", "Extra inputs are not permitted"),
        ("interval_seconds: -1\n", "interval_seconds", "greater than 0"),
        ("source:\n  kind: kafka\n", "source", "does not match any of the expected tags"),
        ("sampling:\n  default_rate: 1.5\n", "sampling.default_rate", "less than or equal to 1"),
        ("judge:\n  kind: azure_openai\n", None, "azure_endpoint"),
    ],
)
def test_bad_settings_name_file_and_field(tmp_path: Path, text: str, field: str | None, message: str) -> None:
    config = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(config, {})
    assert caught.value.where == str(config)
    if field is not None:
        assert caught.value.field == field
    assert message in str(caught.value)


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml", {})
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(write(tmp_path, "judge: [unclosed\n"), {})
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_settings(write(tmp_path, "- a\n- b\n"), {})


def test_secret_read_from_a_mounted_file(tmp_path: Path) -> None:
    secret = write(tmp_path, "sk-from-file\n", "api-key")
    settings = load_settings(write(tmp_path, f"judge:\n  kind: openai\n  api_key_file: {secret}\n"), {})
    assert read_secret(settings.judge.api_key, settings.judge.api_key_file, "judge.api_key_file") == "sk-from-file"
    with pytest.raises(ConfigError, match="judge.api_key_file"):
        read_secret(None, tmp_path / "absent", "judge.api_key_file")


def test_secrets_dir_supplies_a_setting(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "RUBRIC_MONITOR_LOG_LEVEL").write_text("DEBUG")
    settings = load_settings(None, {"RUBRIC_MONITOR_SECRETS_DIR": str(secrets)})
    assert settings.log_level == "DEBUG"
