"""Output layout, file names, the manifest format and the `datasets` side files (state, info, dict)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator

from schemas import options as o
from schemas.shard import MASKING_MODES, MIN_SEQ_LEN, id_dtype_for_vocab

MANIFEST_VERSION = 2  # 2: the per-input records in INPUTS_FILE; 1: inside the manifest (still read)
OLDEST_MANIFEST_VERSION = 1
MANIFEST_FILE = "manifest.json"
# Beside the manifest: one JSON line per input record (its section, then the entry the manifest's
# section of that name held in version 1), sections in INPUT_SECTIONS order, each sorted by path.
INPUTS_FILE = "inputs.jsonl"
DATASET_DICT_FILE = "dataset_dict.json"
STATE_FILE = "state.json"
DATASET_INFO_FILE = "dataset_info.json"
TEMP_DIR = ".maskbeam-tmp"
SHARD_NAME_TEMPLATE = "data-{index:05d}-of-{count:05d}.arrow"
PARTIAL_SUFFIX = ".partial"

TRAIN = "train"
VALIDATION = "validation"
SPLITS = (TRAIN, VALIDATION)

TARGET_SHARD_BYTES = 256 * 1024 * 1024

# Count names, shared by the per-input results, the Beam metrics and the manifest.
FILES_READ = "files_read"
FILES_SKIPPED = "files_skipped"
FILES_SKIPPED_BY_REASON = "files_skipped_by_reason"
RECORDS_SKIPPED = "records_skipped"
DOCUMENTS = "documents"
DOCUMENTS_TOO_SHORT = "documents_too_short"
TOKENS = "tokens"
UNK_TOKENS = "unk_tokens"
ROWS = "rows"
SHORT_ROWS_DROPPED = "short_rows_dropped"
TOKENS_DROPPED = "tokens_dropped"
REPLACED_BYTES = "replaced_bytes"
BOILERPLATE_CHARS_REMOVED = "boilerplate_chars_removed"
CHARACTERS = "characters"  # characters of cleaned text kept
KEY_BOILERPLATE_SHARE = "boilerplate_share"  # per input: share of its characters cut as header/licence
SELECTED = "selected"
MASKED = "masked"
RANDOM = "random"
UNCHANGED = "unchanged"
MASK_COUNT_NAMES = (SELECTED, MASKED, RANDOM, UNCHANGED)
INPUT_COUNT_NAMES = (
    FILES_READ,
    FILES_SKIPPED,
    RECORDS_SKIPPED,
    DOCUMENTS,
    DOCUMENTS_TOO_SHORT,
    TOKENS,
    UNK_TOKENS,
    ROWS,
    SHORT_ROWS_DROPPED,
    TOKENS_DROPPED,
    REPLACED_BYTES,
    BOILERPLATE_CHARS_REMOVED,
    CHARACTERS,
)

# Manifest keys.
KEY_VERSION = "manifest_version"
KEY_PACKAGE_VERSION = "package_version"
KEY_CONFIG = "config"
KEY_TOKENIZER = "tokenizer"
KEY_COUNTS = "counts"
KEY_SPLITS = "splits"
KEY_SKIPPED = "skipped"
KEY_INPUTS = "inputs"
KEY_SHARDS = "shards"
KEY_FILENAME = "filename"
KEY_ROWS = "rows"
KEY_BYTES = "bytes"
KEY_SHA256 = "sha256"
KEY_PATH = "path"
KEY_REASON = "reason"
KEY_SIZE = "size"  # per input: its size in bytes when read (what --resume compares)
KEY_MASK_COUNTS = "mask_counts"
KEY_PLAN = "plan_sha256"
KEY_DUPLICATES = "duplicates"
KEY_DUPLICATE_OF = "duplicate_of"
KEY_NEAR_DUPLICATES = "near_duplicates"  # [{path, near_duplicate_of, similarity}], similarity >= 0.5
KEY_NEAR_DUPLICATE_OF = "near_duplicate_of"
KEY_SIMILARITY = "similarity"
KEY_SECTION = "section"  # an INPUTS_FILE line: which section it belongs to
KEY_INPUTS_FILE = "inputs_file"  # {filename, bytes, sha256, lines: {section: count}}
KEY_LINES = "lines"
# The per-input sections, in the order INPUTS_FILE holds them.
INPUT_SECTIONS = (KEY_INPUTS, KEY_SKIPPED, KEY_DUPLICATES, KEY_NEAR_DUPLICATES)
KEY_UNK_FRACTION = "unk_fraction"  # per input: share of [UNK] among its content tokens
KEY_SCRIPTS = "scripts"  # per input: share of its letters per Unicode script
KEY_DOMINANT_SCRIPT = "dominant_script"
RUN_FILE = "run.json"  # the config of a run in progress, in TEMP_DIR (what --resume compares)
# In TEMP_DIR: the manifest a run that made no rows would have written (no manifest marks it failed).
NO_ROWS_FILE = "no_rows.json"
KEY_MASK_COUNTS_EPOCH = "mask_counts_epoch"
KEY_NEVER_SELECTED = "never_selected_ids"
KEY_NEVER_REPLACEMENT = "never_replacement_ids"
KEY_CONTINUATION = "word_continuation_ids"
KEY_MASK_ID = "mask"
KEY_SPECIAL_IDS = "special_ids"
KEY_VOCAB_SIZE = "vocab_size"
KEY_NAME_OR_PATH = "name_or_path"
TOKENIZER_FILE = "tokenizer.json"  # a copy of the tokenizer travels with the data
# Beside it, what `transformers.AutoTokenizer` reads to name the special tokens (made from the manifest).
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
TOKENIZER_FILES = (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE)
# jobs.train_tokenizer's record in its --output: what it read and skipped, and the files it wrote
# there (all that its --overwrite deletes)
TOKENIZER_RUN_FILE = "maskbeam_tokenizer.json"
KEY_TOKENIZER_RUN = "maskbeam_tokenizer"  # the record's format version
KEY_FILES = "files"


# Bounds a manifest must respect before any consumer sizes an allocation by its numbers.
MAX_VOCAB_SIZE = 1 << 21  # 2,097,152 ids (the largest published vocabularies hold ~260,000)
MAX_SEQ_LEN = 1 << 17  # tokens per row
MAX_SHARDS = 99_999  # what the five-digit shard name can count
MAX_SHARD_BYTES = 1 << 40  # 1 TiB; shards are ~256 MiB (TARGET_SHARD_BYTES)
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
MAX_COUNT = 1 << 62
_SHARD_NAME = re.compile(r"data-(\d{5})-of-(\d{5})\.arrow")
_HEX64 = re.compile(r"[0-9a-f]{64}")


class ManifestError(ValueError):
    """A manifest.json MaskBeam did not write (or one tampered with): the message names the key,
    what is expected and what was found."""


def shard_name(index: int, count: int) -> str:
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} outside [0, {count})")
    return SHARD_NAME_TEMPLATE.format(index=index, count=count)


def shard_record_name(split: str, filename: str) -> str:
    """Name (in TEMP_DIR) of the record a finished shard leaves for --resume. Callers pass names of
    the shard template only (a manifest's names are checked by validate_manifest first); `*` globs."""
    return f"shard-{split}-{filename}.json"


def dataset_info(features: dict) -> dict:
    """`dataset_info.json` as `datasets.save_to_disk` writes it."""
    return {"citation": "", "description": "", "features": features, "homepage": "", "license": ""}


def dataset_state(split: str, filenames: list[str], shard_sha256: list[str]) -> dict:
    """`state.json`; the fingerprint is derived from the shard checksums so it is deterministic."""
    fingerprint = hashlib.sha256("".join(shard_sha256).encode()).hexdigest()[:16]
    return {
        "_data_files": [{"filename": name} for name in filenames],
        "_fingerprint": fingerprint,
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": split,
    }


def dataset_dict(splits: tuple[str, ...] = SPLITS) -> dict:
    return {"splits": list(splits)}


def dumps(obj: dict) -> str:
    """The one JSON encoding of every side file: sorted keys, stable across runs."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


# ----------------------------------------------------------------------------------------------
# Validation: the one check every consumer runs on a manifest it did not just write itself.


def _fail(where: str, expected: str, value: object) -> ManifestError:
    shown = repr(value)
    return ManifestError(f"manifest {where}: expected {expected}, got {shown[:80]}{'...' if len(shown) > 80 else ''}")


def _dict(where: str, value: object) -> dict:
    if not isinstance(value, dict):
        raise _fail(where, "an object", value)
    return value


def _list(where: str, value: object, most: int | None = None) -> list:
    if not isinstance(value, list):
        raise _fail(where, "a list", value)
    if most is not None and len(value) > most:
        raise _fail(where, f"at most {most:,} entries", f"{len(value):,} entries")
    return value


def _key(where: str, obj: dict, key: str):
    if key not in obj:
        raise ManifestError(f"manifest {where}: missing {key!r}")
    return obj[key]


def _int(where: str, value: object, low: int = 0, high: int = MAX_COUNT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, "an integer", value)
    if not low <= value <= high:
        raise _fail(where, f"an integer in [{low:,}, {high:,}]", value)
    return value


def _num(where: str, value: object, low: float = 0.0, high: float = 1.0, *, open_low: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(where, "a finite number", value)
    if not (low < value if open_low else low <= value) or value > high:
        raise _fail(where, f"a number in {'(' if open_low else '['}{low:g}, {high:g}]", value)
    return float(value)


def _str(where: str, value: object) -> str:
    if not isinstance(value, str):
        raise _fail(where, "a string", value)
    return value


def _choice(where: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _fail(where, f"one of {', '.join(choices)}", value)
    return value


def _hex64(where: str, value: object) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise _fail(where, "a sha256 (64 lowercase hex digits)", value)
    return value


def check_shard_filename(filename: object, index: int, count: int, where: str = "shard") -> str:
    """The name of shard `index` of `count` is exactly what the writer names it (SHARD_NAME_TEMPLATE):
    no other name, no folder, no `..`, no absolute path or URL can reach a consumer's `join`."""
    if not isinstance(filename, str) or not _SHARD_NAME.fullmatch(filename) or filename != shard_name(index, count):
        raise _fail(f"{where} filename", f"{shard_name(index, count)!r} (shard {index} of {count})", filename)
    return filename


def min_row_bytes(seq_len: int, id_itemsize: int) -> int:
    """Bytes every row takes in a shard at least: its ids and its attention mask."""
    return seq_len * (id_itemsize + 1)


def _check_config(config: dict) -> None:
    w = "config"
    _int(f"{w}.{o.MAX_SEQ_LENGTH}", _key(w, config, o.MAX_SEQ_LENGTH), MIN_SEQ_LEN, MAX_SEQ_LEN)
    _choice(f"{w}.{o.MASKING}", _key(w, config, o.MASKING), MASKING_MODES)
    _choice(f"{w}.{o.PACKING}", _key(w, config, o.PACKING), o.PACKING_MODES)
    _choice(f"{w}.{o.MASKING_UNIT}", config.get(o.MASKING_UNIT, o.UNIT_TOKEN), o.MASKING_UNITS)
    _num(f"{w}.{o.MLM_PROBABILITY}", _key(w, config, o.MLM_PROBABILITY))
    mask = _num(f"{w}.{o.MASK_REPLACE_PROB}", _key(w, config, o.MASK_REPLACE_PROB))
    random = _num(f"{w}.{o.RANDOM_REPLACE_PROB}", _key(w, config, o.RANDOM_REPLACE_PROB))
    if mask + random > 1.0 + 1e-12:
        raise _fail(f"{w}.{o.MASK_REPLACE_PROB} + {o.RANDOM_REPLACE_PROB}", "at most 1", mask + random)
    _num(f"{w}.{o.SPAN_P}", config.get(o.SPAN_P, o.DEFAULT_SPAN_P), open_low=True)
    _int(f"{w}.{o.MAX_SPAN}", config.get(o.MAX_SPAN, o.DEFAULT_MAX_SPAN), 1, MAX_SEQ_LEN)
    _int(f"{w}.{o.SEED}", _key(w, config, o.SEED), 0, 2**64 - 1)
    _num(f"{w}.{o.MAX_UNK_FRACTION}", config.get(o.MAX_UNK_FRACTION, 1.0))
    if config.get(o.NEAR_DEDUP) is not None:
        _num(f"{w}.{o.NEAR_DEDUP}", config[o.NEAR_DEDUP], open_low=True)
    for i, script in enumerate(_list(f"{w}.{o.SCRIPTS}", config.get(o.SCRIPTS, []))):
        _str(f"{w}.{o.SCRIPTS}[{i}]", script)
    for key in ("output", "tokenizer"):
        _str(f"{w}.{key}", config.get(key, ""))
    for i, pattern in enumerate(_list(f"{w}.inputs", config.get("inputs", []))):
        _str(f"{w}.inputs[{i}]", pattern)
    if config.get("hf_dataset") is not None:
        _str(f"{w}.hf_dataset", config["hf_dataset"])
    _int(f"{w}.dupe_factor", config.get("dupe_factor", 1), 1, 1 << 20)


def _check_ids(where: str, value: object, vocab_size: int) -> None:
    for i, token_id in enumerate(_list(where, value, vocab_size)):
        _int(f"{where}[{i}]", token_id, 0, vocab_size - 1)


def _check_tokenizer(tok: dict) -> int:
    w = "tokenizer"
    vocab_size = _int(f"{w}.{KEY_VOCAB_SIZE}", _key(w, tok, KEY_VOCAB_SIZE), 1, MAX_VOCAB_SIZE)
    id_dtype = id_dtype_for_vocab(vocab_size)
    if o.KEY_ID_DTYPE in tok and tok[o.KEY_ID_DTYPE] != id_dtype.name:
        raise _fail(f"{w}.{o.KEY_ID_DTYPE}", repr(id_dtype.name), tok[o.KEY_ID_DTYPE])
    special = _dict(f"{w}.{KEY_SPECIAL_IDS}", _key(w, tok, KEY_SPECIAL_IDS))
    for role in (o.SPECIAL_CLS, o.SPECIAL_SEP, o.SPECIAL_PAD, KEY_MASK_ID):
        _int(f"{w}.{KEY_SPECIAL_IDS}.{role}", _key(f"{w}.{KEY_SPECIAL_IDS}", special, role), 0, vocab_size - 1)
    _check_ids(f"{w}.{KEY_NEVER_SELECTED}", _key(w, tok, KEY_NEVER_SELECTED), vocab_size)
    _check_ids(f"{w}.{KEY_NEVER_REPLACEMENT}", _key(w, tok, KEY_NEVER_REPLACEMENT), vocab_size)
    _check_ids(f"{w}.{KEY_CONTINUATION}", tok.get(KEY_CONTINUATION, []), vocab_size)
    _hex64(f"{w}.{KEY_SHA256}", _key(w, tok, KEY_SHA256))
    _str(f"{w}.{KEY_NAME_OR_PATH}", _key(w, tok, KEY_NAME_OR_PATH))
    return id_dtype.itemsize


def _check_counts(where: str, counts: dict, required: tuple[str, ...]) -> None:
    for name in required:
        _key(where, counts, name)
    for name, value in counts.items():
        if name == FILES_SKIPPED_BY_REASON:
            for reason, n in _dict(f"{where}.{name}", value).items():
                _int(f"{where}.{name}[{reason[:40]!r}]", n)
        else:
            _int(f"{where}.{_str(f'{where} key', name)}", value)


def _check_splits(splits: dict, row_bytes: int) -> None:
    if sorted(splits) != sorted(SPLITS):
        raise _fail(KEY_SPLITS, f"the splits {', '.join(SPLITS)}", sorted(splits))
    for split in SPLITS:
        w = f"{KEY_SPLITS}.{split}"
        info = _dict(w, splits[split])
        _check_counts(f"{w}.{KEY_MASK_COUNTS}", _dict(f"{w}.{KEY_MASK_COUNTS}", _key(w, info, KEY_MASK_COUNTS)),
                      MASK_COUNT_NAMES)
        shards = _list(f"{w}.{KEY_SHARDS}", _key(w, info, KEY_SHARDS), MAX_SHARDS)
        total = 0
        for index, entry in enumerate(shards):
            where = f"{w}.{KEY_SHARDS}[{index}]"
            entry = _dict(where, entry)
            check_shard_filename(_key(where, entry, KEY_FILENAME), index, len(shards), where)
            size = _int(f"{where}.{KEY_BYTES}", _key(where, entry, KEY_BYTES), 0, MAX_SHARD_BYTES)
            total += _int(f"{where}.{KEY_ROWS}", _key(where, entry, KEY_ROWS), 0, size // row_bytes)
            _hex64(f"{where}.{KEY_SHA256}", _key(where, entry, KEY_SHA256))
            _check_counts(f"{where}.{KEY_MASK_COUNTS}",
                          _dict(f"{where}.{KEY_MASK_COUNTS}", _key(where, entry, KEY_MASK_COUNTS)), MASK_COUNT_NAMES)
            if KEY_PLAN in entry:
                _hex64(f"{where}.{KEY_PLAN}", entry[KEY_PLAN])
        if _int(f"{w}.{KEY_ROWS}", _key(w, info, KEY_ROWS)) != total:
            raise _fail(f"{w}.{KEY_ROWS}", f"the sum of its shards' rows ({total:,})", info[KEY_ROWS])


class InputsFileError(ManifestError):
    """An INPUTS_FILE line MaskBeam did not write: the message names the line and the key."""


# Per section: the keys whose values are strings, and the keys every entry has.
_SECTION_KEYS = {
    KEY_INPUTS: ((KEY_PATH,), (KEY_PATH, TOKENS, KEY_ROWS)),
    KEY_SKIPPED: ((KEY_PATH, KEY_REASON), (KEY_PATH, KEY_REASON)),
    KEY_DUPLICATES: ((KEY_PATH, KEY_DUPLICATE_OF), (KEY_PATH, KEY_DUPLICATE_OF)),
    KEY_NEAR_DUPLICATES: ((KEY_PATH, KEY_NEAR_DUPLICATE_OF), (KEY_PATH, KEY_NEAR_DUPLICATE_OF, KEY_SIMILARITY)),
}
MAX_INPUT_LINE_BYTES = 1 << 20  # an INPUTS_FILE line (an input's record is a few hundred bytes)


def _check_entry(where: str, entry: object, section: str) -> dict:
    strings, required = _SECTION_KEYS[section]
    entry = _dict(where, entry)
    for key in required:
        _key(where, entry, key)
    for key in strings:
        if key in entry:
            _str(f"{where}.{key}", entry[key])
    for key in (TOKENS, KEY_ROWS, KEY_SIZE, UNK_TOKENS, BOILERPLATE_CHARS_REMOVED):
        if key in entry:
            _int(f"{where}.{key}", entry[key])
    for key in (KEY_UNK_FRACTION, KEY_BOILERPLATE_SHARE, KEY_SIMILARITY):
        if entry.get(key) is not None:
            _num(f"{where}.{key}", entry[key])
    for script, share in _dict(f"{where}.{KEY_SCRIPTS}", entry.get(KEY_SCRIPTS) or {}).items():
        _num(f"{where}.{KEY_SCRIPTS}[{script[:40]!r}]", share)
    return entry


def _check_entries(section: str, entries: list) -> None:
    for i, entry in enumerate(entries):
        _check_entry(f"{section}[{i}]", entry, section)


def input_line(section: str, entry: dict) -> str:
    """One INPUTS_FILE line: the entry with its section, in the one encoding (sorted keys, ASCII)."""
    return json.dumps({KEY_SECTION: section, **entry}, sort_keys=True, separators=(",", ":")) + "\n"


def input_line_order(section: str, entry: dict) -> tuple:
    """Where a line goes in INPUTS_FILE: sections in INPUT_SECTIONS order, each by path (a
    near-duplicate pair then by its earlier input), as the version-1 manifest listed them."""
    return INPUT_SECTIONS.index(section), entry[KEY_PATH], entry.get(KEY_NEAR_DUPLICATE_OF) or ""


def parse_input_line(line: str | bytes, number: int) -> tuple[str, dict]:
    """(section, entry) of INPUTS_FILE line `number` (from 1), checked as validate_manifest checks a
    version-1 manifest's entries.

    Raises:
        InputsFileError: naming the line: not JSON, too long, an unknown section, a bad entry.
    """
    where = f"{INPUTS_FILE} line {number:,}"
    if len(line) > MAX_INPUT_LINE_BYTES:
        raise InputsFileError(f"{where}: over the {MAX_INPUT_LINE_BYTES:,} bytes a line may hold")
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError) as error:
        raise InputsFileError(f"{where}: not valid JSON ({type(error).__name__})") from None
    if not isinstance(entry, dict) or entry.get(KEY_SECTION) not in INPUT_SECTIONS:
        raise InputsFileError(f"{where}: expected an object whose {KEY_SECTION!r} is one of "
                              f"{', '.join(INPUT_SECTIONS)}, got {str(line)[:80]}")
    section = entry.pop(KEY_SECTION)
    try:
        return section, _check_entry(section, entry, section)
    except ManifestError as error:
        raise InputsFileError(f"{where}: {str(error).removeprefix('manifest ')}") from None


def _check_inputs_file(record: object) -> None:
    w = KEY_INPUTS_FILE
    record = _dict(w, record)
    if _key(w, record, KEY_FILENAME) != INPUTS_FILE:
        raise _fail(f"{w}.{KEY_FILENAME}", repr(INPUTS_FILE), record[KEY_FILENAME])
    _int(f"{w}.{KEY_BYTES}", _key(w, record, KEY_BYTES))
    _hex64(f"{w}.{KEY_SHA256}", _key(w, record, KEY_SHA256))
    lines = _dict(f"{w}.{KEY_LINES}", _key(w, record, KEY_LINES))
    for section in INPUT_SECTIONS:
        _int(f"{w}.{KEY_LINES}.{section}", _key(f"{w}.{KEY_LINES}", lines, section))


def input_line_counts(manifest: dict) -> dict[str, int]:
    """How many entries each per-input section holds (a validated manifest of any version)."""
    if KEY_INPUTS_FILE in manifest:
        return {section: manifest[KEY_INPUTS_FILE][KEY_LINES][section] for section in INPUT_SECTIONS}
    return {section: len(manifest.get(section, [])) for section in INPUT_SECTIONS}


def handle_lines(handle, block: int = 1 << 20) -> Iterator[bytes]:
    """The lines of a binary file handle (any: local, fsspec's, Beam's), each with its newline. Past
    MAX_INPUT_LINE_BYTES with no newline in sight, what was read is given as one line (which
    parse_input_line refuses) and the reading ends: no line is held beyond the bound plus a block."""
    pending = b""
    while chunk := handle.read(block):
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            yield pending[start:end + 1]
            start = end + 1
        pending = pending[start:]
        if len(pending) > MAX_INPUT_LINE_BYTES:
            yield pending[:MAX_INPUT_LINE_BYTES + 1]
            return
    if pending:
        yield pending


def input_entries(manifest: dict, lines: Iterable[bytes] | None) -> Iterator[tuple[str, dict]]:
    """Every per-input entry of a validated manifest as (section, entry), in file order: a version-1
    manifest's own lists, else the lines of its INPUTS_FILE (`lines`), each checked; once the last
    is read, their bytes, sha256 and count per section are checked against the manifest's record.

    Raises:
        InputsFileError: a bad line, or a file other than the one the manifest names (edited,
            truncated, swapped).
    """
    if KEY_INPUTS_FILE not in manifest:
        for section in INPUT_SECTIONS:
            for entry in manifest.get(section, []):
                yield section, entry
        return
    if lines is None:
        raise InputsFileError(f"no {INPUTS_FILE} beside the manifest (it lists every input read or skipped)")
    record = manifest[KEY_INPUTS_FILE]
    digest, size, counts = hashlib.sha256(), 0, dict.fromkeys(INPUT_SECTIONS, 0)
    for number, line in enumerate(lines, 1):
        digest.update(line)
        size += len(line)
        section, entry = parse_input_line(line, number)
        counts[section] += 1
        yield section, entry
    if size != record[KEY_BYTES] or digest.hexdigest() != record[KEY_SHA256]:
        raise InputsFileError(f"{INPUTS_FILE}: {size:,} bytes, sha256 {digest.hexdigest()[:16]}...; the manifest "
                              f"says {record[KEY_BYTES]:,} bytes, {record[KEY_SHA256][:16]}... (edited or replaced)")
    if counts != record[KEY_LINES]:
        raise InputsFileError(f"{INPUTS_FILE}: lines per section {counts}, the manifest says {record[KEY_LINES]}")


def validate_manifest(manifest: object) -> dict:
    """Check a parsed manifest against what MaskBeam writes: every key a consumer reads is there,
    with its type and within its range; every shard is named by the template. Returns it unchanged.

    Raises:
        ManifestError: naming the first key that is missing, of the wrong type or out of range.
    """
    manifest = _dict("top level", manifest)
    _int(KEY_VERSION, _key("top level", manifest, KEY_VERSION), OLDEST_MANIFEST_VERSION, MANIFEST_VERSION)
    _str(KEY_PACKAGE_VERSION, _key("top level", manifest, KEY_PACKAGE_VERSION))
    config = _dict(KEY_CONFIG, _key("top level", manifest, KEY_CONFIG))
    _check_config(config)
    id_itemsize = _check_tokenizer(_dict(KEY_TOKENIZER, _key("top level", manifest, KEY_TOKENIZER)))
    _check_counts(KEY_COUNTS, _dict(KEY_COUNTS, _key("top level", manifest, KEY_COUNTS)),
                  (FILES_READ, FILES_SKIPPED, DOCUMENTS, TOKENS, ROWS, *MASK_COUNT_NAMES))
    row_bytes = min_row_bytes(config[o.MAX_SEQ_LENGTH], id_itemsize)
    _check_splits(_dict(KEY_SPLITS, _key("top level", manifest, KEY_SPLITS)), row_bytes)
    if manifest[KEY_VERSION] == OLDEST_MANIFEST_VERSION:
        for section in INPUT_SECTIONS:
            required = section in (KEY_INPUTS, KEY_SKIPPED)
            _check_entries(section, _list(section, _key("top level", manifest, section) if required
                                          else manifest.get(section, [])))
        return manifest
    _check_inputs_file(_key("top level", manifest, KEY_INPUTS_FILE))
    for section in INPUT_SECTIONS:
        if section in manifest:
            raise _fail(section, f"no such key in a version-{MANIFEST_VERSION} manifest (its entries are in "
                                 f"{INPUTS_FILE})", manifest[section])
    return manifest


def parse_manifest(text: str | bytes) -> dict:
    """json.loads plus validate_manifest; a manifest over MAX_MANIFEST_BYTES is refused unparsed.

    Raises:
        ManifestError: not JSON, too large, too deeply nested, or not a manifest MaskBeam writes.
    """
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"manifest is {len(text):,} bytes, over the {MAX_MANIFEST_BYTES:,} a manifest may hold")
    try:
        manifest = json.loads(text)
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ManifestError(f"manifest is not valid JSON ({type(error).__name__}: {str(error)[:200]})") from None
    return validate_manifest(manifest)


