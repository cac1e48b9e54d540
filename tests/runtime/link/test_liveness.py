"""Beats: the coordinator's table and the actor-side loop lag."""

from __future__ import annotations

import asyncio
import time

from raygents.runtime.link.liveness import Beater, Beats


def test_beats_report_age_and_lag_until_forgotten() -> None:
    beats = Beats()
    assert beats.of("a") is None
    beats.beat("a", 0.25)
    found = beats.of("a")
    assert found is not None
    age, lag = found
    assert 0 <= age < 1 and lag == 0.25
    beats.forget("a")
    assert beats.of("a") is None
    beats.forget("a")  # forgetting twice is fine


def test_the_loop_lag_grows_until_the_loop_runs_the_callback() -> None:
    loop = asyncio.new_event_loop()
    try:
        beater = Beater(loop, lambda lag: None, every_s=1.0, busy=lambda: True)
        assert beater.lag() == 0.0  # asks the loop for a callback
        time.sleep(0.05)
        assert beater.lag() >= 0.05  # the loop has not run it: it is not running
        loop.run_until_complete(asyncio.sleep(0))
        assert beater.lag() == 0.0  # it ran: asks again
    finally:
        loop.close()


def test_a_closed_loop_ends_the_beats() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    sent: list[float] = []
    beater = Beater(loop, sent.append, every_s=0.01, busy=lambda: True)
    beater.start()
    beater.thread.join(timeout=5)
    assert not beater.thread.is_alive() and sent == []
