"""`gc_paused` turns the collector off inside a block, back on after the outermost block that found it
on, also when the block raises, and leaves it off where the caller had turned it off."""

from __future__ import annotations

import gc

import pytest

from pipeline.tokenizer.gc_pause import gc_paused
from pipeline.tokenizer.parsed import parsed, release_parses


def test_nested_blocks_and_errors_leave_the_collector_as_found():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block found it off
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("a malformed file")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # the caller's choice kept
    finally:
        gc.enable()


def test_a_parse_that_fails_turns_the_collector_back_on():
    with pytest.raises(ValueError):
        parsed('{"model": ')
    assert gc.isenabled()
    release_parses()
