"""The closing summary's advice on a validation split that drew no row (issue 36 item 3): it told to
raise --validation_fraction 0.05 "e.g. 0.05", and said so on 0 rows, where there was nothing to draw."""

from __future__ import annotations

import pytest

from pipeline.beam.run.summary import WANTED_VALIDATION_ROWS, validation_advice


@pytest.mark.parametrize("fraction", [0.001, 0.01, 0.05, 0.2])
@pytest.mark.parametrize("rows", [4, 10, 137, 999, 100_000])
def test_a_suggested_fraction_is_larger_than_the_given_one_and_expects_a_few_rows(fraction, rows):
    advice = validation_advice(fraction, rows)
    assert advice.startswith(f" (--validation_fraction {fraction} of {rows:,} rows drew none"), advice
    if "e.g. " in advice:
        wanted = float(advice.split("e.g. ")[1].split(",")[0])
        assert fraction < wanted < 1 and wanted * rows >= WANTED_VALIDATION_ROWS, advice
    else:
        assert "raise it for a validation split" in advice and fraction * rows >= WANTED_VALIDATION_ROWS, advice


def test_no_advice_without_rows_to_draw_from_or_a_fraction():
    assert validation_advice(0.05, 0) == "" and validation_advice(0.0, 100) == ""
    assert validation_advice(0.05, 3).endswith("too few rows for a validation split)")
