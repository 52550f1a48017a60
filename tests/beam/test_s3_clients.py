"""Sharing boto3 clients between Beam's S3 calls (pipeline/beam/run/s3_clients.py): only on a reviewed
constructor, and only for exactly the configuration a client was built from. Real Beam S3IO on
moto's S3 server over HTTP (the `moto_endpoint` fixture of tests/conftest.py)."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("apache_beam.io.aws.clients.s3.boto3_client")

from apache_beam.io.aws import s3io  # noqa: E402
from apache_beam.io.aws.clients.s3 import boto3_client  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

import pipeline.beam  # noqa: E402,F401 - installs the sharing, as the job and its workers do
from pipeline.beam.run import s3_clients  # noqa: E402

BUCKET = "maskbeam-s3-clients"


@pytest.fixture(scope="module")
def endpoint(moto_endpoint):
    import boto3

    patch = pytest.MonkeyPatch()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        patch.setenv(key, value)
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key="a.txt", Body=b"a" * 300)
    client.put_object(Bucket=BUCKET, Key="b.txt", Body=b"b" * 300)
    yield moto_endpoint
    patch.undo()


def _options(endpoint: str, *extra: str) -> PipelineOptions:
    return PipelineOptions(["--s3_endpoint_url", endpoint, "--s3_access_key_id", "testing",
                            "--s3_secret_access_key", "testing", "--s3_region_name", "us-east-1", *extra])


def test_the_installed_beam_has_a_reviewed_s3_client_constructor():
    """Fails loudly on a Beam whose private S3 wrapper changed: review the new constructor (does it
    still build the client from the S3 options and the session alone, and keep per-download state
    on the wrapper?), then add its digest to REVIEWED_CONSTRUCTORS."""
    original = getattr(boto3_client.Client.__init__, "__wrapped__", boto3_client.Client.__init__)
    digest = s3_clients.constructor_digest(type("Unwrapped", (), {"__init__": original}))
    assert digest in s3_clients.REVIEWED_CONSTRUCTORS, (
        f"apache_beam.io.aws.clients.s3.boto3_client.Client.__init__ changed (sha256 {digest}): review it")
    settings = s3_clients.settings_digest()
    assert settings in s3_clients.REVIEWED_CLIENT_SETTINGS, (
        f"the functions Beam's S3 client takes its settings from changed (sha256 {settings}): review "
        f"{', '.join(s3_clients.CLIENT_SETTINGS)}")
    assert s3_clients.reuse_s3_clients() is True
    assert boto3_client.Client.__init__.__wrapped__ is original


def test_a_reviewed_constructor_with_changed_client_settings_is_left_alone(monkeypatch, caplog):
    """From Beam 2.78 the constructor hands its options to `client_options`: a Beam that changes
    where the settings come from there, under the same constructor, keeps its own clients."""
    original = getattr(boto3_client.Client.__init__, "__wrapped__", boto3_client.Client.__init__)
    same_constructor = type("SameConstructor", (), {"__init__": original})
    monkeypatch.setattr(s3_clients, "REVIEWED_CLIENT_SETTINGS", {"0" * 64: "another Beam"})
    with caplog.at_level(logging.WARNING, logger="maskbeam.beam"):
        assert s3_clients.reuse_s3_clients(same_constructor) is False
    assert "client settings" in caplog.text and "not ones MaskBeam reviewed" in caplog.text
    assert same_constructor.__init__ is original


def test_a_changed_constructor_is_left_alone_with_a_warning(caplog):
    """A Beam whose wrapper builds its client differently must keep its own clients, never get one
    built by another constructor (the old check accepted any function named __init__)."""

    class ChangedClient:  # what a future Beam's wrapper might look like
        def __init__(self, options):
            self.client = object()
            self.extra = options

    with caplog.at_level(logging.WARNING, logger="maskbeam.beam"):
        assert s3_clients.reuse_s3_clients(ChangedClient) is False
    assert "not one MaskBeam reviewed" in caplog.text
    first, second = ChangedClient({}), ChangedClient({})
    assert first.client is not second.client


def test_clients_are_shared_only_for_the_same_configuration(endpoint, monkeypatch):
    first, second = s3io.S3IO(options=_options(endpoint)), s3io.S3IO(options=_options(endpoint))
    assert first.client.client is second.client.client and first.client is not second.client
    assert first.client._download_stream is None and second.client._download_pos == 0
    other_region = s3io.S3IO(options=_options(endpoint, "--s3_region_name", "eu-west-1"))
    assert other_region.client.client is not first.client.client
    # boto3 reads AWS_* variables when it builds a session: another environment, another client (the
    # old key, 8 option names, handed the client built under the first environment)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "7")
    changed_env = s3io.S3IO(options=_options(endpoint))
    assert changed_env.client.client is not first.client.client
    assert changed_env.client.client.meta.config.retries["total_max_attempts"] == 7
    # the dict form of the options (Beam's other call style) is keyed the same way
    as_dict = s3io.S3IO(options=_options(endpoint).get_all_options())
    assert as_dict.client.client is changed_env.client.client
    # botocore reads the CA bundle too (and the proxies, and HOME's ~/.aws): not AWS_*, keyed all the same
    before = s3_clients.configuration(_options(endpoint))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/another/ca-bundle.pem")
    assert s3_clients.configuration(_options(endpoint)) != before


def test_the_aws_options_beam_builds_s3_clients_from_key_them_too(endpoint):
    """Beam 2.78's S3 client takes the --aws_* options as defaults under the --s3_* ones: a run
    whose --aws_region_name differs gets a client of its own region (the key of --s3_* names alone
    handed it the client built for the first)."""
    from apache_beam.options import pipeline_options

    if not hasattr(pipeline_options, "AwsOptions"):
        pytest.skip("this Beam builds its S3 client from the --s3_* options alone")
    flags = ["--s3_endpoint_url", endpoint, "--s3_access_key_id", "testing", "--s3_secret_access_key", "testing"]
    first = s3io.S3IO(options=PipelineOptions([*flags, "--aws_region_name", "us-east-1"]))
    other = s3io.S3IO(options=PipelineOptions([*flags, "--aws_region_name", "eu-west-1"]))
    assert first.client.client is not other.client.client
    assert (first.client.client.meta.region_name, other.client.client.meta.region_name) == ("us-east-1", "eu-west-1")
    assert s3io.S3IO(options=PipelineOptions([*flags, "--aws_region_name", "eu-west-1"])).client.client is (
        other.client.client)


def test_a_shared_client_reads_and_keeps_two_downloads_apart(endpoint):
    first, second = s3io.S3IO(options=_options(endpoint)), s3io.S3IO(options=_options(endpoint))
    assert first.client.client is second.client.client
    assert second.exists(f"s3://{BUCKET}/a.txt")
    with first.open(f"s3://{BUCKET}/a.txt") as one, second.open(f"s3://{BUCKET}/b.txt") as two:
        assert one.read(100) == b"a" * 100 and two.read(100) == b"b" * 100
        assert one.read(100) == b"a" * 100
