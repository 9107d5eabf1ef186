"""Objects are built only from the registries (issue 33, case 1).

A config read from a file may name a policy only by a class ``conf/policy/*.yaml`` registers,
and nothing else by ``_target_``: the ``subprocess.Popen`` block is planted in every kind of
file a config is read from (an experiment, a policy file on a search path, a tuned config, a
split, ``policy_overrides``, Hydra's callbacks and logging, the registry itself, a resume
entry, a model sidecar, an MLflow run read by ``memlens report``) and each time no process
starts.  (The page's what-if: ``tests/ui/test_ui_hostile.py``.)  What the command line itself
names stays the user's choice.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memlens.config import registry
from memlens.config.compose import compose_config
from memlens.config.store import SettingsError, policy_targets

MEMLENS = shutil.which("memlens") or str(Path(sys.executable).parent / "memlens")


def popen(marker: Path, indent: str = "  ", full: bool = True) -> str:
    """The issue's block: a process that leaves ``marker`` behind if it ever starts (``full``:
    with its arguments, which a typed policy schema refuses too; else the ``_target_`` alone,
    which only the registry check refuses)."""
    lines = ["_target_: subprocess.Popen"]
    if full:
        lines += [f"args: touch {marker}", "shell: true"]
    return "".join(f"{indent}{line}\n" for line in lines)


def plant(tmp_path: Path, group: str, name: str, text: str) -> str:
    """A config file on a search path; the override that puts the path in."""
    folder = tmp_path / "sp" / group
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    return f"hydra.searchpath=[file://{tmp_path / 'sp'}]"


#: where the block is planted: (command, config group, file text, words of the refusal of the
#: ``_target_`` alone); {block:N} is the block indented by N spaces
CASES = {
    "experiment file": ("simulate", "experiment", "# @package _global_\npolicy:\n{block:2}",
                        "not a registered policy"),
    "policy file": ("simulate", "policy", "{block:0}", "not a registered policy"),
    "tuned config": ("simulate", "policy",
                     "defaults:\n  - rule_schema\n  - _self_\n{block:0}admit_threshold: 0.3\n",
                     "not a registered policy"),
    "policy_overrides": ("compare", "experiment",
                         "# @package _global_\npolicy_overrides:\n"
                         "  - policy._target_=subprocess.Popen\n",
                         "only the command line may name"),
    "split file": ("train", "split", "name: evil\ntrain:\n  - trace: x.jsonl\n{block:4}",
                   "_target_"),
    "hydra callback": ("simulate", "experiment",
                       "# @package _global_\nhydra:\n  callbacks:\n    evil:\n{block:6}",
                       "not one of Hydra's callbacks"),
    "logging handler": ("simulate", "experiment",
                        "# @package _global_\nhydra:\n  job_logging:\n    handlers:\n"
                        "      evil:\n        class: subprocess.Popen\n"
                        "        args: touch {marker}\n        shell: true\n",
                        "not a logging class"),
}  # fmt: skip


def planted(tmp_path: Path, case: str, full: bool) -> tuple[str, list[str], Path]:
    import memlens.learn.train  # noqa: F401 - registers the train and split schemas

    command, group, text, _ = CASES[case]
    marker = tmp_path / "PWNED"
    body = text.replace("{marker}", str(marker))
    for n in (0, 2, 4, 6):
        body = body.replace(f"{{block:{n}}}", popen(marker, " " * n, full))
    return command, [plant(tmp_path, group, "evil", body), f"{group}=evil"], marker


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_planted_popen_block_is_refused_and_never_runs(tmp_path, case):
    command, overrides, marker = planted(tmp_path, case, full=True)
    with pytest.raises(Exception):  # noqa: B017 - the schema's error or the registry's
        compose_config(command, overrides)
    assert not marker.exists()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_registry_refuses_the_target_alone(tmp_path, case):
    """Without arguments for a typed schema to object to, it is the registry check that
    refuses the class, with one line naming where it came from."""
    command, overrides, _ = planted(tmp_path, case, full=False)
    with pytest.raises(Exception, match=CASES[case][3]) as err:  # noqa: B017
        compose_config(command, overrides)
    if isinstance(err.value, SettingsError):
        assert "\n" not in str(err.value) and "evil" in str(err.value)


def test_the_command_line_names_a_class_itself(tmp_path):
    """``policy._target_=...`` typed by the person running the command is theirs to choose
    (tests run their own slow or crashing policies this way); nothing is built by composing."""
    cfg = compose_config("simulate", ["policy._target_=collections.OrderedDict"])
    assert cfg.policy._target_ == "collections.OrderedDict"
    compare = compose_config("compare", ["policy_overrides=['policy._target_=x.Y']"])
    assert list(compare.policy_overrides) == ["policy._target_=x.Y"]


def test_every_registered_policy_lives_in_memlens_policies():
    targets = registry.registered_policy_targets()
    assert targets == frozenset(policy_targets().values())
    assert all(t.startswith("memlens.policies.") for t in targets)


def test_a_registry_entry_outside_memlens_policies_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "policy_targets", lambda: {"evil": "subprocess.Popen"})
    registry.registered_policy_targets.cache_clear()
    try:
        with pytest.raises(SettingsError, match="conf/policy/evil.yaml: _target_ subprocess"):
            registry.registered_policy_targets()
    finally:
        registry.registered_policy_targets.cache_clear()


def test_check_config_refuses_a_target_anywhere_but_the_policy():
    with pytest.raises(SettingsError, match=r"retrieval\.x\._target_: only the policy is built"):
        registry.check_config({"retrieval": {"x": {"_target_": "os.system"}}}, "f.yaml")
    with pytest.raises(SettingsError, match="f.yaml: policy _target_ 'os.system'"):
        registry.check_config({"policy": {"_target_": "os.system"}}, "f.yaml")
    registry.check_config({"policy": {"_target_": "memlens.policies.lru.LRU"}}, "f.yaml")


def test_the_experimental_rerun_pickle_is_refused(tmp_path):
    """Hydra's ``--experimental-rerun`` unpickles a file from a run folder: code."""
    pickle = tmp_path / "config.pickle"
    pickle.write_bytes(b"not read")
    proc = subprocess.run([MEMLENS, "simulate", "--experimental-rerun", str(pickle)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.startswith("error: --experimental-rerun")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_forged_resume_entry_is_numbers_and_builds_nothing(tmp_path, monkeypatch):
    """A resume entry holds a report (numbers and JSON); one whose policy_config names
    Popen is served as numbers, and nothing is built from it."""
    from memlens.cli.replay import compare_jobs
    from memlens.config.schema import resolve
    from memlens.runs import resume
    from memlens.runs import sweep as sweep_mod
    from memlens.runs.pipeline import load_trace

    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "cache"))
    marker = tmp_path / "PWNED"
    settings = resolve(compose_config("compare", ["policies=[lru]", "budgets=[256]",
                                                  "mlflow.enabled=false", "n_jobs=1"]))  # fmt: skip
    trace = load_trace(settings)
    (job,) = sweep_mod.plan(settings, list(compare_jobs(settings)), {settings.trace: trace.sha256})
    first = sweep_mod.execute(settings, [job])
    report = first.outcomes[0].report
    report.policy_config = {"_target_": "subprocess.Popen", "args": f"touch {marker}",
                            "shell": True}  # fmt: skip
    assert resume.save(job.key, report)
    again = sweep_mod.execute(settings, [job])
    assert again.skipped == 1 and again.outcomes[0].report.policy_config["_target_"] == (
        "subprocess.Popen")  # fmt: skip
    assert not marker.exists()


