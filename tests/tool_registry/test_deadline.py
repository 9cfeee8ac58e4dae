"""A ``Deadline`` gives each wait ``asyncio.timeout_at``'s meaning: every scenario runs
with both, and ends the same way, the task's cancel requests left as they were."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from tool_registry import Deadline

pytestmark = pytest.mark.anyio
T = TypeVar("T")
SOON = 0.1  # a deadline that passes during a wait that never ends

Within = Callable[[Awaitable[Any]], Awaitable[Any]]


def _theirs(when: float) -> Within:
    async def within(awaitable: Awaitable[T]) -> T:
        async with asyncio.timeout_at(when):
            return await awaitable

    return within


async def _sleep_then(seconds: float, value: str) -> str:
    await asyncio.sleep(seconds)
    return value


async def _at_once(value: str) -> str:
    await asyncio.sleep(0)  # suspends once, as a wait does
    return value


async def _never() -> str:
    """A wait that outlasts any deadline here (bounded, so a deadline that never comes
    fails the test instead of hanging it)."""
    await asyncio.sleep(300 * SOON)
    return "the deadline never came"


async def _past(when: float) -> None:
    """Until the deadline has passed: a timer due after it (which fires after its)."""
    passed = asyncio.Event()
    asyncio.get_running_loop().call_at(when + SOON / 10, passed.set)
    await passed.wait()


async def _fails() -> None:
    await asyncio.sleep(0)
    raise ValueError("the wait's own error")


async def _outcome(scenario: Callable[[Within, float], Awaitable[Any]], ours: bool) -> Any:
    """How ``scenario`` ends, with the task's cancel requests left after it. Waits that
    end do so at once; those meant to outlast the deadline never end, so that no
    ending depends on how loaded the machine is."""
    loop = asyncio.get_running_loop()
    when = loop.time() + SOON
    deadline = Deadline(when)
    within: Within = deadline.within if ours else _theirs(when)
    task = asyncio.current_task()
    assert task is not None
    try:
        result: Any = ("returned", await scenario(within, when))
    except BaseException as exc:  # the outcome is what is compared
        result = ("raised", type(exc).__name__)
    finally:
        deadline.close()
    return result, task.cancelling()


async def _in_time(within: Within, when: float) -> Any:
    return await within(_at_once("in time"))


async def _too_long(within: Within, when: float) -> Any:
    return await within(_never())


async def _several_then_too_long(within: Within, when: float) -> Any:
    answers = [await within(_at_once(f"wait {i}")) for i in range(3)]
    answers.append(await within(_never()))
    return answers


async def _passed_between_waits(within: Within, when: float) -> Any:
    first = await within(_at_once("first"))
    await _past(when)  # no wait in progress when it passes
    return first, await within(_at_once("second"))


async def _own_error(within: Within, when: float) -> Any:
    return await within(_fails())


async def _the_error_then_a_wait(within: Within, when: float) -> Any:
    with contextlib.suppress(ValueError):
        await within(_fails())
    return await within(_at_once("after the error"))


async def _cancelled_from_elsewhere(within: Within, when: float) -> Any:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().call_soon(task.cancel)  # long before the deadline
    return await within(_never())


async def _cancelled_as_it_passes(within: Within, when: float) -> Any:
    """A cancellation from elsewhere at the deadline's own moment stays a cancellation."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().call_at(when, task.cancel)
    return await within(_never())


SCENARIOS = [
    _in_time,
    _too_long,
    _several_then_too_long,
    _passed_between_waits,
    _own_error,
    _the_error_then_a_wait,
    _cancelled_from_elsewhere,
    _cancelled_as_it_passes,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__.strip("_"))
async def test_each_wait_ends_as_under_timeout_at(
    scenario: Callable[[Within, float], Awaitable[Any]],
) -> None:
    theirs = await asyncio.create_task(_outcome(scenario, ours=False))
    ours = await asyncio.create_task(_outcome(scenario, ours=True))
    assert ours == theirs


async def test_the_expected_endings() -> None:
    """What the scenarios above come to (so that both cannot be wrong alike)."""
    ends = {s.__name__: (await asyncio.create_task(_outcome(s, ours=True)))[0] for s in SCENARIOS}
    assert ends["_in_time"] == ("returned", "in time")
    assert ends["_too_long"] == ("raised", "TimeoutError")
    assert ends["_several_then_too_long"] == ("raised", "TimeoutError")
    assert ends["_passed_between_waits"] == ("raised", "TimeoutError")
    assert ends["_own_error"] == ("raised", "ValueError")
    assert ends["_the_error_then_a_wait"] == ("returned", "after the error")
    assert ends["_cancelled_from_elsewhere"] == ("raised", "CancelledError")
    assert ends["_cancelled_as_it_passes"] == ("raised", "CancelledError")


async def test_a_closed_deadline_cancels_nothing_later() -> None:
    loop = asyncio.get_running_loop()
    when = loop.time() + SOON
    deadline = Deadline(when)
    assert await deadline.within(_at_once("done")) == "done"
    deadline.close()
    await _past(when)  # not cancelled on the way
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_one_wait_at_a_time() -> None:
    deadline = Deadline(asyncio.get_running_loop().time() + 10)
    first = asyncio.create_task(deadline.within(_sleep_then(SOON, "first")))
    await asyncio.sleep(0)
    second = _at_once("second")
    with pytest.raises(RuntimeError, match="one task at a time"):
        await deadline.within(second)
    second.close()
    assert await first == "first"
    deadline.close()