def looks_like_own_manifest(text: str | bytes) -> bool:
    """A JSON object with the keys only a MaskBeam manifest has (any version): what `--overwrite`
    needs before it deletes anything. Lighter than validate_manifest, so older outputs qualify."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return (isinstance(obj, dict) and isinstance(obj.get(KEY_VERSION), int) and not isinstance(obj[KEY_VERSION], bool)
            and isinstance(obj.get(KEY_PACKAGE_VERSION), str) and isinstance(obj.get(KEY_SPLITS), dict)
            and isinstance(obj.get(KEY_TOKENIZER), dict) and isinstance(obj.get(KEY_CONFIG), dict))


def looks_like_tokenizer_run(text: str | bytes) -> bool:
    """The record jobs.train_tokenizer writes in its output (TOKENIZER_RUN_FILE): its version and the
    list of file names it wrote, each a plain name (never a path: `--overwrite` deletes them)."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return False
    files = obj.get(KEY_FILES) if isinstance(obj, dict) else None
    return (isinstance(obj, dict) and isinstance(obj.get(KEY_TOKENIZER_RUN), int)
            and isinstance(obj.get(KEY_PACKAGE_VERSION), str) and isinstance(files, list)
            and all(isinstance(f, str) and f and "/" not in f and "\\" not in f and f not in (".", "..")
                    for f in files))
