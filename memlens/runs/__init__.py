"""Stages 1-6 of a run, end to end, and what keeps them safe: the pipeline (resolve, load,
replay, analyze, report, write), sweeps of many jobs, resuming them, the writers of a run's
folder, MLflow tracking and its store, interrupts, and the pre-flight checks a replay
command runs before any work (``preflight``).

(Named ``runs`` rather than ``run``: ``memlens.run`` is the public function that runs one job.)

May import: ``memlens.config``, ``memlens.analyze`` and everything below them; never
``learn``, ``ui`` or ``cli`` (``present`` is below: the writers render ``report.html``).
"""
