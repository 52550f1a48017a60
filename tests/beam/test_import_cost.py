"""The preprocess launcher's fixed costs: what it imports (Beam without pandas, and never torch,
transformers or datasets: each is tenths of a CPU-second of every job's fixed cost, or more), and
its end (the command line leaves without the interpreter's teardown)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "bson", "pymongo", "torch", "transformers", "datasets", "scipy.linalg")
_LAUNCHER = f"""
import sys
import jobs.preprocess
from pipeline.beam.run import job
from pipeline.beam import transforms
import apache_beam
loaded = sorted(name for name in {HEAVY!r} if name in sys.modules)
import pandas, pymongo  # still importable once Beam is in
print(loaded, pandas.DataFrame({{"a": [1]}}).shape, pymongo.ASCENDING)
"""


def test_the_launcher_imports_beam_without_pandas_and_no_heavy_library():
    done = subprocess.run([sys.executable, "-c", _LAUNCHER], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[] (1, 1) 1", done.stdout


_ENTRY_POINT = """
import atexit, sys, threading, time
from jobs.preprocess import exit_without_teardown


class Teardown:
    def __del__(self):  # run by the interpreter's teardown of this module, never by exit_without_teardown
        sys.stdout.write("teardown\\n")
        sys.stdout.flush()


kept = Teardown()
atexit.register(lambda: sys.stdout.write("atexit\\n"))


def late():
    time.sleep(0.3)
    sys.stdout.write("thread\\n")


def entry():
    threading.Thread(target=late).start()  # not a daemon: waited for, as at any exit
    sys.stdout.write("buffered\\n")  # stdout is a pipe: block-buffered, flushed on the way out
    code = sys.argv[1]
    raise SystemExit(int(code) if code.isdigit() else None if code == "none" else code)


exit_without_teardown(entry)
"""


@pytest.mark.parametrize("code, status, stderr", [("3", 3, ""), ("none", 0, ""), ("no rows made", 1, "no rows made\n")])
def test_the_command_line_ends_as_sys_exit_does_without_the_teardown(code, status, stderr):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-c", _ENTRY_POINT, code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (status, "buffered\nthread\natexit\n", stderr)


_CONSOLE = """
import sys
from jobs.cli import console


class Teardown:
    def __del__(self):  # run by the interpreter's teardown, never by exit_without_teardown
        sys.stdout.write("teardown\\n")


kept = Teardown()
sys.argv = ["maskbeam", *sys.argv[1:]]
console()
"""


@pytest.mark.parametrize("job, torn_down", [("preprocess", False), ("validate", True)])
def test_the_console_script_ends_preprocess_without_the_teardown(job, torn_down):
    """`maskbeam preprocess` (the console script `jobs.cli:console`) skips the teardown as `python -m
    jobs.preprocess` does; the other jobs end the ordinary way."""
    import configparser

    scripts = configparser.ConfigParser()
    scripts.read(REPO / "setup.cfg")
    assert "jobs.cli:console" in scripts["options.entry_points"]["console_scripts"]
    done = subprocess.run([sys.executable, "-c", _CONSOLE, job, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--output" in done.stdout or "usage" in done.stdout
    assert done.stdout.endswith("teardown\n") == torn_down, done.stdout[-200:]


LAZY = ("pyarrow.compute", "tqdm", "boto3", "botocore", "beartype", "huggingface_hub", "requests", "httplib2",
        "urllib3")
# Beam's type checks, where its own rules do not decide calling beartype's is_subhint (raising for a
# non-hint: False), as a job's process answers them after its run and as plain Beam does.
_CONSISTENT = """
import typing
from apache_beam.typehints.typehints import is_consistent_with
pairs = [(bool, int), (int, str), (1, int), (typing.List[int], typing.Sequence[int]), (str, typing.Any),
         (typing.Dict[str, int], typing.Mapping[str, int]), (bytes, str), ("not a hint", int)]
