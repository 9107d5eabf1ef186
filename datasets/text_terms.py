"""The words every lexical needs method matches on: tokens and the stopwords left out.

Shared by :mod:`needs_derivation` (overlap, provenance) and :mod:`bm25_needs`, so that the
methods compared against each other read the same words.
"""

from __future__ import annotations

import re

_TERM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_@.\-]*[A-Za-z0-9]|[A-Za-z0-9]")
_STOPWORDS = frozenset(
    """a about after again all also am an and any are as at be because been before being but by
    can could did do does doing don down during each few for from further had has have having he
    her here hers him his how i if in into is it its just me more most my no nor not now of off on
    once only or other our out over own same she should so some such than that the their them then
    there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yes yeah hey hi oh ok okay thanks
    thank really so much like get got go going know think want well great good sure lot let one
    i'm it's that's you're i've i'll""".split()
)
