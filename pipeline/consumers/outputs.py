"""Read what a preprocess run wrote: the manifest, the shard list, the tokenizer copy and the
masking rule, so consumers need nothing but the output folder.

An output folder may come from anyone (a colleague, a download): everything here treats it as
untrusted. The manifest is validated (schemas.manifest.validate_manifest) before any number in it
sizes anything, shard paths come only from the validated shard-name template, and a shard is read
only after its size and sha256 match the manifest (verify_shard)."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.kernels.rows.masking import MaskingRule
from pipeline.storage import filesystem
from pipeline.tokenizer.spec import TokenizerSpec
from schemas import manifest as m
from schemas import options as o

MAX_TOKENIZER_BYTES = 256 * 1024 * 1024  # the largest published tokenizer.json files are ~35 MB
_HASH_CHUNK = 8 * 1024 * 1024


class NotAnOutput(FileNotFoundError):
    """The folder is not a complete MaskBeam output."""


class BadManifest(NotAnOutput, m.ManifestError):
    """The folder's manifest.json is not one MaskBeam wrote (invalid JSON, a missing key, a value of
    the wrong type or out of range, a shard name outside the template)."""


class ShardMismatch(ValueError):
    """A shard's file is not the one its manifest describes (size or sha256 differ, or not a file)."""


def load_manifest(directory: str) -> dict:
    """The validated manifest of a complete output.

    Raises:
        NotAnOutput: when the folder does not exist or has no manifest.json (the run did not finish).
        BadManifest: when the manifest is not one MaskBeam writes (see schemas.manifest.validate_manifest).
    """
    path = filesystem.join(directory, m.MANIFEST_FILE)
    if not filesystem.exists(path):
        if filesystem.is_local(directory) and not os.path.exists(directory):
            raise NotAnOutput(f"{directory!r} does not exist")
        raise NotAnOutput(f"{directory!r} has no {m.MANIFEST_FILE}: not a complete MaskBeam output")
    check_regular_file(path, BadManifest)
    size = filesystem.size(path)
    if size > m.MAX_MANIFEST_BYTES:
        raise BadManifest(f"{path}: {size:,} bytes, over the {m.MAX_MANIFEST_BYTES:,} a manifest may hold")
    try:
        return m.parse_manifest(filesystem.read_bytes(path))
    except m.ManifestError as error:
        raise BadManifest(f"{path}: {error}") from None


class BadInputsFile(BadManifest):
    """The folder's INPUTS_FILE is missing, holds a line MaskBeam did not write, or is not the file
    the manifest names (its size, sha256 or lines per section differ)."""


def input_entries(directory: str, manifest: dict | None = None) -> Iterator[tuple[str, dict]]:
    """(section, entry) of every input record the output lists (read, skipped, duplicates,
    near-duplicate pairs), streamed from its INPUTS_FILE (a version-1 output: from its manifest).
    The file is checked as it is read; a file other than the one the manifest names raises once its
    last line is read: a consumer that acts on the entries takes them all before it acts.

    Raises:
        BadInputsFile: naming the file, the line and what is wrong.
    """
    if manifest is None:
        manifest = load_manifest(directory)
    path = filesystem.join(directory, m.INPUTS_FILE)
    if m.KEY_INPUTS_FILE not in manifest:
        yield from m.input_entries(manifest, None)
        return
    if not filesystem.exists(path):
        raise BadInputsFile(f"{path}: missing (the manifest names it: it lists every input read or skipped)")
    check_regular_file(path, BadInputsFile)
    try:
        with filesystem.open_binary(path) as handle:
            yield from m.input_entries(manifest, m.handle_lines(handle))
    except m.InputsFileError as error:
        raise BadInputsFile(f"{directory}/{error}") from None


def manifest_with_inputs(directory: str, manifest: dict | None = None) -> dict:
    """The manifest with every input record in its sections (m.INPUT_SECTIONS as keys, lists as
    values: the shape of a version-1 manifest), read and checked from INPUTS_FILE. Holds them all:
    for reports of a size a person reads, and tests.

    Raises:
        BadInputsFile: as input_entries.
    """
    if manifest is None:
        manifest = load_manifest(directory)
    sections: dict[str, list[dict]] = {section: [] for section in m.INPUT_SECTIONS}
    for section, entry in input_entries(directory, manifest):
        sections[section].append(entry)
    return {**manifest, **sections}


