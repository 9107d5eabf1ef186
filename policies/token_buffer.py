"""LangChain's ConversationTokenBufferMemory: drop the oldest messages until the buffer fits.

LangChain (``langchain.memory.ConversationTokenBufferMemory``) keeps the conversation's
messages and, after each turn, pops the oldest (``buffer.pop(0)``) while the buffer's token
count exceeds ``max_token_limit``.  That is FIFO eviction by tokens, the same policy as
``window``; it is kept as its own entry so that tables name the reference a reader knows.
Being needed does not keep a message.  LangChain has no pins; here pinned items are skipped, as
the MemLens contract requires.  The replay is event-for-event identical to ``window``, so it
registers the same compiled kernel (``tests/policies/test_policy_token_buffer.py`` checks the two
engines and the two policies agree).
"""

from __future__ import annotations

from memlens.policy import OrderedPolicy, compiled_kernel


@compiled_kernel("memlens.kernels.queues:replay_fifo")
class ConversationTokenBuffer(OrderedPolicy):
    name = "token_buffer"
