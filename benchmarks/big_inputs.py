"""Peak memory of the preprocess job on single huge inputs: a 2 GB plain-text book, the same book
gzipped, and a 2 GB `.jsonl.zst` (Pile-style records), each run alone.

    python -m benchmarks.big_inputs [--corpus DIR] [--tokenizer PATH] [--gb 2] [--folder DIR] [--out FILE.json]

The text is the books of --corpus (default: the bundled sample) repeated up to the size; each input is made
once in the folder and reused. For every input the job runs with two local workers (the default)
and the peak RSS of the whole process tree (launcher and workers), sampled every 50 ms, is
reported with the wall time and throughput. The target is under 1.5 GB for each input.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.corpus import corpus_files
from benchmarks.procmon import run_measured
from pipeline.sample import SAMPLE_BOOKS, SAMPLE_TOKENIZER

TARGET_PEAK_MB = 1536


def _book_text(books: list[Path]) -> bytes:
    return b"\n\n".join(path.read_bytes() for path in books)


def make_inputs(folder: Path, size: int, corpus: Path) -> dict[str, Path]:
    """The three inputs of about `size` bytes of text each (made once)."""
    import zstandard

    folder.mkdir(parents=True, exist_ok=True)
    text = _book_text(corpus_files(corpus))
    paths = {"txt": folder / "book.txt", "txt.gz": folder / "book.txt.gz", "jsonl.zst": folder / "records.jsonl.zst"}
    if not paths["txt"].exists():
        with open(paths["txt"], "wb") as handle:
            while handle.tell() < size:
                handle.write(text)
                handle.write(b"\n\n")
    if not paths["txt.gz"].exists():
        with open(paths["txt"], "rb") as source, gzip.open(paths["txt.gz"], "wb", compresslevel=1) as sink:
            shutil.copyfileobj(source, sink, 1 << 22)
    if not paths["jsonl.zst"].exists():
        paragraphs = [p for p in text.decode("utf-8", "replace").split("\n\n") if p.strip()]
        records = "".join(json.dumps({"text": "\n\n".join(paragraphs[i:i + 40])}) + "\n"
                          for i in range(0, len(paragraphs), 40)).encode()
        written = 0
        with open(paths["jsonl.zst"], "wb") as raw, zstandard.ZstdCompressor(level=3).stream_writer(raw) as sink:
            while written < size:
                sink.write(records)
                written += len(records)
    return paths


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default=str(SAMPLE_BOOKS))
    parser.add_argument("--tokenizer", default=str(SAMPLE_TOKENIZER))
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument("--folder")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    folder = Path(args.folder or tempfile.mkdtemp(prefix="maskbeam-big-"))
    paths = make_inputs(folder, int(args.gb * 2**30), Path(args.corpus))
    tokenizer = args.tokenizer
    results = {}
    for name, path in paths.items():
        out = folder / f"out-{name}"
        measured = run_measured([sys.executable, "-m", "jobs.preprocess", "--input", str(path), "--output", str(out),
                                 "--tokenizer", str(tokenizer), "--masking", "dynamic", "--overwrite"],
                                cwd=str(Path(__file__).resolve().parents[1]))
        manifest = json.loads((out / "manifest.json").read_text())
        text_mb = manifest["counts"]["characters"] / 1e6
        results[name] = {"input_mb": path.stat().st_size / 1e6, "characters_m": text_mb,
                         "tokens_m": manifest["counts"]["tokens"] / 1e6, "peak_rss_mb": round(measured.peak_rss_mb),
                         "wall_s": round(measured.wall_s, 1), "mchars_per_s": round(text_mb / measured.wall_s, 1),
                         "under_target": measured.peak_rss_mb < TARGET_PEAK_MB}
        print(json.dumps({name: results[name]}), flush=True)
        shutil.rmtree(out)
    record = {"date": datetime.date.today().isoformat(), "gb": args.gb, "target_peak_mb": TARGET_PEAK_MB,
              "inputs": results}
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    main()
