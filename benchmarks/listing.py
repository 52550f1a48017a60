"""The launcher with many small inputs: listing time, memory, and the size of the job graph that
carries the listed units (Dataflow refuses graphs over about 10 MB).

    python -m benchmarks.listing [--files 100000] [--folder DIR]

Creates the files (a short paragraph each) unless the folder already holds them, then times the
launcher's `expand_inputs` (it checks the patterns and counts the inputs for progress) and sizes
the serialized pipeline proto of the preprocess job (not run): as built (the workers list the
files; the graph carries the patterns) and, for comparison, with the listed units embedded.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import apache_beam as beam

from pipeline.beam.reading.work_units import expand_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.transforms import Preprocess
from pipeline.sample import SAMPLE_TOKENIZER
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.spec import TokenizerSpec


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
    started = time.perf_counter()
    units = expand_inputs([str(folder)])
    listed = time.perf_counter() - started
    spec = TokenizerSpec.from_json(resolve_tokenizer_json(str(SAMPLE_TOKENIZER)))
    config = PreprocessConfig(inputs=(str(folder),), output=str(folder) + "-out", tokenizer=str(SAMPLE_TOKENIZER))
    sizes = {}
    for name, kwargs in (("patterns", {"units": [], "patterns": [str(folder)]}), ("embedded_units", {"units": units})):
        pipeline = beam.Pipeline()
        _ = pipeline | Preprocess(spec=spec, config=config, local_workers=2, **kwargs)
        started = time.perf_counter()
        sizes[name] = (len(pipeline.to_runner_api().SerializeToString()), time.perf_counter() - started)
    result = {"files": len(units), "listing_s": listed, "graph_mb": sizes["patterns"][0] / 1e6,
              "graph_s": sizes["patterns"][1], "graph_mb_if_units_embedded": sizes["embedded_units"][0] / 1e6,
              "launcher_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
