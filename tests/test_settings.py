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
        ("judge:\n  kind: openai\n  modle: x\n", "judge.modle", "`modle` is not allowed; did you mean `model`?"),
        ("bogus: 1\n", "bogus", "`bogus` is not allowed"),
        ("interval_seconds: -1\n", "interval_seconds", "greater than 0"),
        ("source:\n  kind: kafka\n", "source.kind",
         "must be one of otlp_file, app_insights, otlp_receiver, not 'kafka'"),
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


# ---- issue 8 item 8: bad values are one clear line ----------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "field", "expected"),
    [
        ({"RUBRIC_MONITOR_METRICS__WINDOWS": "1h"}, None, ("1h",)),
        ({"RUBRIC_MONITOR_METRICS__WINDOWS": "1h, 24h"}, None, ("1h", "24h")),
        ({"RUBRIC_MONITOR_METRICS__WINDOWS": '["1h", "7d"]'}, None, ("1h", "7d")),
        ({"RUBRIC_MONITOR_SOURCE__KIND": "app_insights", "RUBRIC_MONITOR_SOURCE__AGENTS": "a,b"}, "agents",
         ("a", "b")),
    ],
)
def test_lists_of_strings_take_the_comma_form(environ: dict[str, str], field: str | None,
                                              expected: tuple[str, ...]) -> None:
    settings = load_settings(None, environ)
    value = getattr(settings.source, field) if field else settings.metrics.windows
    assert value == expected


def test_a_structured_setting_that_is_not_json_names_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"RUBRIC_MONITOR_JUDGE__PRICES": "gpt-4.1=2"})
    assert caught.value.where == "environment variable RUBRIC_MONITOR_JUDGE__PRICES"
    assert caught.value.field == "judge.prices" and "expects JSON" in str(caught.value)


def test_a_bad_value_from_the_environment_names_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"RUBRIC_MONITOR_JUDGE__CONCURRENCY": "many"})
    assert caught.value.where == "environment variable RUBRIC_MONITOR_JUDGE__CONCURRENCY"
    assert caught.value.field == "judge.concurrency"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("interval_seconds: .inf\n", "interval_seconds"),
        ("interval_seconds: .nan\n", "interval_seconds"),
        ("interval_seconds: 1e300\n", "interval_seconds"),
        ("judge:\n  timeout_seconds: 1e300\n", "judge.timeout_seconds"),
        ("judge:\n  temperature: .nan\n", "judge.temperature"),
        ("conversation:\n  retention_days: 1e300\n", "conversation.retention_days"),
        ("conversation:\n  idle_timeout_seconds: .inf\n", "conversation.idle_timeout_seconds"),
        ("sampling:\n  max_per_cycle: 1000000000000\n", "sampling.max_per_cycle"),
        ("rubrics:\n  directory: ''\n", "rubrics.directory"),
    ],
)
def test_non_finite_absurd_and_empty_values_are_refused(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text), {})
    assert caught.value.field == field


def test_nan_from_the_environment_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"RUBRIC_MONITOR_JUDGE__TEMPERATURE": "nan"})
    assert caught.value.field == "judge.temperature"
    with pytest.raises(ConfigError, match="rubrics.directory"):
        load_settings(None, {"RUBRIC_MONITOR_RUBRICS__DIRECTORY": " "})


def test_a_settings_file_that_is_not_utf8_or_too_deep(tmp_path: Path) -> None:
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"log_level: INFO\njudge:\n  model: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"line 3: not UTF-8"):
        load_settings(latin, {})
    with pytest.raises(ConfigError, match="nested deeper than"):
        load_settings(write(tmp_path, "judge: " + "[" * 10_000 + "]" * 10_000 + "\n"), {})
    with pytest.raises(ConfigError, match="given twice"):
        load_settings(write(tmp_path, "judge:\n  model: a\n  model: b\n"), {})


