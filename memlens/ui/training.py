"""The page's "train" action: ``memlens train`` on a run's trace, in the background.

Why: the interventions a person makes on the page are feedback rows, the labels the learned
scorer trains on.  This closes the loop without leaving the page: the run's trace split by
stream (``split=auto``, a quarter of its streams held out), labels from the feedback store's
rows about that trace (plus the simulated user's, if asked: a person's pins alone all say
"keep", and one label teaches nothing), at the run's budget; then the new model is scored on
the held-out streams against LRU, the rule scorer and the bundled model, with paired
intervals (``memlens.learn.evaluate``).  Nothing is adopted: the answer names the model file
and the command that uses it.

One job runs at a time (the machine's cores are the limit); its progress lines and its
result are kept in :class:`TrainJobs` for the page to poll.  The model is written beside the
feedback store, under ``memlens-models/``.
"""

from __future__ import annotations

import threading
import time
import traceback
from pathlib import Path

#: Progress lines kept per job (the newest).
MAX_LINES = 50


class TrainJobs:
    """Background training jobs of one server (one at a time)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[int, dict] = {}
        self.next_id = 1

    def running(self) -> dict | None:
        return next((j for j in self.jobs.values() if j["state"] == "running"), None)

    def start(self, target, *args) -> dict:
        """A new job running ``target(job, *args)`` in a thread; refused while one runs."""
        with self.lock:
            busy = self.running()
            if busy is not None:
                raise ValueError(f"a training job is running already (job {busy['id']}); wait "
                                 "for it to finish")  # fmt: skip
            job = {"id": self.next_id, "state": "running", "progress": [], "result": None,
                   "error": None, "started": time.time()}  # fmt: skip
            self.jobs[job["id"]] = job
            self.next_id += 1
        threading.Thread(target=self._run, args=(job, target, args), daemon=True).start()
        return self.view(job["id"])

    def _run(self, job: dict, target, args) -> None:
        try:
            job["result"] = target(job, *args)
            job["state"] = "done"
        except (ValueError, OSError, KeyError) as exc:  # bad input: said on the page
            job["error"], job["state"] = str(exc).strip("'\""), "error"
        except Exception as exc:  # noqa: BLE001 - a bug: the page says so, stderr has why
            traceback.print_exc()
            job["error"], job["state"] = f"internal error ({type(exc).__name__})", "error"

    def view(self, job_id: int) -> dict:
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                raise KeyError(f"training job {job_id}: no such job")
            return {k: job[k] for k in ("id", "state", "progress", "result", "error")}


def say(job: dict, text: str) -> None:
    job["progress"] = [*job["progress"], text][-MAX_LINES:]


def train_settings(trace_path: Path, store: Path, budget: int, out: Path, with_simulated: bool):
    """The ``memlens train`` settings of the page's job (composed as the command composes)."""
    from memlens.config.compose import compose_config
    from memlens.config.schema import resolve

    overrides = ["split=auto", f"split.auto_trace={_quoted(trace_path)}", "label.kind=feedback",
                 f"feedback.store={_quoted(store)}", f"feedback.with_simulated={str(with_simulated).lower()}",
                 f"budgets=[{int(budget)}]", "mlflow.enabled=false", f"out={_quoted(out)}"]  # fmt: skip
    return resolve(compose_config("train", overrides))


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("\\", "\\\\").replace("'", "\\'") + "'"


def run_training(
    job: dict, trace_path: Path, store: Path, budget: int, with_simulated: bool
) -> dict:
    """Train, write the model, and return what the page shows (the held-out comparison)."""
    from memlens.learn.train import train
    from memlens.scorer.model import save_model

    out = store.absolute().parent / "memlens-models" / f"page-{int(time.time())}-{job['id']}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    say(job, f"splitting {trace_path.name} by stream")
    settings = train_settings(trace_path, store, budget, out, with_simulated)
    est, meta = train(settings, progress=lambda text: say(job, text))
    model_path, sidecar = save_model(str(out), est, meta)
    say(job, f"model written to {model_path}")
    return {"model": str(model_path), "sidecar": str(sidecar), "metrics": meta["metrics"],
            "test": meta.get("test", []), "n_feedback": meta["n_feedback"],
            "test_streams": [s for t in settings.split.test for s in (t.streams or [])],
            "use": f"memlens simulate policy=learned policy.model={model_path}"}  # fmt: skip
