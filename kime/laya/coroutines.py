"""Running a hook's coroutine to completion from synchronous code, inside or outside a running
event loop: Laya 0.4.15's `laya.hooks.run_coroutine_sync` (re-exported there as here)."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Awaitable, Optional

if TYPE_CHECKING:  # asyncio costs a third of `import kime`: imported where a hook needs it
    import asyncio

_LOOP: Optional["asyncio.AbstractEventLoop"] = None
_THREAD: Optional[threading.Thread] = None
_LOOP_LOCK = threading.Lock()


def _background_loop() -> "asyncio.AbstractEventLoop":
    """The one background loop, started on first use (and again if its thread ended).

    Its thread is alive from `start()` on, but the loop runs a moment later: deciding on
    `is_running()` let two callers arriving together each start a loop, one of which leaked.
    The thread decides, and the first caller waits until the loop runs."""
    import asyncio

    global _LOOP, _THREAD
    with _LOOP_LOCK:
        if _LOOP is None or _THREAD is None or not _THREAD.is_alive():
            loop = asyncio.new_event_loop()
            running = threading.Event()
            loop.call_soon(running.set)
            thread = threading.Thread(target=loop.run_forever, daemon=True,
                                      name="kime-async-hooks")
            thread.start()
            running.wait()
            _LOOP, _THREAD = loop, thread
        return _LOOP


def run_coroutine_sync(coro: Awaitable[Any],
                       loop: Optional["asyncio.AbstractEventLoop"] = None) -> Any:
    """Run an awaitable to completion from synchronous code.

    With no loop running in this thread it uses `asyncio.run`; inside a running loop (an async
    caller) the coroutine goes to a background loop, so blocking on it cannot deadlock. `loop`
    picks a loop to run on; it must be running, and not in this thread.
    """
    import asyncio

    if loop is not None:
        try:
            running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        problem = ("the loop passed is not running" if not loop.is_running() else
                   "the loop passed is running in the calling thread; blocking on it would "
                   "deadlock" if loop is running else None)
        if problem:
            if asyncio.iscoroutine(coro):
                coro.close()
            raise ValueError("run_coroutine_sync: " + problem)
        return asyncio.run_coroutine_threadsafe(_awaited(coro), loop).result()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(coro))
    return asyncio.run_coroutine_threadsafe(_awaited(coro), _background_loop()).result()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


__all__ = ["run_coroutine_sync"]
