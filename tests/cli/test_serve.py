"""``memlens serve`` (memlens.cli.serve): commands run through a warm server give what they give
without it (files, output, exit codes), a server with other settings or none at all leaves
the command to run in its own process, and ``--stop`` stops the server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

PYTHON = sys.executable


def _memlens(*args: str, cwd, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "memlens", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)  # fmt: skip


AS_A_BACKGROUND_JOB = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "sys.argv = ['memlens', *sys.argv[1:]]; runpy.run_module('memlens', run_name='__main__')"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server on a socket in a temporary folder, stopped when the module's tests end."""
    folder = tmp_path_factory.mktemp("serve")
    sock = folder / "memlens.sock"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    # started as `memlens serve &` starts it: a background job ignores SIGINT, and the served
    # commands must still stop on the Ctrl-C their clients forward (test_ctrl_c_...)
    proc = subprocess.Popen([PYTHON, "-c", AS_A_BACKGROUND_JOB, "serve", "--socket", str(sock)],
                            cwd=folder, env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip
    first = proc.stdout.readline()  # blocks until it listens (or has died: "")
    assert first.startswith("memlens serve: warm, listening on"), first
    yield sock, proc
    if proc.poll() is None:  # --stop, not Ctrl-C: under a background job (CI started with
        # `&`) every child inherits an ignored SIGINT, and the server would never see it
        _memlens("serve", "--stop", "--socket", str(sock), cwd=folder, env=env)
        proc.wait()


def _env(sock, **more) -> dict:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "MEMLENS_SERVER": str(sock), **more}


def _metrics(folder) -> dict:
    doc = json.loads((folder / "metrics.json").read_text())
    doc.pop("timing")  # wall times differ run to run
    return doc


def test_a_served_simulate_writes_what_a_local_one_writes(server, tmp_path):
    """Twice, after the local run: the server holds the trace from its cache entry, and each
    served command starts from what the server made for it (the parsed trace, its stream
    index, its references' prices, the resample counts over its streams)."""
    sock, proc = server
    args = ["simulate", "policy=rule", "budget=512", "mlflow.enabled=false"]
    here = _memlens(*args, f"hydra.run.dir={tmp_path / 'here'}", cwd=tmp_path,
                    env={**os.environ, "PYTHONWARNINGS": "ignore"})  # fmt: skip
    assert here.returncode == 0, here.stderr
    assert "low" in _metrics(tmp_path / "here")["intervals"]["hit_rate"]  # resampled streams
    for k in (1, 2):
        served = _memlens(*args, f"hydra.run.dir={tmp_path / f'served{k}'}", cwd=tmp_path,
                          env=_env(sock))  # fmt: skip
        assert served.returncode == 0, served.stderr
        assert "note:" not in served.stderr  # it was served, not run here
        assert proc.stdout.readline().startswith("memlens serve: simulate in process ")
        assert _metrics(tmp_path / f"served{k}") == _metrics(tmp_path / "here")
        for name in ("per_request.parquet", "moves.parquet", "events.parquet"):
            a, b = (pq.read_table(tmp_path / d / name) for d in (f"served{k}", "here"))
            assert a.equals(b), name
        assert _table(served.stdout) == _table(here.stdout) and "hit_rate" in served.stdout


def test_a_served_compare_writes_what_a_local_one_writes(server, tmp_path):
    """The server composed every registered policy's config at its start (as a compare
    composes its policies, once per process): a served compare's rows are the local ones."""
    sock, proc = server
    args = ["compare", "policies=[lru,rule]", "budgets=[256,512]", "oracle.enabled=false",
            "mlflow.enabled=false", "resume=false"]  # fmt: skip
    here = _memlens(*args, f"hydra.run.dir={tmp_path / 'here'}", cwd=tmp_path,
                    env={**os.environ, "PYTHONWARNINGS": "ignore"})  # fmt: skip
    served = _memlens(*args, f"hydra.run.dir={tmp_path / 'served'}", cwd=tmp_path,
                      env=_env(sock))  # fmt: skip
    assert here.returncode == 0 and served.returncode == 0, here.stderr + served.stderr
    assert "note:" not in served.stderr
    assert proc.stdout.readline().startswith("memlens serve: compare in process ")
    rows = [[{k: v for k, v in row.items() if k not in SPEEDS} for row in
             json.loads((tmp_path / d / "compare.json").read_text())] for d in ("here", "served")]  # fmt: skip
    assert rows[0] == rows[1] and [r["policy"] for r in rows[0]] == ["lru", "lru", "rule", "rule"]


#: compare.json's per-row timings, which differ run to run.
SPEEDS = ("wall_s", "events_per_s", "compile_s")


def _table(stdout: str) -> list[list[str]]:
    """The printed table's cells, but its last column (events per second, a speed)."""
    return [line.split()[:-1] for line in stdout.split("\n\n")[0].splitlines()]


def test_a_bad_setting_exits_2_through_the_server(server, tmp_path):
    sock, proc = server
    out = _memlens("simulate", "budget=-5", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path,
                   env=_env(sock))  # fmt: skip
    assert proc.stdout.readline().startswith("memlens serve: simulate in process ")
    assert out.returncode == 2
    assert out.stderr.startswith("error:") and "budget" in out.stderr
    assert not (tmp_path / "run").exists()


