"""The launcher with many small inputs: listing time, memory, and the size of the job graph that
carries the listed units (Dataflow refuses graphs over about 10 MB).

    python -m benchmarks.listing [--files 100000] [--folder DIR]

Creates the files (a short paragraph each, all in one folder: the streamed listing's worst case, a
folder's names held at once) unless the folder already holds them; then the launcher's listing as
it runs now, streamed (`InputListing` into `ListingFacts`: the counts and the progress index) and as
a list (`expand_inputs`), each timed and its peak of Python memory traced in a second pass; and sizes
the serialized pipeline proto of the preprocess job (not run): as built (the workers list the
files; the graph carries the patterns) and, for comparison, with the listed units embedded.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path

import apache_beam as beam

from pipeline.beam.reading.listed_inputs import InputListing
from pipeline.beam.reading.work_units import expand_inputs, iter_split_large_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.run.job import ListingFacts
from pipeline.beam.transforms import Preprocess
from pipeline.sample import SAMPLE_TOKENIZER
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.spec import TokenizerSpec


def _timed_and_traced(run) -> tuple[float, int]:
    """Seconds of `run()`, then the peak of Python memory (tracemalloc) of a second run."""
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    tracemalloc.start()
    try:
        run()
        return seconds, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--folder")
    args = parser.parse_args(argv)
    folder = Path(args.folder or tempfile.mkdtemp(prefix="maskbeam-listing-"))
    folder.mkdir(parents=True, exist_ok=True)
    if len(list(folder.glob("*.txt"))) < args.files:
        for i in range(args.files):
            (folder / f"doc{i:07d}.txt").write_text(f"Document {i}. A short paragraph of text for the listing test.\n")
    out = str(folder) + "-out"
    streamed_s, streamed_peak = _timed_and_traced(
        lambda: ListingFacts.of(iter_split_large_inputs(InputListing([str(folder)], out), 1 << 27), 1 << 27))
    listed, list_peak = _timed_and_traced(lambda: expand_inputs([str(folder)]))
    units = expand_inputs([str(folder)])
    spec = TokenizerSpec.from_json(resolve_tokenizer_json(str(SAMPLE_TOKENIZER)))
    config = PreprocessConfig(inputs=(str(folder),), output=out, tokenizer=str(SAMPLE_TOKENIZER))
    sizes = {}
    for name, kwargs in (("patterns", {"units": [], "patterns": [str(folder)]}), ("embedded_units", {"units": units})):
        pipeline = beam.Pipeline()
        _ = pipeline | Preprocess(spec=spec, config=config, local_workers=2, **kwargs)
        started = time.perf_counter()
        sizes[name] = (len(pipeline.to_runner_api().SerializeToString()), time.perf_counter() - started)
    result = {"files": len(units), "listing_s": listed, "list_peak_mb": list_peak / 1e6,
              "streamed_listing_s": streamed_s, "streamed_peak_mb": streamed_peak / 1e6,
              "graph_mb": sizes["patterns"][0] / 1e6,
              "graph_s": sizes["patterns"][1], "graph_mb_if_units_embedded": sizes["embedded_units"][0] / 1e6,
              "launcher_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
