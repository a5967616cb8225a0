"""Property-based tests of every reader of outside input (issue 8): whatever a line, row, rubric file or
settings file holds, no exception escapes but our own error types, and the valid records beside it are still
read. Example counts stay modest: the tests share two cores."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.errors import ConfigError, RubricError
from monitor.evaluators.versions import builtin_version
from monitor.formats.input_files import read_input_file
from monitor.formats.otlp import parse_otlp_line, spans_to_otlp_document
from monitor.rubrics.loader import load_rubric_text
from monitor.rubrics.registry import RubricRegistry
from monitor.settings import load_settings
from monitor.sources.app_insights import ResultTable, RowReader
from monitor.sources.kql import WORKSPACE, Window
from tests.app_insights_helpers import NOW, conversation
from tests.conftest import REPO
from tests.fakes.log_analytics import encode_cell
from tools.chat_to_otlp import chat_record_to_spans
from tools.spans_to_app_insights import TABLE_COLUMNS, spans_to_rows

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CHATS = [json.loads(line) for line in (REPO / "examples" / "conversations.jsonl").read_text().splitlines()]
RUBRIC = (REPO / "examples" / "rubrics" / "restaurant-reservation.yaml").read_text()

# Any JSON value, with the strings that break readers: lone surrogates, NUL, huge and tiny numbers.
texts = st.one_of(st.text(max_size=20), st.sampled_from(["\ud800", "\x00", "", "1h", "nan", "inf", "-1",
                                                          "1e300", "true", "[", "{}"]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
                    st.floats(allow_nan=True, allow_infinity=True), texts)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)), max_leaves=12)


def mutate(value: Any, path: list[Any], replacement: Any) -> Any:
    """``value`` with the node at ``path`` (indices into lists and dicts, taken modulo their size) replaced."""
    if not path or not isinstance(value, list | dict) or not value:
        return replacement
    if isinstance(value, list):
        index = path[0] % len(value)
        return [mutate(v, path[1:], replacement) if i == index else v for i, v in enumerate(value)]
    key = list(value)[path[0] % len(value)]
    return {k: mutate(v, path[1:], replacement) if k == key else v for k, v in value.items()}


paths = st.lists(st.integers(min_value=0, max_value=50), max_size=8)


# ---- OTLP line ----------------------------------------------------------------------------------------------


OTLP_DOCUMENTS = [spans_to_otlp_document(chat_record_to_spans(record, n)) for n, record in enumerate(CHATS)]


@FEW
@given(path=paths, replacement=json_values)
def test_an_otlp_line_never_raises_and_its_good_neighbours_are_read(path: list[int], replacement: Any) -> None:
    broken = mutate(OTLP_DOCUMENTS[1], path, replacement)
    spans, rejected = parse_otlp_line(json.dumps(broken))
    assert isinstance(spans, list) and all(isinstance(v, int) for v in rejected.values())
    good, rejected_good = parse_otlp_line(json.dumps(OTLP_DOCUMENTS[0]))
    assert good and not rejected_good


@FEW
@given(raw=st.binary(max_size=200))
def test_an_otlp_line_of_any_bytes_never_raises(raw: bytes) -> None:
    parse_otlp_line(raw.decode("utf-8", "surrogateescape"))


# ---- chat line (through the file reader, which also reads the neighbours) ---------------------------------


@FEW
@given(path=paths, replacement=json_values, raw=st.binary(max_size=60))
def test_a_chat_file_keeps_its_good_lines_whatever_one_line_holds(tmp_path_factory: Any, path: list[int],
                                                                   replacement: Any, raw: bytes) -> None:
    directory = tmp_path_factory.mktemp("chat")
    broken = json.dumps(mutate(CHATS[1], path, replacement)).encode()
    noise = raw.replace(b"\n", b" ")
    lines = [json.dumps(CHATS[0]).encode(), broken, noise, json.dumps(CHATS[2]).encode()]
    (directory / "chats.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    read = read_input_file(directory / "chats.jsonl")
    ids = [c.id for c in read.conversations]
    assert ids[0] == "conv-booking-ok" and ids[-1] == "conv-cancel"
    assert len(ids) + len(read.rejected) <= 4
    for conversation_read in read.conversations:
        conversation_read.model_dump_json().encode("utf-8")  # storable and hashable


# ---- App Insights row -------------------------------------------------------------------------------------


def _table() -> tuple[list[tuple[str, str]], list[list[Any]], set[str]]:
    spans = conversation(0, NOW - timedelta(minutes=30))
    rows = spans_to_rows(spans, "workspace").tables["AppDependencies"]
    columns = TABLE_COLUMNS["AppDependencies"]
    encoded = [json.loads(json.dumps([encode_cell(row.get(name), kind) for name, kind in columns]))
               for row in rows]
    return columns, encoded, {s.span_id for s in spans if s.kind != "event"}


COLUMNS, GOOD_ROWS, _ = _table()
WINDOW = Window(NOW - timedelta(hours=2), NOW)


def _read_rows(rows: list[Any]) -> set[str]:
    table = ResultTable("PrimaryResult", [n for n, _ in COLUMNS], [t for _, t in COLUMNS], rows)
    return {span.span_id for span in RowReader(WORKSPACE).read(table, WINDOW).spans}


@FEW
@given(cell=st.integers(min_value=0, max_value=len(COLUMNS) - 1), replacement=json_values,
       junk=st.lists(json_values, max_size=3))
def test_an_app_insights_row_never_fails_the_slice(cell: int, replacement: Any, junk: list[Any]) -> None:
    expected = _read_rows(GOOD_ROWS)
    assert expected
    broken = [list(GOOD_ROWS[0])]
    broken[0][cell] = replacement
    # Good rows first: a broken copy of a good row carries its span id, and the first row of an id wins.
    assert _read_rows([*GOOD_ROWS, *broken, *junk]) >= expected


# ---- rubric file ------------------------------------------------------------------------------------------


RUBRIC_DATA = yaml.safe_load(RUBRIC)


@FEW
@given(path=paths, replacement=json_values, text=st.text(max_size=200))
def test_a_rubric_file_is_a_rubric_or_a_rubric_error(tmp_path_factory: Any, path: list[int], replacement: Any,
                                                     text: str) -> None:
    directory = tmp_path_factory.mktemp("rubrics")
    for name, content in (("mutated.json", json.dumps(mutate(RUBRIC_DATA, path, replacement))),
                          ("noise.yaml", text), ("noise.json", text)):
        try:
            load_rubric_text(content, directory / name, builtin_version)
        except RubricError:
            pass
    shutil.copy(REPO / "examples" / "rubrics" / "restaurant-reservation.yaml", directory / "good.yaml")
    registry = RubricRegistry(directory, builtin_version)
    registry.load()
    (directory / "zz-bad.yaml").write_text(text, encoding="utf-8", errors="surrogatepass")
    registry.refresh()  # never raises: a bad file is reported and the good one stays active
    assert "restaurant-reservation" in [r.name for r in registry.active()]


# ---- settings -------------------------------------------------------------------------------------------


SETTING_NAMES = ["RUBRIC_MONITOR_METRICS__WINDOWS", "RUBRIC_MONITOR_SOURCE__AGENTS", "RUBRIC_MONITOR_JUDGE__PRICES",
                 "RUBRIC_MONITOR_JUDGE__TEMPERATURE", "RUBRIC_MONITOR_INTERVAL_SECONDS", "RUBRIC_MONITOR_SOURCE",
                 "RUBRIC_MONITOR_SOURCE__PATH", "RUBRIC_MONITOR_JUDGE__MODELL", "RUBRIC_MONITOR_STORE__URL",
                 "RUBRIC_MONITOR_JUDGE__API_KEY", "RUBRIC_MONITOR_RUBRICS__DIRECTORY"]


@FEW
@given(document=json_values, text=st.text(max_size=200),
       environ=st.dictionaries(st.sampled_from(SETTING_NAMES), texts.filter(lambda t: "\x00" not in t),
                               max_size=3))
def test_settings_are_settings_or_a_config_error(tmp_path_factory: Any, document: Any, text: str,
                                                 environ: dict[str, str]) -> None:
    directory = tmp_path_factory.mktemp("settings")
    for name, content in (("doc.yaml", json.dumps({"judge": document, "metrics": document})),
                          ("text.yaml", text)):
        path = directory / name
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
        for env in ({}, environ):
            try:
                load_settings(path, env)
            except ConfigError:
                pass
