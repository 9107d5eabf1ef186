"""Typed settings: every bad setting stops a command before it starts (exit 2, one line).

These run in-process through Hydra's compose API (``memlens.config.app.validate`` is what the
command line runs before launching); ``tests/cli/test_cli.py`` checks a few end to end.
"""

from __future__ import annotations

import pytest

from memlens.cli.main import policy_overrides_to_list
from memlens.cli.replay import check_compare, check_simulate
from memlens.config.app import validate
from memlens.config.compose import policy_config, run_settings
from memlens.config.schema import CompareConfig, RunConfig, policy_schema
from memlens.config.store import registered_policies


def rejected(capsys, config: str, argv: list[str]) -> str:
    check = check_simulate if config == "simulate" else check_compare
    with pytest.raises(SystemExit) as exc:
        validate(config, argv, check)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize(
    "override, message",
    [
        ("budget=-5", "budget must be a positive integer"),
        ("budget=0", "budget must be a positive integer"),
        ("budget=1.5", "could not be converted to Integer"),
        ("budget=1e20", "could not be converted to Integer"),
        ("engine=turbo", "engine must be auto, fast or reference"),
        ("price_per_mtok=-1", "price_per_mtok must be a finite non-negative number"),
        ("price_per_mtok=nan", "price_per_mtok must be a finite non-negative number"),
        ("price_per_mtok=inf", "price_per_mtok must be a finite non-negative number"),
        ("demand_fetch=maybe", "is not a valid bool"),
        ("policy=LRU", "unknown policy 'LRU' (registered: generative_agents,"),
        ("policy.no_such_parameter=1", "Key 'no_such_parameter' not in 'LRUConfig'"),
        ("+policy.no_such_parameter=1", "unknown setting policy.no_such_parameter (LRUConfig"),
        ("+zzz=1", "unknown setting zzz (RunConfig declares: budget, compression"),
        ("policy=rule policy.admit_threshold=high", "could not be converted to Float"),
        ("policy=memgpt policy.summary_ratio=0.7", "summary_ratio must be in [0, 0.5)"),
        ("retrieval.k=-1", "retrieval.k must be >= 0"),
        ("retrieval.hnsw.M=1", "retrieval.hnsw.M must be >= 2"),
        ("tiers.short_term_tokens=-5", "tiers.short_term_tokens must be >= 0"),
        ("tiers.ttl_s=-1", "tiers.ttl_s must be > 0 seconds (finite) or null"),
        ("compression.default=zip", "compression.default must be one of"),
        ("embeddings.kind=foo", "embeddings.kind must be one of"),
        ("oracle.method=psychic", "oracle.method must be one of"),
        ("oracle.lp_max_refs=5", "Key 'lp_max_refs' not in 'OracleSettings'"),
        ("no_such_key=1", "Key 'no_such_key' not in 'RunConfig'"),
        ("oracle.enabled=false policy=rule", None),
    ],
)
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_simulate_rejects_bad_settings(capsys, override, message):
    if message is None:  # a good setting next to the bad ones: it must pass
        validate("simulate", override.split(), check_simulate)
        return
    line = rejected(capsys, "simulate", override.split())
    assert message in line, line


@pytest.mark.parametrize(
    "argv, message",
    [
        (["budgets=512"], "budgets"),
        (["budgets=[]"], "budgets must list at least one budget"),
        (["budgets=[512,-1]"], "budgets must be a positive integer"),
        (["policies=[]"], "policies must list at least one policy"),
        (["policies=[lru,nonesuch]"], "unknown policy 'nonesuch' (registered:"),
        (["policies=[lru,rule]", "policy.admit_threshold=0.3"], "not in 'LRUConfig'"),
        (["policies=[rule]", "policy.admit_threshold=x"], "could not be converted to Float"),
    ],
)
def test_compare_rejects_bad_settings(capsys, argv, message):
    line = rejected(capsys, "compare", policy_overrides_to_list(argv))
    assert message in line, line


def test_a_sweep_is_checked_job_by_job(capsys):
    """``-m`` expands the sweep: the one bad combination is found before any job runs."""
    line = rejected(capsys, "simulate", ["-m", "policy=lru,memgpt", "policy.summary_ratio=0.7"])
    assert "Key 'summary_ratio' not in 'LRUConfig'" in line
    validate("simulate", ["-m", "policy=lru,window", "budget=64,128"], check_simulate)


def test_good_settings_pass_and_resolve_to_typed_objects():
    validate("simulate", ["policy=rule", "policy.admit_threshold=0.2"], check_simulate)
    s = run_settings(["policy=rule", "policy.admit_threshold=0.2", "demand_fetch=true"])
    assert isinstance(s, RunConfig) and s.demand_fetch is True
    assert s.policy.admit_threshold == 0.2 and s.policy._target_.endswith("RuleScorer")


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_every_registered_policy_has_a_schema_matching_its_constructor():
    """The schema is derived from the signature: same parameter names, same defaults."""
    import dataclasses
    import inspect

    from hydra.utils import get_class

    for name in registered_policies():
        cls = get_class(policy_config(name)._target_)
        schema = {f.name: f for f in dataclasses.fields(policy_schema(cls))}
        params = {
            p.name: p
            for p in inspect.signature(cls.__init__).parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        assert set(schema) - {"_target_"} <= set(params), name
        for key, f in schema.items():
            if key == "_target_":
                continue
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            assert default == params[key].default, (name, key)


def test_compare_argument_rewrite_keeps_values_intact():
    argv = ["budgets=[1]", "policy.a=0.5", "+policy.b='x y'", "seed=1"]
    out = policy_overrides_to_list(argv)
    assert out[:2] == ["budgets=[1]", "seed=1"]
    assert out[2] == "policy_overrides=['policy.a=0.5','+policy.b=\\'x y\\'']"
    from memlens.config.compose import compose_config
    from memlens.config.schema import resolve

    settings = resolve(compose_config("compare", out))
    assert isinstance(settings, CompareConfig)
    assert settings.policy_overrides == ["policy.a=0.5", "+policy.b='x y'"]


def test_compare_refuses_policy_equals_with_a_pointer(capsys):
    with pytest.raises(SystemExit) as exc:
        policy_overrides_to_list(["policy=lru", "budgets=[512]"])
    assert exc.value.code == 2
    assert "use policies=[NAME,...]" in capsys.readouterr().err