def shard_paths(directory: str, manifest: dict, split: str) -> list[str]:
    """The shard files of a split, in order: the folder joined with names the manifest's schema
    allows (the writer's template only), so no name leads outside `directory/split`."""
    if split not in manifest[m.KEY_SPLITS]:
        raise ValueError(f"split {split!r} not in {sorted(manifest[m.KEY_SPLITS])}")
    shards = manifest[m.KEY_SPLITS][split][m.KEY_SHARDS]
    return [filesystem.join(directory, split, m.check_shard_filename(s[m.KEY_FILENAME], i, len(shards)))
            for i, s in enumerate(shards)]


def shard_entries(directory: str, manifest: dict, split: str) -> list[tuple[str, dict]]:
    """(path, manifest entry) of every shard of a split."""
    return list(zip(shard_paths(directory, manifest, split), manifest[m.KEY_SPLITS][split][m.KEY_SHARDS]))


def check_regular_file(path: str, error: type[Exception] = ShardMismatch) -> None:
    """A local path must be a regular file: a FIFO or a device would block or never end."""
    if filesystem.is_local(path):
        local = path[len("file://"):] if path.startswith("file://") else path
        try:
            mode = os.stat(local).st_mode
        except OSError as problem:
            raise error(f"{path}: cannot be read ({problem.strerror})") from None
        if not stat.S_ISREG(mode):
            raise error(f"{path}: not a regular file")


def verify_shard(path: str, entry: dict) -> None:
    """Check a shard's size, then its sha256 (streamed), against its manifest entry before anyone
    reads or publishes it: a file swapped in (a link to a secret, another dataset's shard) is refused.

    Raises:
        ShardMismatch: naming the file and what differs.
    """
    if not filesystem.exists(path):
        raise ShardMismatch(f"{path}: missing (listed in the manifest)")
    check_regular_file(path)
    size = filesystem.size(path)
    if size != entry[m.KEY_BYTES]:
        raise ShardMismatch(f"{path}: {size:,} bytes, the manifest says {entry[m.KEY_BYTES]:,}")
    digest = hashlib.sha256()
    with filesystem.open_binary(path) as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != entry[m.KEY_SHA256]:
        raise ShardMismatch(f"{path}: sha256 {digest.hexdigest()[:16]}... does not match the manifest's "
                            f"{entry[m.KEY_SHA256][:16]}...")


def verified_shard_paths(directory: str, manifest: dict, split: str) -> list[str]:
    """shard_paths, each checked with verify_shard first."""
    paths = []
    for path, entry in shard_entries(directory, manifest, split):
        verify_shard(path, entry)
        paths.append(path)
    return paths


def check_ids(where: str, values, vocab_size: int) -> None:
    """Raise ShardMismatch unless every id lies in [0, vocab_size): what a table indexed by id (or a
    bincount) needs before it is touched. `values`: an integer numpy array."""
    if values.size and (int(values.min()) < 0 or int(values.max()) >= vocab_size):
        raise ShardMismatch(f"{where}: ids outside [0, {vocab_size}): [{int(values.min())}, {int(values.max())}]")


def first_outside(values: np.ndarray, vocab_size: int, ignore: int | None = None) -> tuple[int, int] | None:
    """(row, position) of the first value of `values` (shape (n, L)) outside [0, vocab_size) and not
    `ignore`, or None: two reductions when every value lies inside, the search only when one does not."""
    if not values.size or (int(values.min()) >= 0 and int(values.max()) < vocab_size):
        return None
    bad = (values < 0) | (values >= vocab_size)
    if ignore is not None:
        bad &= values != ignore
    if not bad.any():
        return None
    row, position = np.argwhere(bad)[0]
    return int(row), int(position)


def outside_error(path: str, row: int, column: str, value: int, position: int, vocab_size: int) -> ShardMismatch:
    return ShardMismatch(f"{path}: row {row}: {column} holds {value} at position {position}, outside the "
                         f"vocabulary [0, {vocab_size}) (the shard is not one MaskBeam wrote for this tokenizer)")


