"""The page's HTTP endpoints: the page itself, plotly.js, JSON reads and token-guarded writes.

Why separate from ``server``: the server module wires settings and the app; this one says what
each URL answers.  Reads name a run by its path under the root (``run=...``); every answer is an
aggregate or one page of rows (``offset``/``limit``), never the whole event log.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)

from memlens.analyze import queries
from memlens.learn.feedback import FeedbackError, FeedbackStore
from memlens.ui.interventions import intervene, scoped_rows, undo
from memlens.ui.runs import RunAccessError, RunFileError, local_runs, mlflow_runs, resolve_run
from memlens.ui.state import (
    CSP,
    SESSION_COOKIE,
    STATIC,
    TOKEN_HEADER,
    check_write,
    host_allowed,
    int_param,
    json_safe,
    origin_allowed,
)
from memlens.ui.whatif import feedback_row, what_if

#: Deepest nesting of a request body's JSON (an intervention is a flat object).
MAX_JSON_DEPTH = 16
NO_SESSION = ("<!doctype html><title>MemLens</title><p>No session: open the URL that "
              "<code>memlens ui</code> printed (it carries a one-time code), or restart it for "
              "a new one.</p>")  # fmt: skip


class SecurityHeaders(BaseHTTPMiddleware):
    """CSP (no inline script), no sniffing, no framing, no referrer on every answer."""

    async def dispatch(self, request, call_next):

        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response


class Guard:
    """Every request, before any route or file is served: the ``Host`` must be a name the page
    answers to (421 otherwise: DNS rebinding), an ``Origin`` must be the page itself (403),
    a body may not announce more than ``max_body_bytes`` (413), and the API needs a session
    (the cookie the one-time code set) or the token (401).  A plain ASGI middleware, so that
    a refusal never reads the body or reaches a handler."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope["app"].state.ui, Request(scope))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def refusal(state, request: Request) -> Response | None:
        """The answer that refuses ``request``, or None to let it through."""
        port = (request.scope.get("server") or (None, None))[1]
        host = request.headers.get("host", "")
        if not host_allowed(state, host, port):
            return JSONResponse({"error": f"Host {host[:80]!r} is not a name this page answers "
                                          "to (ui setting allowed_hosts adds names)"},
                                status_code=421)  # fmt: skip
        origin = request.headers.get("origin")
        if origin and not origin_allowed(state, origin, port):
            return JSONResponse({"error": "cross-site request refused"}, status_code=403)
        length = request.headers.get("content-length", "0")
        if not length.isdigit() or int(length) > state.cfg.max_body_bytes:
            return _too_large(state)
        if request.url.path.startswith("/api/") and not (
                state.has_session(request.cookies.get(SESSION_COOKIE))
                or state.has_token(request.headers.get(TOKEN_HEADER))):  # fmt: skip
            return JSONResponse({"error": "no session: open the URL memlens ui printed"},
                                status_code=401)  # fmt: skip
        return None


def _too_large(state) -> JSONResponse:
    return JSONResponse({"error": f"request body larger than {state.cfg.max_body_bytes:,} bytes "
                                  "(ui setting max_body_bytes)"}, status_code=413)  # fmt: skip


def _state(request):
    return request.app.state.ui


def _json(data, status: int = 200) -> JSONResponse:

    return JSONResponse(json_safe(data), status_code=status)


def _error(exc: Exception, status: int) -> JSONResponse:
    return JSONResponse({"error": str(exc).strip("'\"")}, status_code=status)


def _failure(exc: Exception) -> JSONResponse:
    """The 4xx answer to bad input (a bad name, a bad value, a damaged run folder); a 500
    only for what is none of these (a bug), with the traceback on the server's stderr."""
    import duckdb

    if isinstance(exc, RunAccessError):
        text = str(exc)
        return _error(exc, 404 if "no such" in text or "not a run" in text else 400)
    if isinstance(exc, (RunFileError, duckdb.Error, OSError)):
        return _error(exc, 422)
    if isinstance(exc, KeyError):
        return _error(exc, 404)
    if isinstance(exc, (FeedbackError, ValueError, TypeError)):
        return _error(exc, 400)
    traceback.print_exception(exc, file=sys.stderr)
    return JSONResponse({"error": f"internal error ({type(exc).__name__}); see the server's "
                                  "log"}, status_code=500)  # fmt: skip


