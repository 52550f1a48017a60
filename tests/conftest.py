"""Shared fixtures: the real BERT tokenizer, the shared books, and real job runs (session-scoped)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from pipeline.sample import SAMPLE_BOOKS, SAMPLE_TOKENIZER
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.spec import TokenizerSpec

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MASKBEAM_SHARED", REPO.parent / "shared"))
# Tests that need particular corpus books read their excerpts in tests/data/books (`excerpt`,
# `book_cases`), in every checkout. The shared 49-book corpus when this checkout has it (CI does);
# else the embedded 3-book sample, on which every run of the whole corpus runs too. Only the
# whole-book variants of the full tier (marker `corpus`) are left out without it (deselected).
EXCERPTS = REPO / "tests" / "data" / "books"
HAVE_CORPUS = (SHARED / "corpus" / "books").is_dir() and (SHARED / "tokenizers" / "bert-base-uncased").is_dir()
BOOKS = SHARED / "corpus" / "books" if HAVE_CORPUS else SAMPLE_BOOKS
TOKENIZER_DIR = SHARED / "tokenizers" / "bert-base-uncased" if HAVE_CORPUS else SAMPLE_TOKENIZER
HTML_PAGES = ("classics__humphry_clinker.txt", "philosophy__tractatus.txt", "poetry__spoon_river_anthology.txt")
# A few small real books (and one HTML page) for the runs that compare several configurations.
SMALL_BOOKS = (
    "classics__yellow_wallpaper.txt",
    "drama__importance_of_being_earnest.txt",
    "drama__doctor_faustus.txt",
    "specialized_texts__ponies_past_and_present.txt",
    "classics__humphry_clinker.txt",
) if HAVE_CORPUS else tuple(sorted(p.name for p in SAMPLE_BOOKS.glob("*.txt")))


if os.environ.get("PYTEST_XDIST_WORKER"):
    # One worker per core already keeps the cores busy: torch's own thread pool in each worker (and in
    # the processes its tests start) would only make them wait on each other.
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (setup.cfg): one test worker per core this process may use (its CPU affinity, which a
    container or `taskset` narrows), not per physical core as pytest-xdist would count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def pytest_collection_modifyitems(config, items):
    # Modules with end-to-end runs first (in their order), so that the workers of `--dist loadfile`
    # finish on short modules rather than wait for one long module started last.
    slow_modules = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow_modules)
    if HAVE_CORPUS:
        return
    # The whole-book variants of tests that also run on their excerpts: not tests of a checkout
    # without the corpus, so left out (pytest's summary counts them as deselected), never skipped.
    whole_books = [item for item in items if item.get_closest_marker("corpus")]
    if whole_books:
        config.hook.pytest_deselected(items=whole_books)
        items[:] = [item for item in items if not item.get_closest_marker("corpus")]


def corpus_book(name: str) -> Path:
    """A book of the shared corpus by file name; skips the test where only the sample is present."""
    path = BOOKS / name
    if not path.is_file():
        pytest.skip(f"needs {name} of the shared corpus (not found under {SHARED}; set MASKBEAM_SHARED)")
    return path


def excerpt(name: str) -> Path:
    """The excerpt of a corpus book in tests/data/books (tests/data/README.md: where each is cut and
    why it has its size): the same bytes in every checkout, with or without the shared corpus."""
    path = EXCERPTS / name
    if not path.is_file():
        raise FileNotFoundError(f"no excerpt {path}: add its cut to tests/data/make_books.py and run it")
    return path


class Book(NamedTuple):
    """A test's book: its excerpt (`whole=False`, every tier and checkout) or the whole corpus book."""

    name: str
    whole: bool

    @property
    def path(self) -> Path:
        return corpus_book(self.name) if self.whole else excerpt(self.name)


def book_cases(*names: str) -> list:
    """Parameters for a test that reads books: each book's excerpt, and the whole book of the shared
    corpus in the full tier (markers `slow` and `corpus`)."""
    stem = lambda name: name.split("__")[-1].removesuffix(".txt")
    return ([pytest.param(Book(name, False), id=stem(name)) for name in names]
            + [pytest.param(Book(name, True), id=f"{stem(name)}-whole", marks=(pytest.mark.slow, pytest.mark.corpus))
               for name in names])


@pytest.fixture(scope="session")
def spec() -> TokenizerSpec:
    return TokenizerSpec.from_json(resolve_tokenizer_json(str(TOKENIZER_DIR)))


@pytest.fixture(scope="session")
def rule(spec):
    return spec.masking_rule(0.15, 0.8, 0.1)


@pytest.fixture(scope="session")
def bert_fast():
    from transformers import BertTokenizerFast

    return BertTokenizerFast(tokenizer_file=str(TOKENIZER_DIR / "tokenizer.json"))


@pytest.fixture(scope="session")
def small_books(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("small_books")
    for name in SMALL_BOOKS:
        shutil.copy(corpus_book(name), folder / name)
    return folder


def run_preprocess(inputs, output, *extra: str, tokenizer: Path = TOKENIZER_DIR):
    from jobs.preprocess import run

    argv = [a for path in inputs for a in ("--input", str(path))]
    argv += ["--output", str(output), "--tokenizer", str(tokenizer), *extra]
    return run(argv)


@pytest.fixture(scope="session")
def static_full(tmp_path_factory) -> Path:
    """The whole shared corpus (the embedded sample where it is absent), default options (static masking)."""
    out = tmp_path_factory.mktemp("static_full") / "out"
    run_preprocess([BOOKS], out)
    return out


@pytest.fixture(scope="session")
def dynamic_full(tmp_path_factory) -> Path:
    """The whole shared corpus (the embedded sample where it is absent), dynamic masking, everything in
    train (so books can be reassembled)."""
    out = tmp_path_factory.mktemp("dynamic_full") / "out"
    run_preprocess([BOOKS], out, "--masking", "dynamic", "--validation_fraction", "0")
    return out


@pytest.fixture(scope="session")
def moto_endpoint() -> str:
    """moto's S3 server over HTTP on localhost (no network), one per test session: its endpoint URL.
    Clients need `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (any value) and this endpoint."""
    pytest.importorskip("boto3")
    import socket

    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def binomial_tolerance(p: float, n: int, z: float = 5.0) -> float:
    """z standard deviations of a proportion estimated from n Bernoulli(p) trials."""
    return z * float(np.sqrt(p * (1 - p) / n))
