"""The published JSON Schema agrees with the loader on what a valid line is."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")

import memlens  # noqa: E402
from memlens.config.store import DATA_DIR  # noqa: E402

SCHEMA_PATH = Path(memlens.__file__).parent / "schema" / "trace-v1.schema.json"


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_every_line_of_the_bundled_default_trace_is_schema_valid(validator):
    with gzip.open(DATA_DIR / "default" / "agent-small.jsonl.gz", "rt") as fh:
        for n, line in enumerate(fh, 1):
            errors = list(validator.iter_errors(json.loads(line)))
            assert not errors, f"line {n}: {errors[0].message}"


@pytest.mark.parametrize(
    "event",
    [
        {"event": "write", "id": "a", "tokens": 0, "type": "user_input"},
        {"event": "write", "id": "a", "tokens": 3, "type": "memo"},
        {"event": "write", "id": "", "tokens": 3, "type": "user_input"},
        {"event": "write", "tokens": 3, "type": "user_input"},
        {"event": "request", "id": "q"},
        {"event": "request", "id": "q", "needs": [1]},
        {"event": "pin"},
        {"event": "annotate", "target": "a"},
        {"event": "annotate", "target": "a", "value": 2},
        {"event": "pin", "target": "a", "stream": 4},
        {"event": "unpin", "target": "a", "t": "noon"},
        {"event": "explode"},
    ],
)
def test_schema_rejects_what_the_loader_rejects(validator, event):
    assert list(validator.iter_errors(event))


def test_schema_accepts_unknown_fields_like_the_loader(validator):
    event = {"event": "write", "id": "a", "tokens": 3, "type": "user_input", "colour": "red"}
    assert not list(validator.iter_errors(event))


@pytest.mark.parametrize(
    "event",
    [
        {"event": "pin", "target": "a", "stream": "s1", "t": 2.5},
        {"event": "unpin", "target": "a", "stream": "s1", "t": 3},
        {"event": "annotate", "target": "a", "value": 0.4, "stream": "s1", "t": 4},
        {"event": "annotate", "target": "a", "note": "keep", "t": 4},
        {"event": "pin", "target": "a"},
    ],
)
def test_schema_accepts_t_and_stream_on_pin_unpin_annotate(validator, event):
    assert not list(validator.iter_errors(event))
