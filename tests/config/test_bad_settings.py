"""Every bad setting is refused before any work starts: exit 2, one ``error:`` line naming it.

Issue 15 ("nothing trusted blindly"): booleans read strictly, every number finite and in range,
every enum-like string checked, the tracking URI's scheme known to MLflow, a compiled engine
only for policies that have a kernel, every file a setting names a readable regular file.
Most cases run in-process through ``memlens.config.app.validate`` (what the command line runs before
Hydra launches anything); a few run the installed command end to end and check that no run
folder, MLflow store or cache entry was created.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens._util.values import check_numbers, number
from memlens.cli.main import policy_overrides_to_list
from memlens.cli.replay import check_compare, check_recommend, check_simulate
from memlens.config.app import validate
from memlens.config.compose import compose_config, make_policy
from memlens.config.compose import run_settings as settings_of
from memlens.config.schema import MlflowConfig, check_tracking_uri, resolve
from memlens.config.store import DATA_DIR, registered_policies
from memlens.policy import kernel_of

CHECKS = {"simulate": check_simulate, "compare": check_compare, "recommend": check_recommend}
MEMLENS = shutil.which("memlens") or str(Path(sys.executable).parent / "memlens")
BUNDLED = DATA_DIR / "default" / "agent-small.jsonl.gz"


def refused(capsys, command: str, argv: list[str]) -> str:
    """The one ``error:`` line ``memlens <command> <argv>`` stops with (exit code 2)."""
    if command != "simulate":
        argv = policy_overrides_to_list(argv)
    with pytest.raises(SystemExit) as exc:
        validate(command, argv, CHECKS[command])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------ the issue's list
ISSUE = [
    ("demand_fetch=no", "demand_fetch must be true or false, got 'no'"),
    ("demand_fetch=off", "demand_fetch must be true or false, got 'off'"),
    ("budget=1e20", "budget=1e20"),
    (
        "engine=fast policy=learned policy.retrain_every=5",
        "policy learned: its compiled kernel does not cover these settings",
    ),
    ("compression.default=zip", "compression.default must be one of none, summary"),
    ("embeddings.kind=foo", "embeddings.kind must be one of tfidf"),
    ("mlflow.tracking_uri=bogus://x", "no tracking store for scheme 'bogus'"),
    ("price_per_mtok=nan", "price_per_mtok must be a finite non-negative number, got nan"),
    ("price_per_mtok=inf", "price_per_mtok must be a finite non-negative number, got inf"),
    ("tiers.short_term_tokens=-5", "tiers.short_term_tokens must be >= 0, got -5"),
    ("tiers.ttl_s=-1", "tiers.ttl_s must be > 0 seconds (finite) or null, got -1.0"),
]

SIBLINGS = [
    ("seed=-1", "seed must be >= 0"),
    (f"seed={2**64}", "seed must fit in a signed 64-bit integer"),
    (f"budget={2**62}", "budget must be below 2**62"),
    (f"tiers.short_term_tokens={2**64}", "tiers.short_term_tokens must fit in a signed 64-bit"),
    (f"tiers.short_term_tokens={2**62}", "tiers.short_term_tokens must be < 2**62"),
    ("tiers.ttl_s=inf", "tiers.ttl_s must be > 0 seconds (finite) or null, got inf"),
    ("tiers.long_term_latency_ms=inf", "tiers.long_term_latency_ms must be a finite number"),
    ("tiers.short_term_policy=lfu", "tiers.short_term_policy must be lru or fifo"),
    ("retrieval.min_similarity=nan", "retrieval.min_similarity must be a finite number"),
    ("retrieval.min_similarity=2", "retrieval.min_similarity must be <= 1"),
    ("retrieval.query.goal_weight=-1", "retrieval.query.goal_weight must be >= 0"),
    ("retrieval.rerank.similarity=nan", "retrieval.rerank.similarity must be a finite number"),
    ("retrieval.rerank.freshness_half_life_s=0", "freshness_half_life_s must be > 0"),
    ("retrieval.filter.max_age_s=-inf", "retrieval.filter.max_age_s must be a finite number"),
    ("retrieval.hnsw.M=100000", "retrieval.hnsw.M must be <= 10000"),
    ("retrieval.hnsw.exact_below=-1", "retrieval.hnsw.exact_below must be >= 0"),
    (f"retrieval.budget={2**62}", "retrieval.budget must be < 2**62"),
    ("embeddings.dim=0", "embeddings.dim must be >= 1"),
    ("embeddings.kind=sentence", "embeddings.kind=sentence needs embeddings.model"),
    ("compression.low_value_threshold=nan", "compression.low_value_threshold must be a finite"),
    ("compression.by_type={llm_thought:zip}", "compression.by_type.llm_thought must be one of"),
    (f"oracle.milp_node_limit={2**31}", "oracle.milp_node_limit must be <= 2147483647"),
    (f"oracle.lp_max_references={2**64}", "oracle.lp_max_references must fit in a signed 64"),
    ("stats.seed=-1", "stats.seed must be >= 0"),
    ("stats.bootstrap=10000000000", "stats.bootstrap must be <= 1000000"),
    ("stats.ci=nan", "stats.ci must be between 0 and 1"),
    ("costs.miss_penalty_usd.user_input=inf", "costs.miss_penalty_usd.user_input must be"),
    ("mlflow.tracking_uri=", "mlflow.tracking_uri is empty"),
    ("mlflow.tracking_uri=s3://bucket/x", "no tracking store for scheme 's3'"),
    ("mlflow.experiment=", "mlflow.experiment must be a non-empty"),
    ("trace=", "trace must name a trace file"),
    ("policy=rule policy.admit_threshold=nan", "policy.admit_threshold must be a finite number"),
    ("policy=rule policy.type_base.user_input=inf", "policy.type_base.user_input must be a fin"),
    ("policy=memoryos_heat policy.alpha=-inf", "policy.alpha must be a finite number"),
    ("policy=memorybank policy.stochastic=1", "policy.stochastic must be true or false, got 1"),
    ("progress=off", "progress must be true, false or null, got 'off'"),
    ("engine=fast retrieval.enabled=true retrieval.promote=true", "cannot run retrieval.promote"),
    ("+policy.extra=1", "unknown setting policy.extra"),
]


@pytest.mark.parametrize("argv, message", ISSUE + SIBLINGS, ids=[a for a, _ in ISSUE + SIBLINGS])
def test_simulate_refuses_before_any_work(capsys, argv, message):
    assert message in refused(capsys, "simulate", argv.split())


@pytest.mark.parametrize(
    "argv, message",
    [
        ("budgets=[512,512]", "budgets lists 512 twice"),
        ("policies=[lru,lru]", "policies lists lru twice"),
        (f"budgets=[512,{2**62}]", "budgets must be below 2**62"),
        (
            "engine=fast policies=[memorybank] policy.stochastic=true",
            "policy memorybank: its compiled kernel does not cover",
        ),
        (
            "policies=[learned] policy.retrain_every=5 engine=fast",
            "policy learned: its compiled kernel does not cover",
        ),
        ("policies=[lru] policy.extra=1", "not in 'LRUConfig'"),
        ("policies=[rule] policy.admit_fetched=no", "policy.admit_fetched must be true or false"),
        ("reference=window policies=[lru,rule]", "reference=window is not a compared policy"),
        ("traces=[/dev/zero] policies=[lru]", "trace=/dev/zero: not a regular file"),
        ("stats.method=jackknife", "stats.method must be percentile or bca"),
        ("table=wide", "table must be verdict or full, got 'wide'"),
    ],
)
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_compare_refuses_before_any_work(capsys, argv, message):
    assert message in refused(capsys, "compare", argv.split())


@pytest.mark.parametrize(
    "argv, message",
    [
        ("", "target"),
        ("target=nan", "target must be a number in [0, 1]"),
        ("target=1.5", "target must be a number in [0, 1]"),
        ("target=0.5 exclude=[nonesuch]", "exclude: unknown policy 'nonesuch'"),
        ("target=0.5 metric=nonesuch", "unknown metric 'nonesuch'"),
        ("target=0.5 cost=hit_rate", "cost=hit_rate must be lower-is-better"),
        ("target=0.5 policies=[oracle]", "no policy left to recommend"),
        (
            "target=0.5 engine=fast policies=[learned] policy.retrain_every=5",
            "learned: its compiled kernel does not",
        ),
    ],
)
def test_recommend_refuses_before_any_work(capsys, argv, message):
    assert message in refused(capsys, "recommend", argv.split())


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_engine_fast_is_accepted_exactly_for_policies_with_a_kernel(capsys):
    """Checked against the policy instances themselves (the check looks classes up)."""
    with_kernel = [n for n in registered_policies() if kernel_of(make_policy(n)) is not None]
    assert "lru" in with_kernel and "rule" in with_kernel and "learned" in with_kernel
    for name in registered_policies():
        if name in with_kernel:
            validate("simulate", [f"policy={name}", "engine=fast"], check_simulate)
        else:
            line = refused(capsys, "simulate", [f"policy={name}", "engine=fast"])
            listed = line.split("policies with one: ")[1].split(")")[0].split(", ")
            assert f"policy {name} has no compiled kernel" in line
            assert listed == with_kernel


# --------------------------------------------------------------------------- booleans
BOOL_SETTINGS = ["demand_fetch", "trace_cache", "retrieval.enabled", "oracle.cache",
                 "output.moves", "compression.summary_counts_as_hit"]  # fmt: skip
SPELLINGS = ["no", "off", "yes", "on", "y", "n", "1", "0", "2", "-1", "maybe", "", "nan", "1.0",
             "null", "'no'", "True", "FALSE", "tRuE", "false", "'true'"]  # fmt: skip


def means(key: str, spelling: str) -> bool:
    """The resolved value of boolean setting ``key`` spelled ``spelling`` (raises if refused)."""
    node = settings_of([f"{key}={spelling}"])
    for part in key.split("."):
        node = getattr(node, part)
    return node


def accepted_as_spelled(key: str, spelling: str) -> None:
    """Accepted exactly when spelled true or false (any case, quoted or not), then meaning it."""
    word = spelling.strip("'").lower()
    try:
        value = means(key, spelling)
    except Exception as exc:  # noqa: BLE001 - any refusal counts; what matters is which
        assert word not in ("true", "false"), exc
        return
    assert word in ("true", "false"), spelling
    assert value is (word == "true")


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_each_boolean_spelling_is_refused_or_means_what_it_says(spelling):
    accepted_as_spelled("demand_fetch", spelling)


@pytest.mark.parametrize("key", BOOL_SETTINGS)
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_every_boolean_setting_reads_strictly(key):
    for spelling in ("no", "1", "TRUE", "false"):
        accepted_as_spelled(key, spelling)


@settings(max_examples=20)
@given(
    key=st.sampled_from(BOOL_SETTINGS),
    spelling=st.text("abcdefghijklmnopqrstuvwxyzTRUEFALS0123456789", min_size=1, max_size=6),
)
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_boolean_is_true_or_false_and_never_anything_else(key, spelling):
    accepted_as_spelled(key, spelling)


@pytest.mark.parametrize("spelling", ["no", "off", "1", "yes", "maybe", ""])
def test_the_issue_boolean_spellings_are_refused_naming_the_setting(capsys, spelling):
    line = refused(capsys, "simulate", [f"demand_fetch={spelling}"])
    assert "demand_fetch" in line


def test_booleans_in_a_yaml_file_are_checked_too(tmp_path):
    """A YAML file's booleans are what the YAML loader read (``no`` is YAML 1.1's false); a
    number or a quoted string in a boolean setting is refused, naming the file."""
    group = tmp_path / "experiment"
    group.mkdir()
    (group / "numbers.yaml").write_text("# @package _global_\ndemand_fetch: 1\n")
    (group / "quoted.yaml").write_text(
        '# @package _global_\ntiers:\n  ttl_s: 5\ntrace_cache: "no"\n'
    )
    (group / "yaml11.yaml").write_text("# @package _global_\ndemand_fetch: no\ntrace_cache: yes\n")
    search = f"hydra.searchpath=[file://{tmp_path}]"
    with pytest.raises(ValueError, match=r"demand_fetch must be true or false, got 1 \(in exp"):
        compose_config("simulate", [search, "experiment=numbers"])
    with pytest.raises(ValueError, match=r"trace_cache must be true or false, got 'no'"):
        compose_config("simulate", [search, "experiment=quoted"])
    s = resolve(compose_config("simulate", [search, "experiment=yaml11"]))
    assert s.demand_fetch is False and s.trace_cache is True


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_every_shipped_config_file_passes_the_strict_reading():
    for name in registered_policies():
        assert settings_of([f"policy={name}"]).policy is not None
    for name in ("bundled", "taubench_wide"):
        resolve(compose_config("compare", [f"experiment={name}"]))


# ---------------------------------------------------------------------------- numbers
def price_accepted_iff_finite_and_non_negative(x: float) -> None:
    try:
        s = settings_of([f"price_per_mtok={x!r}"])
    except Exception:  # noqa: BLE001
        assert not (math.isfinite(x) and x >= 0)
        return
    assert math.isfinite(x) and x >= 0 and s.price_per_mtok == x


def seed_accepted_iff_in_int64(n: int) -> None:
    try:
        s = settings_of([f"seed={n}"])
    except Exception:  # noqa: BLE001
        assert not 0 <= n < 2**63
        return
    assert 0 <= n < 2**63 and s.seed == n


@pytest.mark.parametrize("x", [math.nan, math.inf, -math.inf, -0.0, 0.0, -1.0, 1e308, 5e-324])
def test_float_edge_values(x):
    price_accepted_iff_finite_and_non_negative(x)


@pytest.mark.parametrize("n", [-1, 0, 2**63 - 1, 2**63, 2**64, -(2**63), 10**30])
def test_int_edge_values(n):
    seed_accepted_iff_in_int64(n)


@settings(max_examples=20)
@given(st.floats(allow_nan=True, allow_infinity=True))
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_float_setting_is_accepted_exactly_when_finite_and_in_range(x):
    price_accepted_iff_finite_and_non_negative(x)


@settings(max_examples=20)
@given(st.one_of(st.integers(), st.integers(-(2**70), 2**70)))
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_an_int_setting_is_accepted_exactly_when_in_range(n):
    seed_accepted_iff_in_int64(n)


@settings(max_examples=20)
@given(st.text("0123456789.e+-xnaif", min_size=1, max_size=8))
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_numeric_string_never_sneaks_through(text):
    """Whatever Hydra makes of the string, an accepted budget is a positive int below 2**62."""
    try:
        s = settings_of([f"budget={text}"])
    except Exception:  # noqa: BLE001
        return
    assert isinstance(s.budget, int) and 0 < s.budget < 2**62
    assert s.budget == int(text.replace("_", ""))


@dataclasses.dataclass
class _Inner:
    weights: dict = dataclasses.field(default_factory=lambda: {"a": 1.0, "b": math.nan})


@dataclasses.dataclass
class _Outer:
    ok: float = 1.0
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    sizes: list = dataclasses.field(default_factory=lambda: [1, 2**64])


def test_check_numbers_names_the_first_bad_leaf():
    with pytest.raises(ValueError, match=r"^inner\.weights\.b must be a finite number, got nan"):
        check_numbers(_Outer())
    with pytest.raises(ValueError, match=r"^sizes\[1\] must fit in a signed 64-bit integer"):
        check_numbers(_Outer(inner=_Inner({"a": 0.5})))
    check_numbers(_Outer(inner=_Inner({}), sizes=[True, -(2**63), 2**63 - 1]))


@pytest.mark.parametrize(
    "value, bounds, message",
    [
        (True, {}, "x must be a number, got True"),
        ("3", {}, "x must be a number, got '3'"),
        (1.5, {"integer": True}, "x must be an integer, got 1.5"),
        (math.inf, {}, "x must be a finite number, got inf"),
        (-1, {"low": 0}, "x must be >= 0, got -1"),
        (0, {"above": 0}, "x must be > 0, got 0"),
        (2, {"high": 1}, "x must be <= 1, got 2"),
        (2**62, {"below": 2**62, "integer": True}, "x must be < 2**62"),
    ],
)
def test_number_reports_the_bound_it_breaks(value, bounds, message):
    with pytest.raises(ValueError, match=f"^{message.replace('*', '[*]')}"):
        number("x", value, **bounds)


# ------------------------------------------------------------------------ tracking URI
@pytest.mark.parametrize(
    "uri",
    ["sqlite:///mlflow.db", "file:///tmp/mlruns", "/tmp/mlruns", "mlruns", "C:\\mlruns",
     "http://127.0.0.1:5000", "https://example.org", "postgresql://u@h/db",
     "postgresql+psycopg2://u@h/db", "mysql://h/db", "mssql://h/db", "databricks",
     "databricks-uc", "uc:http://localhost:8080"],
)  # fmt: skip
def test_tracking_uris_mlflow_supports_are_accepted_without_connecting(uri):
    check_tracking_uri(uri)
    assert MlflowConfig(tracking_uri=uri).tracking_uri == uri


@pytest.mark.parametrize(
    "uri, message",
    [
        ("bogus://x", "no tracking store for scheme 'bogus'"),
        ("s3://bucket/path", "no tracking store for scheme 's3'"),
        ("http://", "a tracking server URI needs a host"),
        ("", "is empty"),
        ("   ", "is empty"),
    ],
)
def test_tracking_uris_mlflow_cannot_use_are_refused(uri, message):
    with pytest.raises(ValueError, match=message):
        check_tracking_uri(uri)


# ------------------------------------------------------------------------------ files
@pytest.fixture
def odd_files(tmp_path) -> dict[str, str]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return {"directory": str(tmp_path), "fifo": str(fifo), "device": "/dev/zero",
            "missing": str(tmp_path / "missing.jsonl")}  # fmt: skip


@pytest.mark.parametrize("kind, message", [
    ("directory", "is a directory, not a file"),
    ("fifo", "not a regular file"),
    ("device", "not a regular file"),
    ("missing", "no such file"),
])  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_trace_that_is_not_a_regular_file_is_refused_without_reading_it(
    capsys, odd_files, kind, message
):
    path = odd_files[kind]
    assert f"trace={path}: {message}" in refused(capsys, "simulate", [f"trace={path}"])
    line = refused(capsys, "compare", [f"traces=[{BUNDLED},{path}]", "policies=[lru]"])
    assert f"trace={path}: {message}" in line
    corpus = refused(capsys, "simulate", [f"embeddings.corpus={path}"])
    assert f"embeddings.corpus={path}: {message}" in corpus


def test_a_cache_dir_that_is_a_file_is_refused(capsys, tmp_path):
    (tmp_path / "f").write_text("x")
    line = refused(capsys, "simulate", [f"oracle.cache_dir={tmp_path / 'f'}"])
    assert "oracle.cache_dir=" in line and "is not a directory" in line


def test_a_sweep_checks_every_setting_before_parsing_any_trace(capsys, tmp_path):
    """The trace parse is deferred: a bad budget in the second job is reported, not the
    malformed trace the first job would have parsed."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"event": "write"}\n')
    line = refused(capsys, "simulate", ["-m", f"trace={bad}", "budget=64,-5"])
    assert "budget must be a positive integer" in line
    line = refused(capsys, "simulate", ["-m", f"trace={bad}", "budget=64,128"])
    assert str(bad) in line


