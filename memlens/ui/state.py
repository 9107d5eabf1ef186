"""What the page's server and its API share: settings, per-app state (the write token, the
one-time login codes and the sessions they opened), the static folder, the security headers,
and the small request helpers (JSON-safe values, integer parameters, the Host, Origin and
session checks).  Its own module so that ``memlens.ui.server`` (the app) and ``memlens.ui.api``
(the routes) both import it and not each other.
"""

from __future__ import annotations

import hmac
import math
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from memlens.analyze.prepared import Prepared, PreparedCache
from memlens.ui.interventions import SessionRows
from memlens.ui.runs import RunAccessError, RunFileError, first_line, run_file
from memlens.ui.training import TrainJobs

STATIC = Path(__file__).parent / "static"
TOKEN_HEADER = "x-memlens-token"
SESSION_COOKIE = "memlens_session"
#: Names the page always answers to (the loopback names); ``host`` and ``allowed_hosts`` add more.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
       "frame-ancestors 'none'; form-action 'none'")  # fmt: skip


@dataclass
class UiConfig:
    """``memlens ui`` settings (conf/ui.yaml)."""

    root: str = "outputs"  # run folders are read from under this folder only
    host: str = "127.0.0.1"  # the address to bind; anything else exposes the page
    port: int = 8765  # 0: any free port
    mlflow_uri: str | None = "sqlite:///mlflow.db"  # MLflow runs listed from here (SQLite)
    feedback_store: str = "feedback.db"  # interventions are written here
    author: str = "memlens-ui"  # author of the page's feedback rows
    prewarm: bool = True  # load the newest run's log in the background at start
    max_body_bytes: int = 1 << 20  # the largest request body accepted (413 beyond)
    allowed_hosts: list[str] = field(default_factory=list)  # Host names besides the bound one
    trace_roots: list[str] = field(default_factory=list)  # folders the what-if may also read

    def __post_init__(self) -> None:
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not (
                0 <= self.port <= 65535):  # fmt: skip
            raise ValueError(f"port must be an integer in 0..65535, got {self.port!r}")
        if not self.host.strip():
            raise ValueError("host must name an address to bind (127.0.0.1 by default)")
        if not Path(self.root).is_dir():
            raise ValueError(f"root {self.root}: no such folder")
        store = Path(self.feedback_store)
        if store.is_dir() or not store.absolute().parent.is_dir():
            raise ValueError(f"feedback_store {store}: not a file in an existing folder")
        if isinstance(self.max_body_bytes, bool) or not (
                isinstance(self.max_body_bytes, int) and 1024 <= self.max_body_bytes <= 1 << 30):  # fmt: skip
            raise ValueError(f"max_body_bytes must be an integer from 1024 to 2**30, "
                             f"got {self.max_body_bytes!r}")  # fmt: skip
        for name in self.allowed_hosts:
            if not name.strip() or any(c in name for c in "/@ "):
                raise ValueError(f"allowed_hosts: {name!r} is not a host name")
        for folder in self.trace_roots:
            if not Path(folder).is_dir():
                raise ValueError(f"trace_roots: {folder}: no such folder")


class State:
    """What the app shares between requests: settings, the write token, the login codes and
    sessions, the prepared runs.

    The token is not handed to whoever asks: ``memlens ui`` prints a URL with a one-time code;
    opening it sets a session cookie (HttpOnly, SameSite=Strict) and the page, served only to
    a session, carries the token that writes must send back in ``X-MemLens-Token``."""

    def __init__(self, cfg: UiConfig, token: str | None = None) -> None:
        self.cfg = cfg
        self.root = Path(cfg.root).resolve()
        self.token = token or secrets.token_urlsafe(32)
        self.cache = PreparedCache()
        self.names = {n.lower().strip("[]") for n in (*LOOPBACK_NAMES, cfg.host,
                                                     *cfg.allowed_hosts)}  # fmt: skip
        self.sessions = SessionRows()  # which interventions each browser session added
        self.trains = TrainJobs()  # the page's background `memlens train` jobs
        self._codes: set[str] = set()
        self._sessions: set[str] = set()
        self._lock = threading.Lock()

    def new_code(self) -> str:
        """A fresh one-time login code (``/?code=...`` opens one session with it, once)."""
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._codes.add(code)
        return code

    def redeem(self, code: str) -> str | None:
        """A new session id for an unused code (the code is spent), else None."""
        with self._lock:
            match = next((c for c in self._codes if hmac.compare_digest(c, code)), None)
            if match is None:
                return None
            self._codes.discard(match)
            session = secrets.token_urlsafe(32)
            self._sessions.add(session)
            return session

    def has_session(self, session: str | None) -> bool:
        if not session:
            return False
        with self._lock:
            return any(hmac.compare_digest(s, session) for s in self._sessions)

    def has_token(self, sent: str | None) -> bool:
        return bool(sent) and hmac.compare_digest(sent.encode(), self.token.encode())

    def trace_roots(self) -> tuple[Path, ...]:
        return tuple(Path(f).resolve() for f in self.cfg.trace_roots)

    def events(self, name: str) -> Path:
        return run_file(self.root, name, "events.parquet")

    def prepared(self, name: str) -> Prepared:
        """The run's event log loaded for queries (once per file version, then cached); a
        file DuckDB cannot read as an event log is a :class:`RunFileError`."""
        import duckdb

        path = self.events(name)
        try:
            return self.cache.get(path)
        except duckdb.Error as exc:
            raise RunFileError(f"run {name}: events.parquet is not an event log MemLens can "
                               f"read ({first_line(exc)})") from None  # fmt: skip


def json_safe(x):
    """JSON-safe: NaN and infinities become null (in nested lists and dicts too)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def int_param(params, key: str, default: int) -> int:
    raw = params.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise RunAccessError(f"{key}: an integer is required, got {raw!r}") from None


def host_allowed(state: State, host: str, port: int | None) -> bool:
    """Is ``host`` (a Host header: ``name``, ``name:port`` or ``[v6]:port``) one of the names
    the page answers to, at the port it listens on?  A page on another site that was
    rebound to 127.0.0.1 (DNS rebinding) sends its own name here, and is refused."""
    if any(c in host for c in "@/\\?#"):  # a Host is a name and a port, nothing more
        return False
    try:
        parts = urlsplit(f"//{host}")
        name, given = (parts.hostname or "").lower(), parts.port
    except ValueError:
        return False
    return name in state.names and (given is None or port is None or given == port)


def origin_allowed(state: State, origin: str, port: int | None) -> bool:
    """Is ``origin`` this page itself (``http://<an allowed name>:<port>``)?"""
    try:
        parts = urlsplit(origin)
        name, given = (parts.hostname or "").lower(), parts.port
    except ValueError:
        return False
    return (parts.scheme == "http" and name in state.names and given is not None
            and (port is None or given == port))  # fmt: skip


def check_write(state: State, request) -> None:
    """A write needs the session token; a cross-site Origin is refused outright (the Host
    and the session were checked for every request by ``memlens.ui.api.Guard``)."""
    origin = request.headers.get("origin")
    port = request.url.port or (request.scope.get("server") or (None, None))[1]
    if origin and not origin_allowed(state, origin, port):
        raise PermissionError("cross-site request refused")
    if not state.has_token(request.headers.get(TOKEN_HEADER, "")):
        raise PermissionError("missing or wrong session token")
