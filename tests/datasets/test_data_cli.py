"""``memlens data generate | convert | stats``: one grammar (Hydra overrides), typed settings.

Validation runs in-process through ``memlens.cli.data.main`` (Hydra composes there too); a few
end-to-end cases run the installed command from a temporary directory.
"""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from memlens.datasets.archetypes import GENERATORS, generate
from memlens.datasets.datacommands import DATASETS, ConvertSettings, StatsSettings

from memlens.cli.data import main as data_main
from memlens.cli.data import resolve
from memlens.config.compose import compose_config
from memlens.config.store import DATA_DIR
from memlens.trace.generate import generate_simple
from memlens.trace.io import load_trace

MEMLENS = shutil.which("memlens") or str(Path(sys.executable).parent / "memlens")
LOCOMO = DATA_DIR / "locomo" / "locomo10.json"
TAUBENCH = DATA_DIR / "taubench" / "gpt-4o-airline.json"
BUNDLED = DATA_DIR / "default" / "agent-small.jsonl.gz"


def memlens(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([MEMLENS, *args], cwd=cwd, capture_output=True, text=True, env=env)


def shown(value) -> str:
    """A default as ``--help`` and ``--cfg job`` show it."""
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else getattr(value, "name", str(value))


# ------------------------------------------------------------------------ end to end
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_generate_is_deterministic_and_writes_only_its_output(tmp_path):
    args = ["data", "generate", "archetype=coding", "seed=11", "streams=3", "events_per_stream=60"]
    for name in ("a", "b"):
        proc = memlens(*args, f"out={name}.jsonl.gz", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"wrote 180 events to {name}.jsonl.gz"
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl.gz", "b.jsonl.gz"]  # no Hydra


def test_bundled_default_trace_is_what_its_header_says_generated_it(tmp_path):
    """The shipped default trace is reproducible from the generator and the recorded params."""
    params = dict(load_trace(BUNDLED).header["params"])
    assert list(params) == ["archetype", "seed", "streams", "events_per_stream"]
    args = [f"{k}={v}" for k, v in params.items()]
    proc = memlens("data", "generate", *args, "out=again.jsonl.gz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "again.jsonl.gz").read_bytes() == BUNDLED.read_bytes()


def test_bad_input_end_to_end(tmp_path):
    proc = memlens("data", "generate", "archetype=nope", "out=x.jsonl", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        proc.stderr.startswith("error: ") and "archetype" in proc.stderr and "nope" in proc.stderr
    )
    assert len(proc.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_generate_help_lists_every_knob_of_every_generator(tmp_path):
    proc = memlens("data", "generate", "--help", cwd=tmp_path)
    assert proc.returncode == 0 and list(tmp_path.iterdir()) == []
    text = proc.stdout
    for name, knobs in GENERATORS.items():
        section = text.split(f"archetype={name}", 1)[1].split("\narchetype=", 1)[0]
        for f in fields(knobs):
            line = next(
                x
                for x in section.splitlines()
                if x.split() and x.split()[0] == f"{f.name}={shown(f.default)}"
            )
            assert line.endswith(f.metadata["help"]), line
    assert "out=???" in text and max(len(line) for line in text.splitlines()) <= 100


# ------------------------------------------------------------ in-process: validation
def _src(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return name


BAD = [
    (["generate", "archetype=nope", "out=o.jsonl"], ("archetype", "nope")),
    (["generate", "archetype=coding"], "error: out is required"),
    (["generate", "archetype=coding", "out=o.jsonl", "colour=blue"], "'colour'"),
    (["generate", "archetype=coding", "out=o.jsonl", "+colour=blue"], "unknown setting 'colour'"),
    (["generate", "archetype=simple", "out=o.jsonl", "files=3"], "'files' not in 'GenerateSimple'"),
    (["generate", "archetype=coding", "out=o.jsonl", "files=many"], "override files=many"),
    (["generate", "archetype=support", "out=o.jsonl", "streams=1.5"], "override streams=1.5"),
    (["generate", "out=o.jsonl", "request_share=1.5"], "request_share must be in [0, 1), got 1.5"),
    (
        ["generate", "archetype=analysis", "out=o.jsonl", "pin_rate=-1"],
        "pin_rate must be in [0, 1]",
    ),
    (["generate", "-m", "seed=1,2", "out=o.jsonl"], "-m/--multirun is not supported"),
    (["convert", "src=s.json", "out=o.jsonl"], "error: dataset is required"),
    (["convert", "dataset=csv", "src=s.json", "out=o.jsonl"], ("dataset", "csv")),
    (["convert", "dataset=locomo", "out=o.jsonl"], "error: src is required"),
    (
        ["convert", "dataset=locomo", "src=missing.json", "out=o.jsonl"],
        "src=missing.json: no such file",
    ),
    (["convert", "dataset=locomo", "src=broken.json", "out=o.jsonl"], "malformed JSON"),
    (
        ["convert", "dataset=taubench", "src=list.json", "out=o.jsonl"],
        "list.json: <root>: expected a list",
    ),
    (
        ["convert", "dataset=taubench", "src=s.json", "out=o.jsonl", "source=middle"],
        "source=middle",
    ),
    (["convert", "dataset=taubench", "src=s.json", "out=o.jsonl", "placement=end"], "'placement'"),
    (["convert", "dataset=locomo", "src=s.json", "out=o.jsonl", "speaker_a_type=robot"], "robot"),
    (["convert", "locomo", "s.json", "o.jsonl"], "'locomo'"),
    (["stats"], "error: trace is required"),
    (["stats", "trace=missing.jsonl"], "trace=missing.jsonl: no such file"),
    (["stats", "trace=s.json", "json=maybe"], "json=maybe"),
    (["frobnicate"], "unknown data command 'frobnicate'"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[" ".join(a) for a, _ in BAD])
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_bad_input_exits_2_with_one_error_line_and_writes_nothing(
    tmp_path, monkeypatch, capsys, argv, message
):
    monkeypatch.chdir(tmp_path)
    _src(tmp_path, "s.json", "[]")
    _src(tmp_path, "broken.json", '[{"sample_id": ')
    _src(tmp_path, "list.json", "{}")
    before = sorted(tmp_path.iterdir())
    assert data_main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    for part in (message,) if isinstance(message, str) else message:
        assert part in err
    assert "Traceback" not in err
    assert sorted(tmp_path.iterdir()) == before and out == ""


# ---------------------------------------------------------- in-process: typed configs
@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_every_generator_takes_the_common_knobs(tmp_path, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    argv = [f"archetype={name}", "seed=2", "streams=3", "events_per_stream=40", "out=t.jsonl"]
    assert data_main(["generate", *argv]) == 0
    trace = load_trace(tmp_path / "t.jsonl")
    assert trace.header["generator"] == name
    assert trace.header["params"] == {
        "archetype": name, "seed": 2, "streams": 3, "events_per_stream": 40,
    }  # fmt: skip
    if name == "simple":  # exactly 3 streams; a pin roll may yield nothing, so <= 120 events
        assert trace.n_streams == 3 and trace.n_events <= 120
    else:  # 120 writes and requests (no pins by default), in episodes of ~40 events
        assert trace.n_events == 120 and trace.n_streams >= 3
    assert trace.n_events == len(list(generate(name, seed=2, streams=3, events_per_stream=40)))


def test_header_records_common_knobs_and_every_knob_off_its_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["archetype=coding", "out=t.jsonl", "files=30", "reuse_skew=2", "token_scale=1"]
    assert data_main(["generate", *argv]) == 0
    params = load_trace(tmp_path / "t.jsonl").header["params"]
    assert params == {"archetype": "coding", "seed": 0, "streams": 25, "events_per_stream": 400,
                      "reuse_skew": 2.0}  # fmt: skip


def test_cfg_job_shows_every_knob(capsys):
    assert data_main(["generate", "archetype=analysis", "key_share=0.5", "--cfg", "job"]) == 0
    text = capsys.readouterr().out
    assert "archetype: analysis" in text and "out: ???" in text and "key_share: 0.5" in text
    for f in fields(GENERATORS["analysis"]):
        assert f"\n{f.name}: " in text


@pytest.mark.parametrize(
    "config, overrides, schema",
    [
        ("data_generate", ["out=t.jsonl"], GENERATORS["simple"]),
        ("data_generate", ["archetype=support", "constraints=2", "out=t.jsonl"], GENERATORS["support"]),
        ("data_convert", ["dataset=locomo", "src=a", "out=b"], DATASETS["locomo"]),
        ("data_convert", ["dataset=taubench", "src=a", "out=b"], DATASETS["taubench"]),
        ("data_stats", ["trace=t.jsonl", "json=true"], StatsSettings),
    ],
)  # fmt: skip
def test_configs_compose_into_typed_settings(config, overrides, schema):
    settings = resolve(compose_config(config, overrides))
    assert {f.name for f in fields(schema)} <= {f.name for f in fields(settings)}
    assert all(o.split("=")[0] in {f.name for f in fields(settings)} for o in overrides[1:])


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_converter_settings_defaults_are_the_converters_own(name):
    cls = DATASETS[name]
    params = inspect.signature(cls.converter).parameters
    shared = {f.name for f in fields(ConvertSettings)} - {"tokenizer"}
    for f in fields(cls):
        if f.name not in shared:
            assert shown(f.default) == shown(params[f.name].default), f.name


def test_simple_is_one_of_the_generators():
    a = list(generate("simple", seed=4, streams=2, events_per_stream=30, pin_rate=0.1))
    assert a == list(generate_simple(seed=4, streams=2, events_per_stream=30, pin_rate=0.1))
    with pytest.raises(ValueError, match="unknown knob"):
        generate("simple", files=3)


# ------------------------------------------------------------------ overwrite refusal
@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "streams=1", "events_per_stream=20"],
        ["convert", "dataset=taubench", f"src={TAUBENCH}"],
    ],
    ids=["generate", "convert"],
)
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_an_existing_out_is_refused_unless_overwrite_is_true(tmp_path, capsys, argv):
    out = tmp_path / "t.jsonl"
    out.write_text("precious\n")
    stamp = out.stat().st_mtime_ns
    assert data_main([*argv, f"out={out}"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: out={out} exists; overwrite=true replaces it\n"
    assert out.read_text() == "precious\n" and out.stat().st_mtime_ns == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]
    assert data_main([*argv, f"out={out}", "overwrite=true"]) == 0
    assert load_trace(out).n_events > 0


def test_the_bundled_default_trace_cannot_be_overwritten_by_accident(capsys):
    before = BUNDLED.read_bytes()
    assert (
        data_main(["generate", "seed=1", "streams=1", "events_per_stream=5", f"out={BUNDLED}"]) == 2
    )
    assert "overwrite=true" in capsys.readouterr().err and BUNDLED.read_bytes() == before


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "out=missing_dir/t.jsonl"], "out=missing_dir/t.jsonl: folder missing_dir"),
        (["generate", "out=."], "out=.: is a directory"),
        (["generate", "out="], "out must name a file"),
        (["generate", "out=t.jsonl", "overwrite=yes"], "overwrite must be true or false"),
        (["generate", "out=t.jsonl", f"streams={2**64}"], "streams must fit in a signed 64-bit"),
        (["generate", "out=t.jsonl", "archetype=coding", "token_scale=inf"], "token_scale must be a finite"),
        (["stats", "trace=."], "trace=.: is a directory"),
        (["stats", "trace=/dev/zero"], "trace=/dev/zero: not a regular file"),
        (["stats", f"trace={BUNDLED}", "json=1"], "json must be true or false, got 1"),
        (["convert", "dataset=locomo", "src=.", "out=o.jsonl"], "src=.: is a directory"),
        (["convert", "dataset=locomo", f"src={LOCOMO}", "out=o.jsonl", "captions=off"], "captions must be true or false"),
    ],
)  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_files_and_values_are_checked_before_anything_is_read_or_written(
    tmp_path, monkeypatch, capsys, argv, message
):
    monkeypatch.chdir(tmp_path)
    assert data_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"error: {message}") and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