def test_other_settings_or_no_server_run_the_command_here(server, tmp_path):
    sock, _ = server
    other = _env(sock, MEMLENS_CACHE_MAX_BYTES="3G")  # part of the key: the server refuses
    out = _memlens("simulate", "policy=lru", "mlflow.enabled=false",
                   f"hydra.run.dir={tmp_path / 'a'}", cwd=tmp_path, env=other)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "runs other code or settings" in out.stderr and "running here" in out.stderr
    assert (tmp_path / "a" / "metrics.json").is_file()
    none = _env(tmp_path / "nobody.sock")
    out = _memlens("simulate", "policy=lru", "mlflow.enabled=false",
                   f"hydra.run.dir={tmp_path / 'b'}", cwd=tmp_path, env=none)  # fmt: skip
    assert out.returncode == 0 and "no server answers" in out.stderr
    assert (tmp_path / "b" / "metrics.json").is_file()


def test_the_key_follows_the_code_and_the_settings(tmp_path, monkeypatch):
    from memlens.cli import serve

    key = serve.server_key()
    assert serve.server_key() == key
    monkeypatch.setenv("NUMBA_DISABLE_JIT", "1")
    assert serve.server_key() != key
    monkeypatch.delenv("NUMBA_DISABLE_JIT")
    monkeypatch.setenv("MEMLENS_SERVER", str(tmp_path / "x"))  # where the server is: not a setting
    assert serve.server_key() == key
    source = serve.__file__
    stat = os.stat(source)
    try:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # "edited"
        assert serve.server_key() != key
    finally:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_stop_ends_the_server_and_removes_its_socket(tmp_path):
    sock = tmp_path / "s.sock"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([PYTHON, "-m", "memlens", "serve", "--socket", str(sock)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().startswith("memlens serve: warm")
    assert _memlens("serve", "--stop", "--socket", str(sock), cwd=tmp_path, env=env).returncode == 0
    assert proc.wait() == 0 and not sock.exists()
    assert _memlens("serve", "--stop", "--socket", str(sock), cwd=tmp_path, env=env).returncode == 1


def test_a_trace_rewritten_between_commands_is_read_again(server, tmp_path):
    """The server holds the parsed traces its commands name (each child starts with them,
    from the second command on a trace): a trace file written anew between commands gives
    the next command its new events, not the held ones."""
    sock, proc = server
    trace = tmp_path / "t.jsonl"
    plain = {**os.environ, "PYTHONWARNINGS": "ignore"}

    def simulate(folder: str, env: dict) -> dict:
        out = _memlens("simulate", f"trace={trace}", "policy=lru", "budget=256",
                       "mlflow.enabled=false", f"hydra.run.dir={tmp_path / folder}",
                       cwd=tmp_path, env=env)  # fmt: skip
        assert out.returncode == 0 and "note:" not in out.stderr, out.stderr
        return _metrics(tmp_path / folder)

    for seed in (1, 2):
        made = _memlens("data", "generate", "archetype=simple", f"seed={seed}", "streams=2",
                        "events_per_stream=200", f"out={trace}", "overwrite=true",
                        cwd=tmp_path, env=plain)  # fmt: skip
        assert made.returncode == 0, made.stderr
        here = simulate(f"here-{seed}", plain)
        for k in (1, 2):  # the second is served the trace the server held after the first
            assert simulate(f"served-{seed}-{k}", _env(sock)) == here
            assert proc.stdout.readline().startswith("memlens serve: simulate in process ")
    sha = [_metrics(tmp_path / f"here-{seed}")["trace"]["sha256"] for seed in (1, 2)]
    assert sha[0] != sha[1]


def test_the_socket_is_this_users_alone(server):
    sock, _ = server
    assert sock.stat().st_mode & 0o777 == 0o600


def test_ctrl_c_reaches_the_served_command(server, tmp_path):
    """SIGINT to the client goes on to the command's process, which stops as a command does
    when interrupted (exit 130, nothing of the run kept), whenever it arrives."""
    sock, proc = server
    client = subprocess.Popen([PYTHON, "-m", "memlens", "compare", "mlflow.enabled=false",
                               "resume=false", f"hydra.run.dir={tmp_path / 'run'}"],
                              cwd=tmp_path, env=_env(sock), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().startswith("memlens serve: compare in process ")
    client.send_signal(signal.SIGINT)
    _, err = client.communicate()
    assert client.returncode == 130, err
    assert not (tmp_path / "run" / "compare.json").exists()
    # the interrupted command's process never ran on into the server's own code (which would
    # have removed the socket): the server is still there and serves the next command
    assert sock.exists()
    after = _memlens("simulate", "policy=lru", "mlflow.enabled=false",
                     f"hydra.run.dir={tmp_path / 'after'}", cwd=tmp_path, env=_env(sock))  # fmt: skip
    assert after.returncode == 0 and "note:" not in after.stderr, after.stderr
    assert proc.stdout.readline().startswith("memlens serve: simulate in process ")


def test_the_server_composes_every_registered_policy_as_compare_would():
    """What the warm-up leaves in the per-process cache is each policy's own composition (a
    composition that failed would be missing, and compare would compose it again)."""
    from memlens.cli import replay, serve
    from memlens.config.compose import policy_config
    from memlens.config.store import registered_policies

    replay._POLICY_CONFIGS.clear()
    serve._policies_composed()
    assert set(replay._POLICY_CONFIGS) == {(n, ()) for n in registered_policies()}
    for name in ("lru", "learned"):
        assert replay.composed_policy(name, []) == policy_config(name)