print([is_consistent_with(sub, base) for sub, base in pairs], "beartype" in sys.modules)
"""
# requests and httplib2 are deferred while Beam imports (beam_import): Beam's modules that hold them
# get the real modules' objects on first use, and a later `import` gives the real module.
_DEFERRED_FORWARD = """
from apache_beam.internal import http_client
from apache_beam.io.gcp import gce_metadata_util
import requests, httplib2
from pipeline.beam.run.beam_import import DeferredModule
assert type(gce_metadata_util.requests) is DeferredModule and type(requests) is not DeferredModule
assert gce_metadata_util.requests.exceptions.RequestException is requests.exceptions.RequestException
assert isinstance(http_client.get_new_http(), httplib2.Http)
import pickle
assert pickle.loads(pickle.dumps(gce_metadata_util.requests)) is requests
"""
_SMALL_JOB = f"""
import sys
from jobs import preprocess
preprocess.run(sys.argv[1:])
print(sorted(name for name in {LAZY!r} if name in sys.modules))
{_DEFERRED_FORWARD}
{_CONSISTENT}
"""


def test_a_small_job_imports_no_library_it_does_not_use(tmp_path):
    """Each is a few hundredths to a tenth of a CPU-second of every job's start, for what a job on
    local files with no bar and no --push_to_hub never uses: pyarrow.compute (`FixedSizeListArray.
    flatten` imports it), tqdm (the console's log lines, without a bar), boto3 (Beam's S3 wrapper),
    beartype (Beam's type checks beyond its own rules), huggingface_hub (publishing), requests and
    httplib2 (Beam's GCE metadata lookup and HTTP client)."""
    book = tmp_path / "book.txt"
    book.write_text("It was a bright cold day in April, and the clocks were striking thirteen. " * 400)
    done = subprocess.run([sys.executable, "-c", _SMALL_JOB, "--input", str(book), "--output", str(tmp_path / "out")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)  # the embedded bert-base-uncased
    assert done.returncode == 0, done.stderr[-2000:]
    loaded, consistent = done.stdout.strip().splitlines()[-2:]
    assert loaded == "[]", done.stdout
    assert (tmp_path / "out" / "manifest.json").exists()
    # beartype is a stand-in while Beam imports (beam_import): the same answers as plain Beam's, the
    # hints beartype refuses (its exception) included, beartype imported by the first that needs it
    beam = subprocess.run([sys.executable, "-c", "import sys\n" + _CONSISTENT], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert beam.returncode == 0, beam.stderr[-2000:]
    assert consistent == beam.stdout.strip().splitlines()[-1] and consistent.endswith("True"), (consistent, beam.stdout)


_S3_AFTER_DEFERRED_BOTO3 = """
import sys
import pipeline.beam
from apache_beam.io.aws.clients.s3 import boto3_client
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

before = "boto3" in sys.modules
FileSystems.set_options(PipelineOptions(["--s3_endpoint_url", sys.argv[1], "--s3_access_key_id", "testing",
                                         "--s3_secret_access_key", "testing", "--s3_region_name", "us-east-1"]))
with FileSystems.create(sys.argv[2] + "/written.txt") as handle:
    handle.write(b"through Beam's S3 wrapper")
with FileSystems.open(sys.argv[2] + "/written.txt") as handle:
    data = handle.read()
print(before, "boto3" in sys.modules, data.decode(), hasattr(boto3_client.Client.__init__, "__wrapped__"))
"""


def test_beams_s3_filesystem_imports_boto3_on_its_first_client(moto_endpoint):
    """boto3 is deferred while Beam imports (see beam_import): Beam's S3 support must still work, boto3
    coming in with the first client, and the clients still shared (s3_clients)."""
    import boto3

    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
    boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                 region_name="us-east-1").create_bucket(Bucket="maskbeam-deferred-boto3")
    done = subprocess.run([sys.executable, "-c", _S3_AFTER_DEFERRED_BOTO3, moto_endpoint,
                           "s3://maskbeam-deferred-boto3"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False True through Beam's S3 wrapper True", done.stdout



_ANNOTATIONS = """
import sys
if sys.argv[1] == "beam-first":
    import apache_beam  # a program that imported Beam before MaskBeam's Beam layer
import pipeline.beam  # noqa: F401
import apache_beam as beam
from apache_beam.typehints.decorators import TypeCheckError


def keep(name: int) -> bool:  # an annotation that does not match the elements: Beam 2.78 resolves it
    return bool(name)


def build(step):
    p = beam.Pipeline()
    try:
        _ = p | beam.Create(["a"]) | "Make" >> beam.Map(lambda s: s.upper()).with_output_types(str) | step
    except TypeCheckError:
        return "refused"
    return "built"


print(build(beam.Filter(keep)), build(beam.Filter(lambda s: bool(s)).with_input_types(int)))
"""


@pytest.mark.parametrize("order", ["beam-first", "maskbeam-first"])
def test_beam_takes_no_element_types_from_annotations(order):
    """Beam 2.78 began resolving string annotations into type hints: a MaskBeam step annotated
    `UnitResult | SpillRef` behind one whose output Beam types `object` stopped every job with a
    TypeCheckError. After `pipeline.beam` is imported (before or after Beam), annotations give no
    element types, as under Beam 2.77 and older; hints declared with `with_input_types` still count."""
    done = subprocess.run([sys.executable, "-c", _ANNOTATIONS, order], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "built refused", done.stdout
