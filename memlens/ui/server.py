"""``memlens ui``: the local analytics page, a Starlette app served by uvicorn.

One HTML page (``memlens/ui/static``) and a JSON API over the run folders under one root.  The
page draws its charts with the plotly.js that the ``plotly`` Python package ships (served from
the installed package: no CDN, works offline).  What keeps it safe on a shared machine:

* it binds 127.0.0.1 unless ``host`` says otherwise, and answers only requests whose ``Host``
  is a name it binds (127.0.0.1, localhost, ::1, ``host``, ``allowed_hosts``): a page on
  another site rebound to 127.0.0.1 (DNS rebinding) gets 421 before anything is served;
* nothing is served to whoever connects: ``memlens ui`` prints a URL with a one-time code,
  which sets a session cookie (HttpOnly, SameSite=Strict); the page and the API need it;
* reads go through :mod:`memlens.ui.runs` (only run folders under ``root``, files they name
  under the root too);
* writes (feedback, what-if) also need the token the page was served with, sent in the
  ``X-MemLens-Token`` header, which a cross-site form or fetch cannot set; a request whose
  ``Origin`` is not the page itself is refused as well; bodies are capped
  (``max_body_bytes``) and every bad input is a JSON error with a 4xx;
* memory text is untrusted: the page only ever inserts it as text (``textContent``), charts
  get it escaped, and a Content-Security-Policy forbids inline scripts.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from memlens.ui.state import STATIC, State, UiConfig


def create_app(cfg: UiConfig, token: str | None = None):
    """The Starlette app (``app.state.ui`` holds the :class:`State`)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    from memlens.ui import api

    state = State(cfg, token)
    routes = [
        Route("/", api.index),
        Route("/vendor/plotly.min.js", api.plotly_js),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        *[Route(f"/api/{name}", fn, methods=["GET"]) for name, fn in api.READS.items()],
        *[Route(f"/api/{name}", fn, methods=["POST"]) for name, fn in api.WRITES.items()],
    ]
    app = Starlette(routes=routes,
                    middleware=[Middleware(api.SecurityHeaders), Middleware(api.Guard)])  # fmt: skip
    app.state.ui = state
    if cfg.prewarm:
        threading.Thread(target=_prewarm, args=(state,), daemon=True).start()
    return app


def _prewarm(state: State) -> None:
    """Load the newest run's log now, so the page finds it ready (a large run takes seconds)."""
    from memlens.ui.runs import local_runs

    try:
        runs = local_runs(state.root)
        if runs:
            state.prepared(runs[0]["run"])
    except Exception:  # noqa: BLE001 - the page will say what is wrong when it asks
        pass


# ------------------------------------------------------------------------ command
def load_config(argv: list[str]) -> UiConfig:
    """``key=value`` settings composed with conf/ui.yaml (Hydra's grammar), then checked."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from memlens.config.compose import compose_config

    ConfigStore.instance().store(name="ui_schema", node=UiConfig)
    bad = [a for a in argv if "=" not in a]
    if bad:
        raise ValueError(f"expected key=value settings, got {bad[0]!r} (memlens ui --help)")
    cfg = compose_config("ui", argv)
    return OmegaConf.to_object(cfg)


USAGE = """usage: memlens ui [key=value ...]

The analytics page on http://HOST:PORT/ (settings: conf/ui.yaml)
  root=outputs               run folders are read from under this folder only
  host=127.0.0.1 port=8765   where to listen (port=0: any free port)
  mlflow_uri=sqlite:///mlflow.db   MLflow runs to list (null: none)
  feedback_store=feedback.db       where pins, unpins and annotations are written
  max_body_bytes=1048576           the largest request body accepted
  allowed_hosts=[]                 Host names accepted besides 127.0.0.1, localhost, host
  trace_roots=[]                   folders (besides root) whose traces the what-if may replay

It prints a URL with a one-time code: opening it starts a browser session (a cookie).
"""


def main(argv: list[str]) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from memlens.config.app import error_message

    if any(a in ("-h", "--help", "help") for a in argv):
        print(USAGE)
        return 0
    try:
        cfg = load_config(argv)
    except (HydraException, OmegaConfBaseException, ValueError, TypeError, KeyError) as exc:
        print(f"error: {error_message(exc)}", file=sys.stderr)
        return 2
    import uvicorn

    app = create_app(cfg)
    if cfg.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: host={cfg.host} exposes the page beyond this machine", file=sys.stderr)
    try:
        sock = _bind(cfg.host, cfg.port)
    except OSError as exc:
        print(f"error: host={cfg.host} port={cfg.port}: cannot listen there "
              f"({exc.strerror or exc})", file=sys.stderr)  # fmt: skip
        return 2
    port = sock.getsockname()[1]
    code = app.state.ui.new_code()
    shown = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    print(f"memlens ui: http://{shown}:{port}/?code={code}  (root {app.state.ui.root}; the "
          "code opens one browser session, once)", flush=True)  # fmt: skip
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", workers=1))
    server.run(sockets=[sock])
    return 0


def _bind(host: str, port: int):
    """A listening socket on (host, port) (``port=0``: a free one), so that the URL printed is
    the one served."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


@contextmanager
def running(cfg: UiConfig, token: str | None = None) -> Iterator[tuple[str, State]]:
    """Serve the app on ``cfg.host`` in a background thread (``port=0``: a free port) for the
    duration of the block; yields (base URL, state).  Used by tests and benchmarks."""
    import uvicorn

    app = create_app(cfg, token)
    sock = _bind(cfg.host, cfg.port)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://{cfg.host}:{port}", app.state.ui
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
