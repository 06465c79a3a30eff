"""Decoding large request bodies off the event loop, one at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from taguru_server.store.errors import ApiError

T = TypeVar("T")

OFF_LOOP_BYTES = 64 * 1024
"""Bodies from this size on are decoded on the decoder thread; below it the hand-off costs more than the decode."""

# One decoder thread: the JSON parser holds the interpreter lock for its whole run (~90 ms for 4 MB), so
# several at once would stack those pauses in front of the event loop; one at a time bounds the wait to one.
DECODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="taguru-decode")


async def decode_body(body: bytes, decode: Callable[[], T]) -> T:
    """Run `decode` (a pure function of `body`) inline for a small body, on the decoder thread for a large one."""
    if len(body) < OFF_LOOP_BYTES:
        return decode()
    return await asyncio.get_running_loop().run_in_executor(DECODER, uncollected, decode)


def uncollected(decode: Callable[[], T]) -> T:
    """A large body decodes into hundreds of thousands of cycle-free objects: no cyclic collection meanwhile
    (a full pass triggered by them would hold the interpreter lock, and so the event loop, far longer than
    the parse itself)."""
    from taguru_server.store.persist.writer import collector_paused

    with collector_paused():
        try:
            return decode()
        except ApiError as refused:
            # a refusal's traceback holds the decoding frames and so the whole decoded body: dropped here,
            # it is freed in this thread with the collector still paused, instead of surviving into the
            # event loop's thread, where those objects would make the next collections traverse them
            raise refused.with_traceback(None) from None
