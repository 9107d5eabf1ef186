"""Needs from the model itself: number the context for the prompt, read the citations back.

An agent rarely knows which memories a step used; the model does, if it is asked to cite them.
:func:`format_context` writes each item under its id in brackets (``[m12]``: the manager's ids
are an ``m`` and a number) with an instruction to cite them that way, and
:func:`parse_citations` reads the cited ids back out of the reply, so that
``manager.used(stream, parse_citations(reply, items))`` records what the model said it used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

# the example cites no real id: a model that echoes the instruction must cite nothing
INSTRUCTION = ("Memories, each under its id in brackets. When your answer relies on a memory, "
               "cite its id in brackets: [id], or [id, id] for several.")  # fmt: skip

#: One bracket of citations: ``[m3]``, ``[m3, m7]``, ``[m3][m7]``; ids as the manager makes
#: them, or any id without spaces, brackets or commas when ``known`` says which ids count.
_BRACKET = re.compile(r"\[([^\[\]\n]{1,400})\]")
_SPLIT = re.compile(r"[,;\s]+")
_MANAGER_ID = re.compile(r"m\d+")


def format_context(items: Sequence, instruction: str | None = INSTRUCTION) -> str:
    """The items (``MemoryManager.context``'s) as prompt text, one per block, each headed by its
    id and type: ``[m3] (tool_result)`` then the text.  ``instruction=None`` leaves out the
    line asking the model to cite."""
    blocks = [] if instruction is None else [instruction]
    for item in items:
        blocks.append(f"[{item.id}] ({item.type})\n{item.text}")
    return "\n\n".join(blocks)


def parse_citations(text: str, known: Iterable | None = None) -> list[str]:
    """The ids cited in ``text``, in first-cited order, each once.

    ``known``: the items (or ids) that were in the prompt; only their ids count (a model may
    invent one, or cite a bracketed word of the text).  Without it, ids of the manager's form
    (``m`` and digits) count.
    """
    if not isinstance(text, str):
        raise ValueError(f"text: must be a string, got {type(text).__name__}")
    ids = None if known is None else {getattr(k, "id", k) for k in known}
    found: dict[str, None] = {}
    for match in _BRACKET.finditer(text):
        for token in _SPLIT.split(match.group(1).strip()):
            if token and (token in ids if ids is not None else _MANAGER_ID.fullmatch(token)):
                found.setdefault(token, None)
    return list(found)