def test_a_model_sidecar_names_no_class(tmp_path):
    """A sidecar is JSON read for numbers and names; a ``_target_`` in it builds nothing."""
    from memlens.scorer.model import DEFAULT_MODEL, load_model, sidecar_path

    marker = tmp_path / "PWNED"
    meta = json.loads(sidecar_path(DEFAULT_MODEL).read_text())
    meta["policy"]["_target_"] = "subprocess.Popen"
    meta["behaviour"] = {"_target_": "subprocess.Popen", "args": f"touch {marker}"}
    shutil.copy(DEFAULT_MODEL, tmp_path / "m.txt")
    (tmp_path / "m.json").write_text(json.dumps(meta))
    assert load_model(str(tmp_path / "m.txt")).sha256 == load_model("default").sha256
    assert not marker.exists()


@pytest.mark.slow  # memlens report over run folders in a fresh process: 4 s
def test_memlens_report_reads_runs_as_text(tmp_path, monkeypatch):
    """``memlens report`` renders what an MLflow store says; a run whose parameters name
    Popen is a row of text."""
    from mlflow.tracking import MlflowClient

    from memlens.present.experiment_report import main as report_main

    marker = tmp_path / "PWNED"
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("memlens", artifact_location=str(tmp_path / "art"))
    run = client.create_run(exp)
    for key, value in (("policy", "lru"), ("policy_cfg._target_", "subprocess.Popen"),
                       ("policy_cfg.args", f"touch {marker}"), ("budget", "512")):  # fmt: skip
        client.log_param(run.info.run_id, key, value)
    client.set_terminated(run.info.run_id)
    monkeypatch.chdir(tmp_path)
    assert report_main(["memlens", "--tracking-uri", uri, "--out", str(tmp_path / "rep")]) == 0
    assert not marker.exists()
