"""Beam runner options for the jobs: the offline local runner by default, runner aliases, a local
Dask cluster, and strict flag checking (Beam itself only warns about an unknown flag)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import hashlib
import importlib
import inspect
import logging
import os
import sys
import threading
from collections.abc import Iterable

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipeline.console.arguments import unrecognized

LOCAL_RUNNER = "FnApiRunner"
LOCAL_RUNNERS = ("FnApiRunner", "DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")
_log = logging.getLogger("maskbeam.runner")


# A job reading at most this much (uncompressed files) runs on one in-process worker: the parallel
# workers' own cost (gRPC servers and channels in this process, or worker processes that import
# everything again; every bundle sent over the data plane) is ~0.5 CPU-seconds of every run, more than
# a second core saves on tokenizing 16 MB (~0.3 s at the job's ~30 MB per CPU-second).
ONE_WORKER_BYTES = 16 << 20


def local_runner_defaults(beam_args: list[str], prefer_threads: bool = False, one_worker: bool = False) -> list[str]:
    """Unless the user chose, run locally on the FnApiRunner (never Prism, which downloads a binary).
    With `one_worker` (a small job, see ONE_WORKER_BYTES) and no worker flag given: one worker in
    this process (Beam's `in_memory` mode: no gRPC, no worker process). Otherwise one worker per
    core: threads when `prefer_threads` (the fast tokenizer and the masking kernels release the GIL,
    and threads start in no time), else processes. The output is the same in every mode."""
    given = " ".join(beam_args)
    extra = []
    if "--runner" not in given:
        extra.append(f"--runner={LOCAL_RUNNER}")
        if one_worker and "--direct_num_workers" not in given and "--direct_running_mode" not in given:
            extra += ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
        else:
            if "--direct_num_workers" not in given:
                extra.append("--direct_num_workers=0")
            if "--direct_running_mode" not in given:
                extra.append(f"--direct_running_mode={'multi_threading' if prefer_threads else 'multi_processing'}")
    if "--default_sdk_harness_log_level" not in given:
        extra.append("--default_sdk_harness_log_level=WARNING")
    return beam_args + extra


# sha256 of `inspect.getsource(apache_beam.utils.interactive_utils.is_in_ipython)` of the Beam releases
# whose probe was read: it imports IPython and returns whether `get_ipython()` gives a shell, False on
# an ImportError or any other error, and has no other effect.
REVIEWED_IPYTHON_PROBES = {
    "caf08d14497267f62f9c7a16babb806e82a0e733276d0b181915caad77da503f": "apache-beam 2.77, 2.78",
}
_probe_lock = threading.Lock()
_probe_users = [0]
_probe_swaps: list[tuple[object, object]] = []  # (module, Beam's probe) of each module given ours


def probe_digest(probe) -> str | None:
    """sha256 of a function's source; None when it cannot be read."""
    try:
        return hashlib.sha256(inspect.getsource(probe).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def _install_fast_probe() -> None:
    """Give every loaded Beam module that holds Beam's `is_in_ipython` (by name, as `pipeline.py` and
    the direct runner import it) one that answers False at once in a process that has not imported
    IPython, and asks Beam's otherwise. Only for a probe whose source is a reviewed one."""
    from apache_beam.utils import interactive_utils

    original = interactive_utils.is_in_ipython
    if probe_digest(original) not in REVIEWED_IPYTHON_PROBES:
        _log.debug("Beam's is_in_ipython (sha256 %s) is not one MaskBeam reviewed: left as it is (each "
                   "transform then imports IPython where it is installed)", probe_digest(original))
        return

    def is_in_ipython() -> bool:
        return "IPython" in sys.modules and original()

    is_in_ipython.__wrapped__ = original
    for name, module in list(sys.modules.items()):
        if (name == "apache_beam" or name.startswith("apache_beam.")) and \
                getattr(module, "is_in_ipython", None) is original:
            module.is_in_ipython = is_in_ipython
            _probe_swaps.append((module, original))


@contextlib.contextmanager
def outside_ipython():
    """Beam asks whether it runs in IPython at every transform it applies, by importing IPython:
    0.7 s of a job's start where IPython is installed. A process that has not imported IPython is
    not running in it, so while the job's graph is built and run, Beam's probe itself answers that
    at once (`_install_fast_probe`); nothing else changes: any thread may import IPython meanwhile,
    and then the probe asks Beam's as before. Restored when the last job using it leaves."""
    with _probe_lock:
        if _probe_users[0] == 0:
            _install_fast_probe()
        _probe_users[0] += 1
    try:
        yield
    finally:
        with _probe_lock:
            _probe_users[0] -= 1
            if _probe_users[0] == 0:
                for module, original in _probe_swaps:
                    module.is_in_ipython = original
                _probe_swaps.clear()


DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


def runner_aliases(beam_args: list[str]) -> list[str]:
    """`--runner DaskRunner` is short for Beam's dotted path of the Dask runner."""
    out = list(beam_args)
    for i, arg in enumerate(out):
        if arg == "--runner=DaskRunner":
            out[i] = f"--runner={DASK_RUNNER}"
        elif arg == "--runner" and i + 1 < len(out) and out[i + 1] == "DaskRunner":
            out[i + 1] = DASK_RUNNER
    return out


@contextlib.contextmanager
def dask_cluster(n_workers: int | None):
    """With --dask_local_workers N: a local dask.distributed cluster of N worker processes (one
    thread each) for the run, closed afterwards; yields the Beam flags that point at it."""
    if not n_workers:
        yield []
        return
    from distributed import LocalCluster

    # The scheduler runs in this process: its INFO chatter follows our console level, not dask's.
    logging.getLogger("distributed").setLevel(max(logging.getLogger().getEffectiveLevel(), logging.INFO))
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=max(logging.getLogger().getEffectiveLevel(), logging.INFO)) as cluster:
        _log.info("local Dask cluster: %d workers at %s", n_workers, cluster.scheduler_address)
        try:
            yield [f"--runner={DASK_RUNNER}", f"--dask_client_address={cluster.scheduler_address}"]
        finally:
            close_dask_client()


def close_dask_client() -> None:
    """Beam's DaskRunner leaves its dask.distributed client open after the job; once the cluster
    closes, that client keeps trying to reconnect and logs connection errors at exit."""
    try:
        from distributed import default_client
    except ImportError:
        return
    with contextlib.suppress(ValueError):
        default_client().close()


def dask_defaults(beam_args: list[str], local_workers: int | None) -> list[str]:
    """For a local Dask cluster of N workers, 2N dask.Bag partitions unless the user chose: Beam's
    default of 128 elements a partition hands a small corpus to one worker, and one unit (book) a
    partition costs more in Dask overhead than it gains (measured in benchmarks/README.md)."""
    given = " ".join(beam_args)
    if not local_workers or "--dask_npartitions" in given or "--dask_partition_size" in given:
        return beam_args
    return beam_args + [f"--dask_npartitions={2 * local_workers}"]


def tokenizer_threads(options: PipelineOptions, requested: int | None = None) -> int | None:
    """The `tokenizers` (Rust rayon) thread pool size of each SDK worker process.

    `requested` (--tokenizer_threads) wins. Local worker processes share the cores out; threads in
    one local process share one pool (None: the library's default). Every other runner (Dataflow,
    Flink, Spark, Dask, portable) starts about one SDK process per core, each of which would
    otherwise start a pool of one thread per core: 1 thread each.
    """
    if requested:
        return requested
    workers = local_worker_count(options)
    if workers is None:
        return 1
    if options.view_as(DirectOptions).direct_running_mode != "multi_processing":
        return None
    return max(1, (os.cpu_count() or 1) // workers)


def local_worker_count(options: PipelineOptions) -> int | None:
    """Worker processes/threads of a local run (FnApiRunner/DirectRunner), None for other runners."""
    runner = options.view_as(StandardOptions).runner or ""
    if runner.rsplit(".", 1)[-1] not in LOCAL_RUNNERS:
        return None
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "in_memory":
        return 1
    return direct.direct_num_workers or os.cpu_count() or 1


def use_filesystem_options(beam_args: list[str]) -> None:
    """Let the launcher's own reads and listings (inputs, output folder, resume) use the filesystem
    options on the command line (`--s3_endpoint_url`, credentials, GCS project...), as the workers
    will: without this, `s3://` inputs on a custom endpoint cannot even be listed."""
    from apache_beam.io.filesystems import FileSystems

    FileSystems.set_options(PipelineOptions(beam_args))


def _options_parser(beam_args: list[str]) -> argparse.ArgumentParser:
    """One parser holding every flag PipelineOptions and its subclasses know (a runner given as a
    dotted path is imported first, so its own options register)."""
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    for i, arg in enumerate(beam_args):
        value = arg.split("=", 1)[1] if arg.startswith("--runner=") else (
            beam_args[i + 1] if arg == "--runner" and i + 1 < len(beam_args) else "")
        if "." in value:
            with contextlib.suppress(ImportError):  # check_beam_options names an unknown runner
                importlib.import_module(value.rsplit(".", 1)[0])
    parser = _BeamArgumentParser(add_help=False, conflict_handler="resolve", allow_abbrev=False, exit_on_error=False)
    pending, seen = [PipelineOptions], set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        pending.extend(cls.__subclasses__())
        try:
            cls._add_argparse_args(parser)
        except (argparse.ArgumentError, TypeError, ValueError):
            continue
    return parser


def check_beam_options(beam_args: list[str], job_flags: Iterable[str] = ()) -> None:
    """Refuse, before anything is written, what Beam would take only at run time (or warn about and
    ignore): an unknown flag, a value its option does not accept, a runner Beam does not know.
    An unknown flag is named with the closest of Beam's flags and `job_flags` (the job's own, without
    dashes: `--mlm_probabilty` is the job's `--mlm_probability` mistyped, not a Beam option).

    Raises:
        ValueError: naming the flag or runner (and the closest known flag or runner name).
    """
    parser = _options_parser(beam_args)
    known = {opt.lstrip("-") for action in parser._actions for opt in action.option_strings}
    unknown = [a for a in beam_args if a.startswith("--") and a.split("=")[0].lstrip("-") not in known]
    if unknown:
        raise ValueError(unrecognized(unknown, known | set(job_flags)))
    try:
        parsed, _ = parser.parse_known_args(beam_args)
    except argparse.ArgumentError as error:
        raise ValueError(str(error)) from None
    if getattr(parsed, "runner", None):
        check_runner(parsed.runner)


def check_runner(name: str) -> None:
    """Resolve `name` as Beam does (`create_runner`: a known name, case-insensitive, with or without the
    `Runner` suffix, or a dotted path) without starting anything.

    Raises:
        ValueError: for a name Beam would refuse, with the closest known names.
    """
    from apache_beam.runners.runner import _RUNNER_MAP

    resolved = _RUNNER_MAP.get(name.lower(), _RUNNER_MAP.get(name.lower() + "runner", name))
    if "." not in resolved:
        names = sorted(StandardOptions.KNOWN_RUNNER_NAMES)
        close = difflib.get_close_matches(name, names + [LOCAL_RUNNER, "DaskRunner"], n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise ValueError(f"--runner {name!r} is not a Beam runner; {hint}known runners: {', '.join(names)} "
                         f"(or the dotted path of a PipelineRunner class)")
    module, cls = resolved.rsplit(".", 1)
    try:
        found = getattr(importlib.import_module(module), cls, None)
    except ImportError as error:
        raise ValueError(f"--runner {name}: cannot import {module} ({error})") from None
    if found is None:
        raise ValueError(f"--runner {name}: {module} has no {cls}")