def check_id_rows(path: str, column: str, values: np.ndarray, vocab_size: int, first_row: int = 0,
                  ignore: int | None = None) -> None:
    """Raise ShardMismatch naming the shard, the row and the value unless every id of `values`
    (shape (n, L): rows first_row.. of the shard at `path`) lies in [0, vocab_size), `ignore`
    (IGNORE_INDEX for labels) excepted: what an embedding, a loss's targets, a table indexed by id
    or a bincount needs before it is touched."""
    found = first_outside(values, vocab_size, ignore)
    if found is not None:
        row, position = found
        raise outside_error(path, first_row + row, column, int(values[row, position]), position, vocab_size)


def check_no_nulls(path: str, columns: dict, first_row: int = 0) -> None:
    """Raise ShardMismatch naming the shard, the column and the first row holding a null (a row, or
    a value inside a fixed-size list): MaskBeam writes none, and a reader would see whatever bytes
    lie under it. `columns`: {name: pyarrow Array or ChunkedArray}."""
    for name, column in columns.items():
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        nulls = pc.is_null(array).to_numpy(zero_copy_only=False)
        if isinstance(array.type, pa.FixedSizeListType) and array.values.null_count:
            width = array.type.list_size
            inner = pc.is_null(array.values).to_numpy(zero_copy_only=False)
            nulls = nulls | inner[array.offset * width: (array.offset + len(array)) * width].reshape(-1, width).any(1)
        if nulls.any():
            raise ShardMismatch(f"{path}: row {first_row + int(np.argmax(nulls))}: {name} is null "
                                "(the shard is not one MaskBeam wrote)")


def masking_rule(manifest: dict) -> MaskingRule:
    """The masking rule the data was made with, from the (validated) manifest alone."""
    tok, config = manifest[m.KEY_TOKENIZER], manifest[m.KEY_CONFIG]
    return MaskingRule.from_ids(tok[m.KEY_VOCAB_SIZE], tok[m.KEY_NEVER_SELECTED], tok[m.KEY_NEVER_REPLACEMENT],
                                tok[m.KEY_SPECIAL_IDS][m.KEY_MASK_ID], config[o.MLM_PROBABILITY],
                                config[o.MASK_REPLACE_PROB], config[o.RANDOM_REPLACE_PROB],
                                unit=config.get(o.MASKING_UNIT, o.UNIT_TOKEN),
                                continuation_ids=tok.get(m.KEY_CONTINUATION, []),
                                span_p=config.get(o.SPAN_P, o.DEFAULT_SPAN_P),
                                max_span=config.get(o.MAX_SPAN, o.DEFAULT_MAX_SPAN))


class TokenizerMismatch(NotAnOutput):
    """The output's tokenizer.json is not the tokenizer its manifest names (another file put there)."""


def tokenizer_spec(directory: str, manifest: dict | None = None) -> TokenizerSpec:
    """The tokenizer copy stored with the data (checked like any tokenizer file: TokenizerSpec.from_json),
    which must be the tokenizer the manifest names (same sha256): a tokenizer.json swapped in the
    folder would decode, inspect and train with other ids than the data's. `manifest`: the folder's,
    when the caller has it loaded already (else it is loaded here).

    Raises:
        NotAnOutput: no manifest or no tokenizer.json; TokenizerMismatch: another tokenizer.json.
    """
    if manifest is None:
        manifest = load_manifest(directory)
    path = filesystem.join(directory, m.TOKENIZER_FILE)
    if not filesystem.exists(path):
        raise NotAnOutput(f"{directory!r} has no {m.TOKENIZER_FILE}")
    check_regular_file(path, NotAnOutput)
    if filesystem.size(path) > MAX_TOKENIZER_BYTES:
        raise NotAnOutput(f"{path}: over the {MAX_TOKENIZER_BYTES:,} bytes a tokenizer file may hold")
    spec = TokenizerSpec.from_json(filesystem.read_text(path))
    expected = manifest[m.KEY_TOKENIZER][m.KEY_SHA256]
    if spec.fingerprint != expected:
        raise TokenizerMismatch(f"{path}: sha256 {spec.fingerprint[:16]}... is not the tokenizer the manifest "
                                f"names ({expected[:16]}...): the file was replaced; put back the tokenizer.json "
                                f"the data was made with")
    return spec