async def index(request) -> Response:
    """The page, to a session only; ``/?code=C`` spends a one-time code on a new session
    (cookie) and redirects to the same page without the code."""
    state = _state(request)
    code = request.query_params.get("code")
    has_session = state.has_session(request.cookies.get(SESSION_COOKIE))
    if code is not None:
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "code"]
        response = RedirectResponse("/" + (f"?{urlencode(rest)}" if rest else ""), 303)
        if has_session:
            return response
        session = state.redeem(code)
        if session is None:
            return HTMLResponse(NO_SESSION.replace("No session", "This code was used already "
                                                   "or is wrong"), status_code=403)  # fmt: skip
        response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict", path="/")
        return response
    if not has_session:
        return HTMLResponse(NO_SESSION, status_code=401)
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    return HTMLResponse(html.replace("{{TOKEN}}", state.token),
                        headers={"Cache-Control": "no-store"})  # fmt: skip


#: plotly.js's cartesian bundle (npm ``plotly.js-cartesian-dist-min`` 4.1.1, MIT licence beside
#: it): every trace type the page draws (scatter, bar, heatmap) in 1.5 MB instead of the full
#: bundle's 4.8 MB, which a cold browser spent most of a first view compiling (issue 30's 2 s).
PLOTLY_JS = Path(__file__).parent / "static" / "plotly-cartesian.min.js"


async def plotly_js(request) -> Response:
    return FileResponse(PLOTLY_JS, media_type="application/javascript",
                        headers={"Cache-Control": "max-age=86400"})  # fmt: skip


def _session(request) -> str:
    """Who is asking: the browser session (its cookie), else the token's holder (a script)."""
    return request.cookies.get(SESSION_COOKIE) or "token"


def _read(fn, with_session: bool = False):
    """A GET endpoint: ``fn(state, params)`` (``with_session``: and the asker's session) in a
    worker thread; bad input -> 4xx."""

    async def endpoint(request):
        state, params = _state(request), request.query_params
        args = (state, params, _session(request)) if with_session else (state, params)
        try:
            return _json(await run_in_threadpool(fn, *args))
        except Exception as exc:  # noqa: BLE001 - every failure is an answer, never a crash
            return _failure(exc)

    return endpoint


def _runs(state, params):
    found, problem = mlflow_runs(state.cfg.mlflow_uri, state.root)
    problems: list[dict] = []
    local = local_runs(state.root, problems)
    return {"root": str(state.root), "local": local, "mlflow": found, "mlflow_error": problem,
            "problems": problems}  # fmt: skip


def _paged(name: str):
    fn = getattr(queries, name)

    def read(state, p):
        return fn(state.prepared(p.get("run", "")), stream=p.get("stream") or None,
                  offset=max(int_param(p, "offset", 0), 0), limit=int_param(p, "limit", 40))  # fmt: skip

    return read


def _summary(state, p):
    from memlens.ui.runs import run_identity

    name = p.get("run", "")
    out = queries.summary(state.prepared(name))
    out["identity"] = run_identity(resolve_run(state.root, name))
    return out


def _influence(state, p):

    return queries.influence(state.prepared(p.get("run", "")), int_param(p, "request", -1))


def _item(state, p):
    return queries.item_view(state.prepared(p.get("run", "")), p.get("item", ""))


def _diff(state, p):
    from memlens.ui.runs import run_identity

    a, b = p.get("a", ""), p.get("b", "")
    ta = run_identity(resolve_run(state.root, a))["trace"].get("sha256")
    tb = run_identity(resolve_run(state.root, b))["trace"].get("sha256")
    if ta != tb:
        raise ValueError("the two runs replayed different traces: nothing to diff")

    return queries.diff(state.events(a), state.events(b),
                        offset=max(int_param(p, "offset", 0), 0), limit=int_param(p, "limit", 50))  # fmt: skip


def _trace_sha(state, name: str) -> str:
    from memlens.ui.whatif import run_trace_info

    return run_trace_info(resolve_run(state.root, name))["sha256"]


def _feedback_rows(state, p, session):
    """The person rows about the run's trace, each with its id and whether this session
    added it (``mine``: what ``scope=session`` applies and undo can take back)."""
    sha = _trace_sha(state, p.get("run", ""))
    store = Path(state.cfg.feedback_store)
    rows = FeedbackStore(store).entries(trace_sha256=sha, source="person") if store.exists() else []
    mine = set(state.sessions.ids(session))
    keys = ("stream", "event_index", "t", "item_id", "action", "value", "note", "author")
    return {"rows": [{"id": i, "mine": i in mine, **{k: getattr(r, k) for k in keys}}
                     for i, r in rows]}  # fmt: skip


def _train_status(state, p):
    return state.trains.view(int_param(p, "job", -1))


