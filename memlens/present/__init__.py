"""What a person reads: terminal tables, a run's static ``report.html`` and the Markdown/HTML
report of an MLflow experiment.

May import: ``memlens.runs``, ``memlens.analyze`` and everything below; never ``ui`` (except
its prepared queries, which the static report shares) or ``cli``.
"""
