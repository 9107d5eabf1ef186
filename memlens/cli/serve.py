"""``memlens serve``: a warm process that runs ``memlens`` commands for other terminals.

Why: a new ``memlens`` process spends about 1.2 s before its first kernel runs (its imports and
numba's first call; ``benchmarks/process_floor.py``), whatever the command then does.  That is
13 times the replay of a 870,000-event trace (issue 34).  A server pays it once.

How: ``memlens serve --socket PATH`` imports everything, runs one small ``simulate`` to load
numba and the kernels, and listens on a Unix socket.  A ``memlens`` command started with
``MEMLENS_SERVER=PATH`` sends its arguments, working directory and environment, and its three
standard streams (the file descriptors themselves) over the socket.  The server forks a
child for it, which runs the command as the command line would: in its own process (its own
exit code, files and crash), writing to the client's terminal.  The client forwards Ctrl-C
(SIGINT), SIGTERM and SIGHUP to that child and exits with its exit code.

Never stale: the client and the server each compute a key (:func:`server_key`) over the code
(every ``.py`` and ``.yaml`` file of MemLens: path, size, modification time), the Python
executable and the ``MEMLENS_*``, ``NUMBA_*`` and ``PYTHON*`` environment variables.  A server
whose key differs refuses, and so does a socket nobody listens on: the command then runs in
the client's own process, after one ``note:`` line on stderr.  ``memlens serve --stop
--socket PATH`` stops a server.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

#: The environment variable that sends commands to a server (its socket's path).
SERVER_ENV = "MEMLENS_SERVER"
#: Commands a server never runs: itself, the page (a long-running server of its own), and the
#: usage text (printed at once, nothing to gain).
NOT_SERVED = frozenset({"serve", "ui", "-h", "--help", "help"})
#: The client's signals that go on to the command's process.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def server_key() -> str:
    """What a server and its client must share to give the same results: the code, the
    Python and the settings read from the environment when modules are imported."""
    import memlens
    import memlens.conf
    import memlens.datasets
    import memlens.policies

    h = hashlib.sha256(sys.executable.encode())
    for name in sorted(os.environ):
        if name.startswith(("MEMLENS_", "NUMBA_", "PYTHON")) and name != SERVER_ENV:
            h.update(f"\0{name}={os.environ[name]}".encode())
    for package in (memlens, memlens.conf, memlens.datasets, memlens.policies):
        root = Path(list(package.__path__)[0])
        for path in sorted(p for glob in ("*.py", "*.yaml") for p in root.rglob(glob)):
            st = path.stat()
            h.update(f"\0{path}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()


class Channel:
    """Length-prefixed JSON messages over a Unix socket (the first may carry descriptors)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def send(self, message: dict, fds: list[int] = ()) -> None:
        body = json.dumps(message).encode()
        frame = len(body).to_bytes(4, "big") + body
        if fds:
            socket.send_fds(self.sock, [frame], list(fds))
        else:
            self.sock.sendall(frame)

    def receive(self, with_fds: bool = False) -> tuple[dict | None, list[int]]:
        """The next message (None once the other side has closed) and its descriptors."""
        fds: list[int] = []
        while len(self.buffer) < 4 or len(self.buffer) < 4 + self._size():
            if with_fds and not fds:
                data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 3)
            else:
                data = self.sock.recv(1 << 16)
            if not data:
                return None, fds
            self.buffer += data
        end = 4 + self._size()
        message, self.buffer = json.loads(self.buffer[4:end]), self.buffer[end:]
        return message, fds

    def _size(self) -> int:
        return int.from_bytes(self.buffer[:4], "big")


