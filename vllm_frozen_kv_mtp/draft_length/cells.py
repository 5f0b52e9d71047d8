"""Which steps share a cost curve: a cell is (batch-size bucket, context bucket).

A step's time grows with the requests in it and with the KV each request reads, and
so does what one more draft costs: a frozen-KV drafter reads the target's KV of its
shared layers once per draft, the whole context for the global ones. So the goodput
policy learns one cost curve per batch bucket and per context bucket (the mean of the
scheduled requests' computed tokens).

Pure logic (no vLLM, no torch).
"""

from __future__ import annotations

import math

#: (batch bucket, context bucket)
Cell = tuple[int, int]

#: the shortest context bucket: contexts up to this many tokens a request read so little
#: KV per step that their costs do not differ enough to learn apart
CONTEXT_FLOOR = 1536


def bucket(batch_size: int) -> int:
    """Batch-size bucket of the cost table: the next power of two."""
    return 1 << max(0, math.ceil(math.log2(max(1, batch_size))))


def context_bucket(tokens: int) -> int:
    """Context bucket of a step whose requests hold ``tokens`` computed tokens each (the
    mean): the smallest of 1536, 3072, 6144, ... (1.5 x a power of two) that holds it.
    Buckets end half-way between powers of two so that a prompt of a power-of-two
    length and its output stay in one bucket, where benchmarks and many prompts are."""
    edge = CONTEXT_FLOOR
    while tokens > edge:
        edge *= 2
    return edge


def cell_of(batch_size: int, context: int = 0) -> Cell:
    """The cell of a step with ``batch_size`` requests of ``context`` tokens each."""
    return bucket(batch_size), context_bucket(context)
