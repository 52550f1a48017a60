"""Where the local runner's memory goes on many small inputs: every buffer it holds between stages.

    python -m benchmarks.buffer_sizes --files 2000 [--folder DIR]

Beam's FnApiRunner holds each stage's whole output (encoded, in a ListBuffer) and each GroupByKey's
whole input (decoded Python values, in a GroupingBuffer) until the consuming stage runs. This runs
`jobs.preprocess` in this process on the local runner (threads) on `benchmarks.many_files`' inputs,
with the runner's buffers counted as they fill: for every buffer its transform, elements, encoded
bytes and (for a GroupByKey) the deep size of its decoded values, estimated from a sample; and the
process's RSS before and after every stage's bundle. It prints the buffers by size, bytes an input,
and the stages in order with the RSS they end at (one JSON line each with --json).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

SAMPLE = 200  # decoded values weighed per GroupByKey buffer


def _patch_runner(records: dict, stages: list) -> None:
    import objsize
    from apache_beam.runners.portability.fn_api_runner import execution, fn_runner

    grouping_append = execution.GroupingBuffer.append
    list_append = execution.ListBuffer.append
    get_buffer = execution.BundleContextManager.get_buffer

    def record_of(buffer) -> dict:
        return records.setdefault(id(buffer), {"name": getattr(buffer, "_probe_name", "?"), "kind": "",
                                               "elements": 0, "bytes": 0, "sample": []})

    def tagged_get_buffer(self, buffer_id, transform_id):
        buffer = get_buffer(self, buffer_id, transform_id)
        if not hasattr(buffer, "_probe_name"):
            kind, name = execution.split_buffer_id(buffer_id)
            transforms = self.execution_context.pipeline_components.transforms
            label = transforms[name].unique_name if name in transforms else name
            if kind == "materialize":
                label = self.process_bundle_descriptor.transforms[transform_id].unique_name \
                    if transform_id in self.process_bundle_descriptor.transforms else transform_id
            buffer._probe_name = f"{kind}: {label}"
            record_of(buffer)["kind"] = kind
        return buffer

    def counted_grouping_append(self, elements_data):
        record = record_of(self)
        before = sum(len(v) for v in self._table.values())
        grouping_append(self, elements_data)
        record["bytes"] += len(elements_data)
        record["elements"] += sum(len(v) for v in self._table.values()) - before
        if len(record["sample"]) < SAMPLE and self._table:
            values = next(reversed(self._table.values()))
            record["sample"].append(objsize.get_deep_size(values[-1]) + 8)  # + its slot in the key's list
        record["keys"] = len(self._table)

    def counted_list_append(self, element):
        record = record_of(self)
        record["bytes"] += len(element)
        record["elements"] += 1
        list_append(self, element)

    execute = fn_runner.FnApiRunner._execute_bundle

    def timed_execute(self, context, manager, bundle_input):
        rss = psutil.Process().memory_info().rss
        started = time.process_time()
        try:
            return execute(self, context, manager, bundle_input)
        finally:
            stages.append({"stage": manager.stage.name[:90], "rss_before_mb": round(rss / 2**20),
                           "rss_after_mb": round(psutil.Process().memory_info().rss / 2**20),
                           "python_blocks_k": sys.getallocatedblocks() // 1000,
                           "cpu_s": round(time.process_time() - started, 2)})

    execution.GroupingBuffer.append = counted_grouping_append
    execution.ListBuffer.append = counted_list_append
    execution.BundleContextManager.get_buffer = tagged_get_buffer
    fn_runner.FnApiRunner._execute_bundle = timed_execute


def measure(files: int, folder: Path, job_args: list[str]) -> dict:
    from benchmarks.many_files import write_inputs
    from jobs import preprocess
    from pipeline.sample import SAMPLE_TOKENIZER

    records: dict = {}
    stages: list = []
    _patch_runner(records, stages)
    write_inputs(folder / "in", files)
    shutil.rmtree(folder / "out", ignore_errors=True)
    preprocess.run(["--input", str(folder / "in"), "--output", str(folder / "out"), "--tokenizer",
                    str(SAMPLE_TOKENIZER), "--max_seq_length", "128", "--progress_seconds", "600",
                    "--direct_running_mode=multi_threading", *job_args])
    buffers = []
    for record in records.values():
        sample = record.pop("sample")
        if sample:
            record["decoded_mb"] = round(sum(sample) / len(sample) * record["elements"] / 2**20, 1)
        record["encoded_mb"] = round(record.pop("bytes") / 2**20, 2)
        record["bytes_per_input"] = round(record["encoded_mb"] * 2**20 / files)
        buffers.append(record)
    buffers.sort(key=lambda r: -max(r["encoded_mb"], r.get("decoded_mb", 0)))
    return {"files": files, "buffers": buffers, "stages": stages,
            "peak_rss_mb": max(s["rss_after_mb"] for s in stages)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--folder", help="where the inputs (in/) and the output (out/) go (default: a temp folder)")
    parser.add_argument("--top", type=int, default=25, help="buffers printed")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("job_args", nargs="*", help="more jobs.preprocess options (after --)")
    args = parser.parse_args(argv)
    random.seed(0)
    folder = Path(args.folder or tempfile.mkdtemp(prefix="maskbeam-buffers-"))
    out = measure(args.files, folder, args.job_args)
    if args.json:
        print(json.dumps(out))
        return out
    print(f"{args.files} files; peak RSS after a bundle {out['peak_rss_mb']} MB")
    print(f"{'encoded MB':>10} {'decoded MB':>10} {'B/input':>8} {'elements':>9}  buffer")
    for r in out["buffers"][:args.top]:
        print(f"{r['encoded_mb']:>10} {r.get('decoded_mb', ''):>10} {r['bytes_per_input']:>8} {r['elements']:>9}  "
              f"{r['name'][:110]}")
    print(f"\n{'RSS MB':>7} {'blocks k':>8} {'cpu s':>6}  stage")
    for s in out["stages"]:
        print(f"{s['rss_after_mb']:>7} {s['python_blocks_k']:>8} {s['cpu_s']:>6}  {s['stage']}")
    return out


if __name__ == "__main__":
    main()
