"""The settings raygents gives the processes it owns, and leaves every other process without."""

from __future__ import annotations

import gc

from raygents.runtime.link.process import tune_collector


def test_the_collector_of_a_process_that_is_not_an_actor_is_left_alone() -> None:
    before = (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled())
    tune_collector()
    assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == before