def test_a_yaml_error_never_prints_the_line(tmp_path: Path) -> None:
    secret = "sk-live-0123456789abcdef"
    config = write(tmp_path, f'judge:\n  kind: openai\n  api_key: {secret}"x: y\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(config, {})
    assert "line 3" in str(caught.value) and secret not in str(caught.value)


def test_a_secrets_dir_that_is_a_file_or_missing(tmp_path: Path) -> None:
    not_a_dir = write(tmp_path, "x", "secrets")
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        load_settings(None, {"RUBRIC_MONITOR_SECRETS_DIR": str(not_a_dir)})
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(None, {"RUBRIC_MONITOR_SECRETS_DIR": str(tmp_path / "absent")})


# ---- issue 9 item 4: secrets and names -------------------------------------------------------------------------


def test_secrets_dir_with_nested_names_as_kubernetes_mounts_them(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "RUBRIC_MONITOR_JUDGE__API_KEY").write_text("sk-from-mount\n")
    (secrets / "RUBRIC_MONITOR_STORE__URL").write_text("postgresql+psycopg://u:pw-from-mount@db/rm\n")
    (secrets / "..data").mkdir()  # Kubernetes' own entries are skipped
    settings = load_settings(write(tmp_path, "judge:\n  kind: openai\n"),
                             {"RUBRIC_MONITOR_SECRETS_DIR": str(secrets)})
    assert settings.judge.api_key is not None and settings.judge.api_key.get_secret_value() == "sk-from-mount"
    assert settings.store.url == "postgresql+psycopg://u:pw-from-mount@db/rm"
    assert settings.judge.kind == "openai"  # the file's other settings stay


def test_a_secret_file_matching_no_setting_is_an_error(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "RUBRIC_MONITOR_JUDGE__API_KYE").write_text("sk")
    (secrets / "openai-key").write_text("sk")
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"RUBRIC_MONITOR_SECRETS_DIR": str(secrets)})
    lines = [str(e) for e in caught.value.all]
    assert any("'judge.api_kye' matches no setting; did you mean `api_key`?" in line for line in lines), lines
    assert any("'openai-key' matches no setting" in line for line in lines), lines


def test_source_path_alone_selects_the_default_kind() -> None:
    settings = load_settings(None, {"RUBRIC_MONITOR_SOURCE__PATH": "examples/traces"})
    assert settings.source.kind == "otlp_file" and str(settings.source.path) == "examples/traces"


def test_a_misspelled_nested_variable_is_refused_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"RUBRIC_MONITOR_JUDGE__MODELL": "gpt-4.1"})
    assert caught.value.where == "environment variable RUBRIC_MONITOR_JUDGE__MODELL"
    assert "did you mean `model`?" in str(caught.value)
    # Variables of ours that are not settings (a token named by source.credential.token_env) are left alone.
    assert load_settings(None, {"RUBRIC_MONITOR_APP_INSIGHTS_TOKEN": "t"}).judge.kind == "local"


def test_error_paths_use_the_users_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, "source:\n  kind: otlp_file\n  pathh: x\n"), {})
    assert caught.value.field == "source.pathh"
    assert "`pathh` is not allowed; did you mean `path`?" in str(caught.value)


def test_every_problem_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, "interval_seconds: -1\njudge:\n  concurrency: 0\n"), {})
    assert [e.field for e in caught.value.all] == ["interval_seconds", "judge.concurrency"]


# ---- issue 8 item 10: secrets ------------------------------------------------------------------------------------


def test_a_key_with_an_inner_newline_is_refused(tmp_path: Path) -> None:
    key = write(tmp_path, "sk-first-half\nsk-second-half\n", "api-key")
    with pytest.raises(ConfigError, match="more than one line") as caught:
        read_secret(None, key, "judge.api_key_file")
    assert "sk-first-half" not in str(caught.value)
    with pytest.raises(ConfigError, match="judge.api_key: holds more than one line"):
        load_settings(None, {"RUBRIC_MONITOR_JUDGE__API_KEY": "sk-a\nsk-b"})