# ------------------------------------------------------------------------------- client
def run_through(path: str, argv: list[str]) -> int | None:
    """Run ``argv`` in the server at ``path``: its exit code, or None when no server there
    runs it (a command in :data:`NOT_SERVED`, none listens, or its key differs): the caller
    runs the command itself."""
    if argv[0] in NOT_SERVED:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        return _not_served(path, f"no server answers ({exc.strerror or exc})")
    with sock, _forwarded() as target:
        channel = Channel(sock)
        request = {"key": server_key(), "argv": argv, "cwd": os.getcwd(),
                   "env": dict(os.environ)}  # fmt: skip
        streams = _standard_streams()
        channel.send(request, streams)
        for fd in (f for f in streams if f > 2):
            os.close(fd)  # /dev/null opened for a closed stream: the server holds its own copy
        first, _ = channel.receive()
        if first is not None and "pid" in first:
            target.pid = first["pid"]  # signals caught before this are sent on now
            last, _ = channel.receive()
    if first is None or "pid" not in first:
        for signum in target.pending:  # Ctrl-C while the server answered: this process's now
            signal.raise_signal(signum)
        return _not_served(path, (first or {}).get("refused", "the server closed"))
    if last is None:
        print("error: the command's process under memlens serve ended without an exit code",
              file=sys.stderr)  # fmt: skip
        return 1
    return int(last["exit"])


def _not_served(path: str, why: str) -> None:
    print(f"note: {SERVER_ENV}={path}: {why}; running here", file=sys.stderr)
    return None


def _standard_streams() -> list[int]:
    """Descriptors 0, 1 and 2 (``/dev/null`` for one that is closed)."""
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    return fds


class _Target:
    """The command's process, once known; the signals caught before that."""

    def __init__(self) -> None:
        self._pid: int | None = None
        self.pending: list[int] = []

    @property
    def pid(self) -> int | None:
        return self._pid

    @pid.setter
    def pid(self, pid: int) -> None:
        self._pid = pid
        for signum in self.pending:
            self.send(signum)

    def send(self, signum: int) -> None:
        if self._pid is None:
            self.pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signum)


@contextlib.contextmanager
def _forwarded():
    """While a command is asked for and runs: the client's Ctrl-C, SIGTERM and SIGHUP go to
    its process (held until the server says which process that is)."""
    target = _Target()
    before = {s: signal.signal(s, lambda signum, _frame: target.send(signum)) for s in FORWARDED}
    try:
        yield target
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


# ------------------------------------------------------------------------------- server
def serve(path: Path, command: Callable[[list[str]], None]) -> None:
    """Warm up, then run each client's command in a child forked from this process
    (``command``: ``memlens.cli.main.main``, given by it: this module is below it)."""
    warm_up(command)
    key = server_key()
    listener = _listen(path)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # finished children are reaped by the kernel
    print(f"memlens serve: warm, listening on {path} (clients: {SERVER_ENV}={path})",
          flush=True)  # fmt: skip
    try:
        while True:
            conn, _ = listener.accept()
            with conn:
                if _handle(Channel(conn), key, listener, command) == "stop":
                    break
    except KeyboardInterrupt:
        pass
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        print("memlens serve: stopped", flush=True)


