import numpy as np

from pipeline.kernels.common.hashing import mask_seeds, mix64, mix64_array, row_keys, validation_rows
from tests.conftest import binomial_tolerance
from tests.reference import splitmix64


def test_mix64_matches_reference():
    values = [0, 1, 2**63, 2**64 - 1, 123456789]
    for v in values:
        assert int(mix64(np.uint64(v))) == splitmix64(v)
    np.testing.assert_array_equal(mix64_array(np.array(values, dtype=np.uint64)),
                                  np.array([splitmix64(v) for v in values], dtype=np.uint64))


def test_row_keys_and_seeds_are_distinct_and_seed_dependent():
    keys = row_keys(np.uint64(42), 10_000)
    assert len(np.unique(keys)) == 10_000
    a, b = mask_seeds(keys, 0), mask_seeds(keys, 1)
    assert (a != b).all() and len(np.unique(a)) == 10_000


def test_validation_fraction_and_independence_from_seed():
    n = 200_000
    keys = row_keys(np.uint64(7), n)
    chosen = validation_rows(keys, 0.01)
    assert abs(chosen.mean() - 0.01) < binomial_tolerance(0.01, n)
    assert not validation_rows(keys, 0.0).any()


def test_balanced_bins_ignore_input_order_and_balance_by_size():
    from pipeline.beam.writing.planning import balanced_bins

    items = [(f"book{i:02d}", size) for i, size in enumerate([900, 100, 500, 400, 300, 300, 200, 100, 50, 50])]
    bins = balanced_bins(items, 4, size=lambda it: it[1], key=lambda it: it[0])
    assert bins == balanced_bins(items[::-1], 4, size=lambda it: it[1], key=lambda it: it[0])
    loads = sorted(sum(size for _, size in b) for b in bins)
    assert loads[-1] == 900 and loads[0] >= 600  # the largest alone, the rest within a book of each other


def test_band_hashes_equal_the_band_by_band_definition():
    """band_hashes hashes all bands at once; each band's hash is still mix64 chained over its values,
    starting from the band's index (the definition the stored candidate pairs depend on)."""
    from pipeline.kernels.text.quality import BANDS, NUM_PERM, band_hashes

    rng = np.random.default_rng(5)
    signatures = [rng.integers(0, 2**64 - 1, NUM_PERM, dtype=np.uint64, endpoint=True) for _ in range(5)]
    signatures.append(np.full(NUM_PERM, 2**64 - 1, dtype=np.uint64))  # the empty signature
    for signature in signatures:
        for bands in (BANDS, 32, 1):
            expected = []
            for band, values in enumerate(signature.reshape(bands, -1).tolist()):
                h = band
                for value in values:
                    h = splitmix64(h ^ value)
                expected.append(h)
            assert band_hashes(signature, bands) == expected