# ------------------------------------------------------------------------ end to end
def run_memlens(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MEMLENS_CACHE": str(tmp_path / "cache")}
    return subprocess.run([MEMLENS, *args], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip


@pytest.mark.parametrize(
    "argv, setting",
    [
        (["simulate", "demand_fetch=no"], "demand_fetch"),
        (["simulate", "engine=fast", "policy=learned", "policy.retrain_every=5"], "engine=fast"),
        (["simulate", "tiers.ttl_s=-1"], "tiers.ttl_s"),
        (["compare", "price_per_mtok=nan", "policies=[lru]"], "price_per_mtok"),
        (["recommend", "target=0.5", "embeddings.kind=foo"], "embeddings.kind"),
    ],
)
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_the_command_exits_2_and_creates_nothing(tmp_path, argv, setting):
    """No run folder, no MLflow store, no cache entry: only the one error line."""
    proc = run_memlens([*argv, f"mlflow.tracking_uri=sqlite:///{tmp_path / 'ml.db'}",
                        f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and proc.stderr.startswith("error: ")
    assert len(proc.stderr.strip().splitlines()) == 1 and setting in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_fifo_trace_does_not_hang_the_command(tmp_path):
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    proc = run_memlens(["simulate", f"trace={fifo}", "mlflow.enabled=false",
                        f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)  # fmt: skip
    assert proc.returncode == 2 and "not a regular file" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]
