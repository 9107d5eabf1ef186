"""The page's HTTP endpoints: the page itself, plotly.js, JSON reads and token-guarded writes.

Why separate from ``server``: the server module wires settings and the app; this one says what
each URL answers.  Reads name a run by its path under the root (``run=...``); every answer is an
aggregate or one page of rows (``offset``/``limit``), never the whole event log.
"""

from __future__ import annotations

from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response

from memlens.analyze import queries
from memlens.learn.feedback import FeedbackError, FeedbackStore
from memlens.ui.runs import RunAccessError, local_runs, mlflow_runs, resolve_run
from memlens.ui.state import CSP, STATIC, check_write, int_param, json_safe
from memlens.ui.whatif import feedback_row, what_if


class SecurityHeaders(BaseHTTPMiddleware):
    """CSP (no inline script), no sniffing, no framing, no referrer on every answer."""

    async def dispatch(self, request, call_next):

        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response


def _state(request):
    return request.app.state.ui


def _json(data, status: int = 200) -> JSONResponse:

    return JSONResponse(json_safe(data), status_code=status)


def _error(exc: Exception, status: int) -> JSONResponse:
    return JSONResponse({"error": str(exc).strip("'\"")}, status_code=status)


async def index(request) -> Response:

    html = (STATIC / "index.html").read_text(encoding="utf-8")
    return HTMLResponse(html.replace("{{TOKEN}}", _state(request).token))


async def plotly_js(request) -> Response:
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    return FileResponse(path, media_type="application/javascript",
                        headers={"Cache-Control": "max-age=86400"})  # fmt: skip


def _read(fn):
    """A GET endpoint: ``fn(state, params)`` in a worker thread; bad input -> 400/404."""

    async def endpoint(request):
        state, params = _state(request), request.query_params
        try:
            return _json(await run_in_threadpool(fn, state, params))
        except RunAccessError as exc:
            return _error(exc, 404 if "no such" in str(exc) or "not a run" in str(exc) else 400)
        except KeyError as exc:
            return _error(exc, 404)
        except ValueError as exc:
            return _error(exc, 400)

    return endpoint


def _runs(state, params):
    found, problem = mlflow_runs(state.cfg.mlflow_uri, state.root)
    return {"root": str(state.root), "local": local_runs(state.root), "mlflow": found,
            "mlflow_error": problem}  # fmt: skip


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


def _diff(state, p):
    from memlens.ui.runs import run_identity

    a, b = p.get("a", ""), p.get("b", "")
    ta = run_identity(resolve_run(state.root, a))["trace"].get("sha256")
    tb = run_identity(resolve_run(state.root, b))["trace"].get("sha256")
    if ta != tb:
        raise ValueError("the two runs replayed different traces: nothing to diff")

    return queries.diff(state.events(a), state.events(b),
                        offset=max(int_param(p, "offset", 0), 0), limit=int_param(p, "limit", 50))  # fmt: skip


def _feedback_rows(state, p):
    from memlens.ui.whatif import run_trace_info

    sha = run_trace_info(resolve_run(state.root, p.get("run", "")))["sha256"]
    store = Path(state.cfg.feedback_store)
    rows = FeedbackStore(store).rows(trace_sha256=sha, source="person") if store.exists() else []
    keys = ("stream", "event_index", "t", "item_id", "action", "value", "note", "author")
    return {"rows": [{k: getattr(r, k) for k in keys} for r in rows]}


READS = {
    "runs": _read(_runs),
    "summary": _read(_summary),
    "timeline": _read(_paged("timeline")),
    "heatmap": _read(_paged("heatmap")),
    "graph": _read(_paged("graph")),
    "requests": _read(_paged("requests_page")),
    "influence": _read(_influence),
    "diff": _read(_diff),
    "feedback": _read(_feedback_rows),
}


def _write(fn):
    """A POST endpoint: token checked first (403), then a JSON object body."""

    async def endpoint(request):

        state = _state(request)
        try:
            check_write(state, request)
        except PermissionError as exc:
            return _error(exc, 403)
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            return _json(await run_in_threadpool(fn, state, body))
        except RunAccessError as exc:
            return _error(exc, 404)
        except (FeedbackError, ValueError, KeyError) as exc:
            return _error(exc, 400)

    return endpoint


def _add_feedback(state, body):
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
    FeedbackStore(state.cfg.feedback_store).add([row])
    return {"added": 1, "event_index": row.event_index, "action": row.action}


def _what_if(state, body):
    folder = resolve_run(state.root, body.get("run", ""))
    return what_if(folder, FeedbackStore(state.cfg.feedback_store))


WRITES = {"feedback": _write(_add_feedback), "whatif": _write(_what_if)}
