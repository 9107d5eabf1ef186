"""``policy@NAME.<param>=v``: a compare override for one of its policies only."""

from __future__ import annotations

import pytest

from memlens.cli.main import policy_overrides_to_list
from memlens.cli.replay import check_compare, composed_policy, overrides_for, scoped_target
from memlens.config.app import validate


def test_scoped_overrides_reach_only_the_named_policy():
    given = ["policy.seed_like=1", "policy@memgpt.variant=code", "+policy@lru.x=2"]
    assert scoped_target(given[1]) == "memgpt" and scoped_target(given[0]) is None
    assert overrides_for("memgpt", given) == ["policy.seed_like=1", "policy.variant=code"]
    assert overrides_for("lru", given) == ["policy.seed_like=1", "+policy.x=2"]
    assert overrides_for("rule", given) == ["policy.seed_like=1"]


def test_the_command_line_collects_scoped_overrides():
    argv = policy_overrides_to_list(["policies=[lru,memgpt]", "policy@memgpt.variant=code"])
    assert argv == ["policies=[lru,memgpt]", "policy_overrides=['policy@memgpt.variant=code']"]


def test_a_compare_composes_each_policy_with_its_own_overrides():
    overrides = ["policy@memgpt.variant=code"]
    assert composed_policy("memgpt", overrides).variant == "code"
    assert not hasattr(composed_policy("lru", overrides), "variant")  # lru has none: no error


def test_a_scoped_override_of_a_policy_not_compared_is_refused(capsys):
    argv = policy_overrides_to_list(["policies=[lru,memgpt]", "policy@memoryos_heat.variant=code"])
    with pytest.raises(SystemExit) as exc:
        validate("compare", argv, check_compare)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "policy 'memoryos_heat' is not among the compared policies (lru, memgpt)" in err
