"""What a person reads: a run's static ``report.html`` and the Markdown/HTML report of an
MLflow experiment.  (Terminal tables are ``memlens.analyze.table``; the event-log queries the
static report shares with the page are ``memlens.analyze.queries``.)

May import: ``memlens.config``, ``memlens.analyze`` and everything below; never ``runs``,
``learn``, ``ui`` or ``cli``.
"""