READS = {
    "runs": _read(_runs),
    "summary": _read(_summary),
    "timeline": _read(_paged("timeline")),
    "heatmap": _read(_paged("heatmap")),
    "graph": _read(_paged("graph")),
    "requests": _read(_paged("requests_page")),
    "influence": _read(_influence),
    "item": _read(_item),
    "diff": _read(_diff),
    "feedback": _read(_feedback_rows, with_session=True),
    "train": _read(_train_status),
}


class BodyTooLarge(ValueError):
    """A request body past ``max_body_bytes`` (read in pieces, so it is never held whole)."""


async def _body(request, limit: int) -> bytes:
    """The request body, refused as soon as it passes ``limit`` bytes (a chunked body has no
    Content-Length for the guard to check)."""
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        parts.append(chunk)
    return b"".join(parts)


def parse_body(raw: bytes) -> dict:
    """A JSON object nested at most :data:`MAX_JSON_DEPTH` deep, else ``ValueError``.  orjson
    stops at 1024 levels on its own (100,000 ``[`` is an error, not a crash)."""
    import orjson

    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"the body is not JSON ({str(exc)[:120]})") from None
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    stack = [(v, 1) for v in body.values()]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth >= MAX_JSON_DEPTH:
                raise ValueError(f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict)
                                                   else value))  # fmt: skip
    return body


def _write(fn):
    """A POST endpoint: token and Origin checked first (403), then a JSON object body of at
    most ``max_body_bytes`` (413)."""

    async def endpoint(request):

        state = _state(request)
        try:
            check_write(state, request)
        except PermissionError as exc:
            return _error(exc, 403)
        try:
            body = parse_body(await _body(request, state.cfg.max_body_bytes))
            return _json(await run_in_threadpool(fn, state, body, _session(request)))
        except BodyTooLarge:
            return _too_large(state)
        except RunAccessError as exc:
            return _error(exc, 404)
        except Exception as exc:  # noqa: BLE001 - every failure is an answer, never a crash
            return _failure(exc)

    return endpoint


def _add_feedback(state, body, session):
    name = body.get("run", "")
    folder = resolve_run(state.root, name)
    if not isinstance(body.get("item_id"), str):
        raise ValueError("item_id: text is required")
    run = state.prepared(name)
    where = queries.item_at(run, body["item_id"])
    if body.get("event") is not None:
        e = body["event"]
        if isinstance(e, bool) or not isinstance(e, int) or e < 0:
            raise ValueError(f"event must be an event index >= 0, got {e!r}")
        t = queries.event_time(run, e)
        if t is None:
            raise ValueError(f"event {e}: no such event in this run")
        where = {**where, "event": e, "t": t}
    row = feedback_row(folder, where, body, state.cfg.author)
    return intervene(FeedbackStore(state.cfg.feedback_store), state.sessions, session, row)


def _undo(state, body, session):
    row_id = body.get("id")
    if row_id is not None and (isinstance(row_id, bool) or not isinstance(row_id, int)):
        raise ValueError(f"id must be an intervention's id (an integer), got {row_id!r}")
    sha = _trace_sha(state, body.get("run", ""))
    return undo(FeedbackStore(state.cfg.feedback_store), state.sessions, session, sha, row_id)


def _what_if(state, body, session):
    folder = resolve_run(state.root, body.get("run", ""))
    scope = body.get("scope", "session")
    sha = _trace_sha(state, body.get("run", ""))
    rows = scoped_rows(FeedbackStore(state.cfg.feedback_store), state.sessions, session, sha,
                       scope)  # fmt: skip
    out = what_if(folder, [r for _i, r in rows], state.root, state.trace_roots())
    return {**out, "scope": scope, "ids": [i for i, _r in rows]}


def _train_start(state, body, session):
    """Start ``memlens train`` on the run's trace with the store's feedback (a job to poll)."""
    from memlens.config.store import DATA_DIR
    from memlens.ui.runs import contained, run_identity
    from memlens.ui.training import run_training

    folder = resolve_run(state.root, body.get("run", ""))
    with_simulated = body.get("with_simulated", True)
    if not isinstance(with_simulated, bool):
        raise ValueError(f"with_simulated must be true or false, got {with_simulated!r}")
    ident = run_identity(folder)
    roots = [state.root, folder, DATA_DIR, *state.trace_roots()]
    trace = contained(str(ident["trace"].get("path", "")), roots, f"run {folder.name}: trace")
    store = Path(state.cfg.feedback_store)
    FeedbackStore(store)  # created if missing: the job reads it
    return state.trains.start(run_training, trace, store, int(ident["budget"]), with_simulated)


WRITES = {"feedback": _write(_add_feedback), "undo": _write(_undo),
          "whatif": _write(_what_if), "train": _write(_train_start)}  # fmt: skip
