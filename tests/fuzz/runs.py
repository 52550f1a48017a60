"""Two runs of each property test: the fixed regression set (derandomized: the same examples every
run, so a regression shows at once and a fix is checked against the same inputs) and a randomized
run seeded from MASKBEAM_FUZZ_SEED, else from the clock, so each CI run tries new inputs. A failure
of the randomized run carries a note with its seed: `MASKBEAM_FUZZ_SEED=<seed> python -m pytest ...`
runs the same examples again."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, seed, settings

FUZZ_SEED = int(os.environ.get("MASKBEAM_FUZZ_SEED") or time.time_ns() % 2**32)


@dataclass(frozen=True)
class FuzzRun:
    name: str
    examples: int
    randomized: bool

    def settings(self, test: Callable) -> Callable:
        """`test` (a @given function) with this run's settings (and, randomized, its seed)."""
        wrapped = settings(max_examples=self.examples, deadline=None, derandomize=not self.randomized, database=None,
                           suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                  HealthCheck.data_too_large])(test)
        return seed(FUZZ_SEED)(wrapped) if self.randomized else wrapped

    def run(self, test: Callable) -> None:
        """Run `test` (a @given function taking no other argument) with this run's settings."""
        try:
            self.settings(test)()
        except BaseException as error:
            if self.randomized:
                error.add_note(f"randomized fuzz run: MASKBEAM_FUZZ_SEED={FUZZ_SEED} reproduces it")
            raise


def fuzz_runs(fixed: int, randomized: int) -> list:
    """pytest params `fixed` (the regression set, `fixed` examples) and `random` (`randomized` examples)."""
    return [pytest.param(FuzzRun("fixed", fixed, False), id="fixed"),
            pytest.param(FuzzRun("random", max(1, randomized), True), id="random")]
