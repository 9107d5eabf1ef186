"""What the page's server and its API share: settings, per-app state, the static folder, the
security headers, and the small request helpers (JSON-safe values, integer parameters, the
write check).  Its own module so that ``memlens.ui.server`` (the app) and ``memlens.ui.api``
(the routes) both import it and not each other.
"""

from __future__ import annotations

import hmac
import math
import secrets
from dataclasses import dataclass
from pathlib import Path

from memlens.analyze.prepared import Prepared, PreparedCache
from memlens.ui.runs import RunAccessError, run_file

STATIC = Path(__file__).parent / "static"
TOKEN_HEADER = "x-memlens-token"
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


class State:
    """What the app shares between requests: settings, token, the prepared runs."""

    def __init__(self, cfg: UiConfig, token: str | None = None) -> None:
        self.cfg = cfg
        self.root = Path(cfg.root).resolve()
        self.token = token or secrets.token_urlsafe(32)
        self.cache = PreparedCache()

    def events(self, name: str) -> Path:
        return run_file(self.root, name, "events.parquet")

    def prepared(self, name: str) -> Prepared:
        """The run's event log loaded for queries (once per file version, then cached)."""
        return self.cache.get(self.events(name))


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


def check_write(state: State, request) -> None:
    """A write needs the session token; a cross-site Origin is refused outright."""
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    if origin and origin.split("://", 1)[-1] != host:
        raise PermissionError("cross-site request refused")
    sent = request.headers.get(TOKEN_HEADER, "")
    if not hmac.compare_digest(sent.encode(), state.token.encode()):
        raise PermissionError("missing or wrong session token")
