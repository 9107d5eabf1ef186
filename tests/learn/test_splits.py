"""A user's own split for memlens train (memlens.learn.splits): the argument rewrite, a split
file read back with its errors naming file, entry and field, the automatic split by stream
(seeded, disjoint, covering, never empty on either side), and the test split scored against
lru, rule and the bundled model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.learn.splits import read_split_file, split_argument, split_by_stream
from memlens.learn.train import TraceSel
from memlens.trace.io import write_trace
from memlens.ui.sample import multi_stream_events

STREAMS = [f"agent{k}" for k in range(12)]


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("split") / "t.jsonl"
    write_trace(path, multi_stream_events(STREAMS, with_r2=True))
    return path


def test_split_arguments_naming_files_are_rewritten(trace_path, tmp_path):
    split = tmp_path / "mine.yaml"
    split.write_text("train: []\n")
    assert split_argument([f"split={split}", "budgets=[2]"]) == [
        "split=file", f"split.file={split.resolve()}", "budgets=[2]"]  # fmt: skip
    assert split_argument([f"split={trace_path}"]) == [
        "split=auto", f"split.auto_trace={trace_path.resolve()}"]  # fmt: skip
    missing = tmp_path / "nope.yaml"
    assert split_argument([f"split={missing}"]) == ["split=file", f"split.file={missing}"]


@given(st.lists(st.text(min_size=1).filter(lambda a: not a.startswith("split="))))
def test_other_arguments_pass_unchanged(argv):
    assert split_argument(argv) == argv


def test_a_split_file_is_read_with_traces_beside_it(trace_path, tmp_path):
    (tmp_path / "t.jsonl").write_bytes(trace_path.read_bytes())
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\ntrain:\n  - trace: t.jsonl\n    streams: [agent0, agent1]\n"
                    "test:\n  - trace: t.jsonl\n    streams: [agent2]\n")  # fmt: skip
    name, _desc, train, test = read_split_file(str(path), TraceSel)
    assert name == "mine" and train[0].trace == str((tmp_path / "t.jsonl").resolve())
    assert (train[0].streams, test[0].streams) == (["agent0", "agent1"], ["agent2"])


@pytest.mark.parametrize("text, words", [
    ("train: 3\n", "train must be a list"),
    ("trian: []\n", "unknown key 'trian'"),
    ("train:\n  - trace: nowhere.jsonl\n", "train[0]: field 'trace': no such file"),
    ("train:\n  - trace: t.jsonl\n    stream: [a]\n", "train[0]: unknown field 'stream'"),
    ("train:\n  - trace: t.jsonl\n    streams: a\n", "train[0]: field 'streams' must be a list"),
    ("test:\n  - trace: t.jsonl\n", "train lists no trace"),
    ("train: [", "cannot be read"),
])  # fmt: skip
def test_a_bad_split_file_names_file_entry_and_field(trace_path, tmp_path, text, words):
    (tmp_path / "t.jsonl").write_bytes(trace_path.read_bytes())
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        read_split_file(str(path), TraceSel)
    assert str(path) in str(info.value) and words in str(info.value)


def test_the_split_by_stream_is_seeded_disjoint_and_covering(trace_path):
    train, test = split_by_stream(str(trace_path), 0.25, 0, TraceSel)
    held, kept = test[0].streams, train[0].streams
    assert len(held) == 3 and not set(held) & set(kept) and set(held) | set(kept) == set(STREAMS)
    assert (
        split_by_stream(str(trace_path), 0.25, 0, TraceSel)[1][0].streams == held
    )  # same seed, same split
    assert (
        len(split_by_stream(str(trace_path), 0.01, 0, TraceSel)[1][0].streams) == 1
    )  # never empty
    assert (
        len(split_by_stream(str(trace_path), 0.99, 0, TraceSel)[0][0].streams) == 1
    )  # train never empty


def test_one_stream_cannot_be_split(tmp_path):
    path = tmp_path / "one.jsonl"
    write_trace(path, multi_stream_events(["solo"]))
    with pytest.raises(ValueError, match="one stream only"):
        split_by_stream(str(path), 0.25, 0, TraceSel)


@pytest.mark.slow  # a memlens train process: fit, tune and four test replays (~25 s)
def test_train_scores_its_test_split_against_lru_rule_and_the_bundled_model(trace_path, tmp_path):
    """On 12 copies of the tradeoff sample with hindsight labels, the held-out streams'
    hit rate under LRU is 2/3 (r1 misses a in every stream): the line says so, per policy."""
    out = tmp_path / "m.txt"
    proc = subprocess.run([sys.executable, "-m", "memlens", "train", f"split={trace_path}",
                           "label.kind=hindsight", "budgets=[2]", "mlflow.enabled=false",
                           f"out={out}", "tune.decay_per_request=[0.1]", "tune.size_exponent=[1.0]",
                           "model.min_child_samples=2"], capture_output=True, text=True,
                          cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("test split, budget 2"))
    assert "(3 streams)" in line and "lru 0.667 [n<5]" in line
    assert "new - lru" in proc.stdout and "new - default" in proc.stdout
    assert out.is_file()


@pytest.mark.slow  # a memlens train process (~15 s)
def test_pins_alone_say_how_to_combine_them_with_simulated_labels(trace_path, tmp_path):
    import json

    from memlens.learn.feedback import Feedback, FeedbackStore
    from memlens.trace.cache import load_trace_cached

    sha = load_trace_cached(str(trace_path)).sha256
    store = FeedbackStore(tmp_path / "f.db")
    store.add([Feedback("person", sha, s, 0, 0.0, f"{s}/a", "keep") for s in STREAMS])
    proc = subprocess.run([sys.executable, "-m", "memlens", "train", f"split={trace_path}",
                           "label.kind=feedback", f"feedback.store={tmp_path / 'f.db'}",
                           "budgets=[2]", "mlflow.enabled=false", f"out={tmp_path / 'm.txt'}"],
                          capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2
    assert "feedback.with_simulated=true" in proc.stderr, json.dumps(proc.stderr)