def _listen(path: Path) -> socket.socket:
    """The listening socket at ``path``; a socket file left by a server that is gone is
    replaced, one a server still answers on is not."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
            raise SystemExit(f"error: a server already listens on {path}")
        except (ConnectionRefusedError, FileNotFoundError):
            path.unlink(missing_ok=True)
        finally:
            probe.close()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)  # the socket is made 0600: only this user's commands run here
    try:
        listener.bind(str(path))
    finally:
        os.umask(umask)
    listener.listen(16)
    return listener


def _handle(channel: Channel, key: str, listener: socket.socket, command) -> str | None:
    """One client's request, run in a forked child.  The server's objects are frozen for the
    fork (``gc.freeze``): a child's cyclic collections then look only at what it made, not at
    the hundreds of thousands of objects the warm-up left (Hydra's, the policies' configs),
    which took 0.17 s of a served ``simulate`` (0.82-0.90 s frozen, 1.00-1.07 s not)."""
    request, fds = channel.receive(with_fds=True)
    try:
        if request is None:
            return None
        if request.get("stop"):
            channel.send({"stopped": True})
            return "stop"
        if request.get("key") != key or len(fds) != 3:
            channel.send({"refused": "the server runs other code or settings (restart it)"})
            return None
        held_traces(request["argv"], request["cwd"])
        gc.freeze()  # the child inherits it: its collections pass the server's objects by
        pid = os.fork()
        if pid == 0:
            try:
                listener.close()
                _run_child(channel, request, fds, command)  # ends the process
            finally:
                os._exit(1)  # never back into the server's loop, whatever happened
        print(f"memlens serve: {' '.join(request['argv'][:1])} in process {pid}", flush=True)
        return None
    finally:
        gc.unfreeze()  # (the child never gets here) the server's garbage is collected as before
        for fd in fds:
            os.close(fd)


#: The parsed traces this server holds for its children: path -> (size, mtime_ns) when loaded.
_HELD: dict[str, tuple[int, int]] = {}


def held_traces(argv: list[str], cwd: str) -> None:
    """Keep the parsed traces the children read (``memlens.runs.pipeline``'s per-process
    traces, inherited by each fork) true to their files, and hold the one ``argv`` names.

    Every held trace whose file changed (size or modification time) or is gone is dropped.
    The trace of a plain ``trace=PATH`` is loaded here, from its cache entry only (a trace
    never parsed is parsed by the child, and held from the next command on), so each child
    starts with it, as the second run in one process does (0.3 s of 870,000 events), and
    with what the analyzers make per trace (:func:`_per_trace_made`)."""
    from memlens.runs import pipeline
    from memlens.trace.cache import cached_facts, load_trace_cached

    for key in list(pipeline._TRACES):
        if _stat(key[0]) != _HELD.get(key[0]):
            del pipeline._TRACES[key]
    path = _plain_trace(argv, cwd)
    if path is None or (path, True) in pipeline._TRACES or cached_facts(path) is None:
        return
    before = _stat(path)
    trace = load_trace_cached(path)
    if _stat(path) == before:  # not rewritten while it was read
        pipeline._TRACES[(path, True)], _HELD[path] = trace, before
        _per_trace_made(trace)


def _per_trace_made(trace) -> None:
    """Make here, once for every child, what a second run in one process finds made for its
    trace (each child's own would go with it): the index of its streams, its references'
    prices at the default costs and the default bootstrap's resample counts over its streams
    (0.3 s of a ``simulate`` over 5,800 streams).  Other settings make their own, as before."""
    from memlens.analyze.costs import CostsConfig
    from memlens.analyze.metrics import reference_prices, stream_index
    from memlens.analyze.stats import StatsConfig, resample_counts
    from memlens.config.schema import CommonConfig

    stream_index(trace)
    reference_prices(trace, CommonConfig.price_per_mtok, CostsConfig())
    stats = StatsConfig()
    resample_counts(trace.n_streams, stats.bootstrap, stats.seed)


def _plain_trace(argv: list[str], cwd: str) -> str | None:
    """The resolved path of ``trace=PATH`` in a single run that sets nothing else about how
    traces are read (their cache or limits), else None."""
    if {"-m", "--multirun"} & set(argv) or any(
        a.lstrip("+~").startswith(("trace_cache", "trace_limits", "traces=")) for a in argv
    ):
        return None
    values = [a.partition("=")[2] for a in argv if a.startswith("trace=")]
    if len(values) != 1 or not values[0] or any(c in values[0] for c in "'\"[]{},$"):
        return None
    path = Path(cwd, values[0]).resolve()
    return str(path) if path.is_file() else None


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _run_child(channel: Channel, request: dict, fds: list[int], command) -> None:
    """The client's command, in this forked child, with its streams, directory and
    environment; its exit code goes back to the client."""
    from memlens._util.exits import exit_code, wound_down

    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)  # held outside the command's own time
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a command's own subprocesses are waited for
    # the client's signals as a command in its terminal has them, whatever the server's own: a
    # server started in the background (`memlens serve &`) ignores SIGINT, as would its children
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)
    os.setsid()  # signals meant for the server (Ctrl-C where it runs) are not the command's
    for fd in (0, 1, 2):
        os.dup2(fds[fd], fd)
    try:
        os.chdir(request["cwd"])
    except OSError:  # the client's directory is gone: it runs the command itself
        os._exit(1)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["memlens", *request["argv"]]
    try:
        channel.send({"pid": os.getpid()})
    except OSError:  # the client is gone: nobody to run the command for
        os._exit(1)
    code = 0
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        command(request["argv"])
    except SystemExit as exc:
        code = exit_code(exc.code)
    except KeyboardInterrupt:  # before the command set up its own handling of Ctrl-C
        print("error: interrupted by SIGINT", file=sys.stderr)
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - reported as Python would, then exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)  # a late signal ends nothing more
    status = wound_down(code)  # atexit handlers (MLflow's, logging's) before the client returns
    with contextlib.suppress(OSError):
        channel.send({"exit": status})
    for fd in (0, 1, 2):  # a pipe reading the output sees its end now, not after the kernel
        with contextlib.suppress(OSError):  # has torn this large process down (0.1 s)
            os.close(fd)
    os._exit(status)


def warm_up(command: Callable[[list[str]], None]) -> None:
    """Import what commands use and load numba and the kernels of one small ``simulate``
    (its output discarded); compose the registered policies' configs.  No Python thread may
    be left running, as a fork copies only this one; the native threads the libraries keep
    (OpenBLAS's, Arrow's, jemalloc's) are set up again in a forked child by their own fork
    handlers, and numba starts none (its threading layer is not initialised: no kernel runs
    in parallel)."""
    import tempfile

    from memlens.config.store import DATA_DIR

    with tempfile.TemporaryDirectory(prefix="memlens-serve-") as tmp, _silenced():
        with contextlib.suppress(SystemExit):
            command(["simulate", f"trace={DATA_DIR / 'default' / 'agent-small.jsonl.gz'}",
                  "policy=lru", "budget=1024", "mlflow.enabled=false", "progress=false",
                  f"hydra.run.dir={tmp}/run"])  # fmt: skip
    from memlens.runs import pipeline

    for path, _ in pipeline._TRACES:  # the warm-up's trace stays held while its file is as read
        _HELD[path] = _stat(path)
    _policies_composed()
    if threading.active_count() > 1:
        raise SystemExit("error: memlens serve: threads still run after the warm-up "
                         f"({[t.name for t in threading.enumerate()]}); cannot fork safely")  # fmt: skip


def _policies_composed() -> None:
    """Compose every registered policy's config with no overrides, as ``compare`` does for its
    policies (``memlens.cli.replay.composed_policy``, once per process): a served ``compare``
    or ``recommend`` then composes none of them (ten Hydra compositions, about 1 s).  The
    configs hold no interpolation, and the server's key covers the files they are made from.
    One that fails to compose is left to the command, which reports it."""
    from memlens.cli.replay import composed_policy
    from memlens.config.store import registered_policies

    for name in registered_policies():
        with contextlib.suppress(Exception):
            composed_policy(name, [])


@contextlib.contextmanager
def _silenced():
    """Descriptors 1 and 2 on /dev/null (Hydra's and numba's output included)."""
    sys.stdout.flush(), sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1), os.dup2(null, 2)
        yield
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def stop(path: Path) -> int:
    """Ask the server at ``path`` to stop: 0 when it did, 1 when none answered."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError as exc:
        print(f"memlens serve: no server on {path} ({exc.strerror or exc})", file=sys.stderr)
        return 1
    with sock:
        channel = Channel(sock)
        channel.send({"stop": True}, _standard_streams())
        reply, _ = channel.receive()
    return 0 if reply and reply.get("stopped") else 1


DESCRIPTION = (
    "A warm process that runs memlens commands: start it with --socket PATH, then "
    "run commands with MEMLENS_SERVER=PATH set (docs/how-to/warm-server.md)."
)


def main(argv: list[str], command: Callable[[list[str]], None]) -> int:
    """``memlens serve``; ``command`` runs one command line (``memlens.cli.main.main``)."""
    import argparse  # here: a client needs none of it

    p = argparse.ArgumentParser(prog="memlens serve", description=DESCRIPTION)
    p.add_argument("--socket", required=True, type=Path, help="the Unix socket's path")
    p.add_argument("--stop", action="store_true", help="stop the server on --socket")
    args = p.parse_args(argv)
    if args.stop:
        return stop(args.socket)
    serve(args.socket.absolute(), command)
    return 0
