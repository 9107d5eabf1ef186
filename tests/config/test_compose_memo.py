"""Composed policy configs kept between processes (memlens.config.memo): every registered
policy reads back as the very typed config Hydra composes, an edited config file or other
overrides compose again, and an entry that is damaged, or a composition that reads more than
the digest covers, is never served."""

from __future__ import annotations

import json
import shutil

import pytest

import memlens.config.compose as compose
import memlens.config.store as store
from memlens.config import memo
from memlens.config.compose import policy_config
from memlens.config.store import SettingsError, registered_policies


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / memo.KIND


def _no_composing(monkeypatch) -> None:
    """Composing raises from here on: what is returned was read from an entry."""

    def refuse(*args, **kwargs):
        raise AssertionError("composed, not read")

    monkeypatch.setattr(compose, "compose_config", refuse)
    monkeypatch.setattr(compose, "run_settings", refuse)


def test_every_policy_reads_back_as_the_config_hydra_composes(cache, monkeypatch):
    names = registered_policies()
    want = {n: policy_config(n) for n in names}
    first = {n: memo.kept_policy_config(n, []) for n in names}
    assert len(list(cache.glob("*.json"))) == len(names)
    _no_composing(monkeypatch)
    for n in names:
        again = memo.kept_policy_config(n, [])
        assert type(again) is type(want[n]) and again == want[n] == first[n]


def test_overrides_are_part_of_the_key(cache, monkeypatch):
    plain = memo.kept_policy_config("learned", [])
    tuned = memo.kept_policy_config("learned", ["policy.decay_per_request=0.25"])
    assert plain.decay_per_request is None and tuned.decay_per_request == 0.25
    _no_composing(monkeypatch)
    assert memo.kept_policy_config("learned", ["policy.decay_per_request=0.25"]) == tuned
    assert memo.kept_policy_config("learned", []) == plain


def test_an_edited_config_file_composes_again(cache, tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(store.CONF_DIR, conf)
    monkeypatch.setattr(store, "CONF_DIR", conf)
    monkeypatch.setattr(compose, "CONF_DIR", conf)
    assert memo.kept_policy_config("rule", []).use_boost == 0.1
    rule = conf / "policy" / "rule.yaml"
    rule.write_text(rule.read_text().replace("use_boost: 0.1 ", "use_boost: 0.2 "))
    assert memo.kept_policy_config("rule", []).use_boost == 0.2
    assert len(list(cache.glob("*.json"))) == 2


def test_interpolations_and_hydra_settings_keep_nothing(cache, monkeypatch):
    monkeypatch.setenv("MEMLENS_TEST_DECAY", "0.5")
    got = memo.kept_policy_config(
        "learned", ["policy.decay_per_request=${oc.env:MEMLENS_TEST_DECAY}"]
    )
    assert got.decay_per_request == 0.5
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_a_damaged_entry_is_composed_again_and_replaced(cache):
    want = memo.kept_policy_config("window", [])
    (entry,) = cache.glob("*.json")
    for text in ("{not json", json.dumps({"format": 1, "policy": "lru", "config": {}}),
                 json.dumps({"format": 1, "policy": "window", "config": {"no_such": 1}})):  # fmt: skip
        entry.write_text(text)
        assert memo.kept_policy_config("window", []) == want
        assert json.loads(entry.read_text())["policy"] == "window"


def test_an_unknown_policy_is_the_same_error(cache):
    with pytest.raises(SettingsError, match="unknown policy 'nope'"):
        memo.kept_policy_config("nope", [])
    assert not cache.exists() or not list(cache.glob("*.json"))
