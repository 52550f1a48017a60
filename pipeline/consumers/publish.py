"""Publish a processed output to the Hugging Face Hub: build the upload folder (Parquet and/or the
Arrow shards, a dataset card, the manifest and its inputs.jsonl, the tokenizer with the configs
`AutoTokenizer` reads), then upload it with huggingface_hub.

The Hub layout `data/{split}-{i:05d}-of-{n:05d}.parquet` is what `push_to_hub` writes and what
`load_dataset(repo_or_folder)` detects without configuration. Torch-free.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re
import shutil
import tempfile
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import __version__
from pipeline.consumers.outputs import (
    BadInputsFile,
    ShardMismatch,
    input_entries,
    load_manifest,
    shard_entries,
    tokenizer_spec,
    verify_shard,
)
from pipeline.consumers.public_manifest import public_entry_function, public_manifest
from pipeline.storage import filesystem
from pipeline.tokenizer.spec import TokenizerError
from pipeline.tokenizer.transformers_files import special_tokens, transformers_files
from schemas import manifest as m
from schemas import options as o
from schemas.shard import (
    ATTENTION_MASK,
    IGNORE_INDEX,
    INPUT_IDS,
    LABELS,
    MASK_SEED,
    MASKING_STATIC,
    id_dtype_for_vocab,
    shard_schema,
)

FORMATS = ("parquet", "arrow", "both")
PARQUET_ROWS_PER_GROUP = 1000
PARQUET_COMPRESSION = "zstd"
HUB_DATA_TEMPLATE = "data/{split}-{index:05d}-of-{count:05d}.{ext}"
ARROW_CONFIG_TEMPLATE = "arrow/{split}-{index:05d}-of-{count:05d}.arrow"
CARD_FILE = "README.md"
RETRY_STATUS = {429, 500, 502, 503, 504}
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
_log = logging.getLogger("maskbeam.publish")


class PublishError(RuntimeError):
    """A publishing problem with a message that says what to do; never contains the token."""


class FolderTaken(PublishError):
    """The --dry_run folder holds something: refused before anything is read or written."""


def check_repo_id(repo_id: str) -> None:
    if not _REPO_ID.match(repo_id) or ".." in repo_id or repo_id.endswith((".git", "-", ".")):
        raise PublishError(f"--repo_id must look like USER/NAME (letters, digits, '-', '_', '.'), got {repo_id!r}")


def _open_stream(source: str):
    """An Arrow IPC stream reader over a local shard, memory-mapped."""
    return pa.ipc.open_stream(pa.memory_map(source, "r"))


def _write_parquet(source: str, target: Path, schema: pa.Schema) -> None:
    """Stream one Arrow shard into a Parquet file, one ~1000-row group at a time."""
    reader = _open_stream(source)
    _check_schema(source, reader.schema, schema)
    with pq.ParquetWriter(target, schema, compression=PARQUET_COMPRESSION) as writer:
        for batch in reader:
            table = pa.Table.from_batches([batch]).replace_schema_metadata(schema.metadata)
            writer.write_table(table, row_group_size=PARQUET_ROWS_PER_GROUP)


def _copy(source: str, target: Path) -> None:
    if filesystem.is_local(source):
        shutil.copyfile(source, target)
        return
    with filesystem.open_binary(source) as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, 8 * 1024 * 1024)


def _check_schema(source: str, actual: pa.Schema, expected: pa.Schema) -> None:
    """The shard's columns are ours (names and types): the card and the Hub's viewer show them."""
    if actual.names != expected.names:
        raise PublishError(f"{source}: shard columns: expected {expected.names}, got {actual.names}")
    for expected_field in expected:
        if actual.field(expected_field.name).type != expected_field.type:
            raise PublishError(f"{source}: column {expected_field.name!r}: expected type {expected_field.type}, "
                               f"got {actual.field(expected_field.name).type}")


def expected_schema(manifest: dict) -> pa.Schema:
    """The Arrow schema the manifest's config makes: what every shard must have, and what the card
    describes (never the column names a file brings)."""
    config, tok = manifest[m.KEY_CONFIG], manifest[m.KEY_TOKENIZER]
    return shard_schema(config[o.MASKING], config[o.MAX_SEQ_LENGTH], id_dtype_for_vocab(tok[m.KEY_VOCAB_SIZE]))


@dataclass(frozen=True)
class DataFile:
    """One file of the Hub layout and the shard it is made from."""

    name: str  # path in the repository
    source: str  # the MaskBeam shard (local path or URL)
    kind: str  # "parquet" (converted) or "arrow" (copied)
    entry: dict = field(hash=False, compare=False)  # the shard's manifest entry: its size and sha256
    schema: pa.Schema = field(hash=False, compare=False)  # the schema the manifest's config makes

    def write(self, target: Path) -> None:
        """Write the file at `target` from its shard, checked first against the manifest (size,
        sha256, schema): a shard swapped for another file is never converted, copied or uploaded.
        A remote shard is downloaded beside `target` and checked there."""
        target.parent.mkdir(parents=True, exist_ok=True)
        local = self.source
        if not filesystem.is_local(self.source):
            local = str(target.with_name(target.name + ".download"))
            _copy(self.source, Path(local))
        try:
            try:
                verify_shard(local, self.entry)
            except ShardMismatch as error:
                raise PublishError(f"refusing to publish {self.source}: {error}") from None
            if self.kind == "parquet":
                _write_parquet(local, target, self.schema)
            else:
                _check_schema(self.source, _open_stream(local).schema, self.schema)
                _copy(local, target)
                try:  # what is uploaded is what was checked, even if the source changed in between
                    verify_shard(str(target), self.entry)
                except ShardMismatch as error:
                    target.unlink()
                    raise PublishError(f"refusing to publish {self.source}: changed while copied ({error})") from None
        finally:
            if local != self.source:
                os.unlink(local)


def layout(directory: str, manifest: dict, fmt: str) -> tuple[list[DataFile], dict[str, dict[str, list[str]]]]:
    """The data files of the Hub layout, and the card's data_files (config -> split -> names)."""
    if fmt not in FORMATS:
        raise PublishError(f"--format must be one of {FORMATS}, got {fmt!r}")
    files: list[DataFile] = []
    data_files: dict[str, dict[str, list[str]]] = {"default": {}, "arrow": {}}
    schema = expected_schema(manifest)
    for split in m.SPLITS:
        # Shards without rows are left out (an empty split too): `load_dataset` refuses a split with no data.
        shards = [(path, entry) for path, entry in shard_entries(directory, manifest, split) if entry[m.KEY_ROWS]]
        for index, (source, entry) in enumerate(shards):
            if fmt in ("parquet", "both"):
                name = HUB_DATA_TEMPLATE.format(split=split, index=index, count=len(shards), ext="parquet")
                files.append(DataFile(name, source, "parquet", entry, schema))
                data_files["default"].setdefault(split, []).append(name)
            if fmt in ("arrow", "both"):
                template = HUB_DATA_TEMPLATE if fmt == "arrow" else ARROW_CONFIG_TEMPLATE
                name = template.format(split=split, index=index, count=len(shards), ext="arrow")
                files.append(DataFile(name, source, "arrow", entry, schema))
                data_files["default" if fmt == "arrow" else "arrow"].setdefault(split, []).append(name)
    if not files:
        raise PublishError(f"{directory!r} holds no rows: nothing to publish")
    return files, data_files


def tokenizer_files(directory: str, manifest: dict) -> dict[str, bytes]:
    """{name: bytes} of the tokenizer files of the upload: the output's `tokenizer.json` (checked to be
    the manifest's tokenizer, by sha256) and the `transformers` configs made from it and the manifest
    (transformers_files), so an output written before those configs existed publishes them too."""
    try:
        spec = tokenizer_spec(directory, manifest)
        configs = transformers_files(spec.json, manifest[m.KEY_TOKENIZER], manifest[m.KEY_CONFIG][o.MAX_SEQ_LENGTH])
    except TokenizerError as error:
        raise PublishError(f"{directory!r}: its {m.TOKENIZER_FILE} cannot be published: {error}") from None
    files = {m.TOKENIZER_FILE: spec.json.encode("utf-8")}
    files.update((name, text.encode("utf-8")) for name, text in configs.items())
    return files


@dataclass(frozen=True)
class UploadFolder:
    path: Path
    files: tuple[str, ...]  # paths relative to `path`, exactly what is uploaded


# What a dry run writes at the top of its folder besides DRY_RUN_FOLDERS (the tokenizer files included):
# all that `overwrite` deletes of an earlier dry run.
DRY_RUN_FILES = (CARD_FILE, m.MANIFEST_FILE, m.INPUTS_FILE, *m.TOKENIZER_FILES)
DRY_RUN_FOLDERS = ("data", "arrow")


def _earlier_dry_run(root: Path, overwrite: bool) -> bool:
    """Whether `root` holds an earlier dry run to replace (False: it is absent or empty). A non-empty
    folder is refused unless `overwrite` and it holds our card and manifest.

    Raises:
        FolderTaken: naming the folder and what to do.
    """
    if not root.exists() or not any(root.iterdir()):
        return False
    manifest = root / m.MANIFEST_FILE
    ours = (root / CARD_FILE).is_file() and manifest.is_file() and m.looks_like_own_manifest(manifest.read_bytes())
    if not ours:
        raise FolderTaken(f"--dry_run {str(root)!r} exists, is not empty and is not an earlier dry run (no MaskBeam "
                           f"{m.MANIFEST_FILE} and {CARD_FILE}): choose another folder; --overwrite replaces only "
                           "a dry run")
    if not overwrite:
        raise FolderTaken(f"--dry_run {str(root)!r} exists and is not empty (an earlier dry run); pass --overwrite "
                           "to replace it, or choose another folder")
    return True


def _clear_dry_run(root: Path) -> None:
    """Delete what a dry run wrote in `root` (DRY_RUN_FOLDERS, DRY_RUN_FILES); anything else stays."""
    for name in DRY_RUN_FOLDERS:
        if (root / name).is_dir() and not (root / name).is_symlink():
            shutil.rmtree(root / name)
    for name in DRY_RUN_FILES:
        if (root / name).is_file() or (root / name).is_symlink():
            (root / name).unlink()


def build_upload_folder(directory: str, folder: str, *, repo_id: str, fmt: str = "parquet",
                        license_id: str = "other", overwrite: bool = False) -> UploadFolder:
    """Write the exact Hub layout of a preprocess output (local or on an object store) into `folder`
    (which must not exist or be empty, unless `overwrite` replaces an earlier dry run there): what
    --dry_run shows.

    Raises:
        PublishError: for a non-empty folder (see `overwrite`), or an output that cannot be published.
    """
    root = Path(folder)
    earlier = _earlier_dry_run(root, overwrite)  # refused before any shard is read
    source = load_manifest(directory)
    manifest = public_manifest(source)
    files, data_files = layout(directory, manifest, fmt)
    tokenizer = tokenizer_files(directory, manifest)
    if earlier:
        _clear_dry_run(root)
    root.mkdir(parents=True, exist_ok=True)
    card_entries = _write_public_inputs(directory, source, manifest, root)  # before any shard: it fails fast
    for data_file in files:
        data_file.write(root / data_file.name)
    (root / m.MANIFEST_FILE).write_text(m.dumps(manifest), encoding="utf-8")
    for name, data in tokenizer.items():
        (root / name).write_bytes(data)
    card = dataset_card({**manifest, **card_entries}, data_files, repo_id, license_id, files[0].schema,
                        tokenizer[m.TOKENIZER_FILE])
    (root / CARD_FILE).write_text(card, encoding="utf-8")
    names = [f.name for f in files] + [m.MANIFEST_FILE, CARD_FILE, *tokenizer]
    names += [m.INPUTS_FILE] if m.KEY_INPUTS_FILE in manifest else []
    return UploadFolder(path=root, files=tuple(sorted(names)))


CARD_INPUTS = 200  # inputs, and skipped inputs, the dataset card names (INPUTS_FILE lists them all)


def _write_public_inputs(directory: str, source: dict, manifest: dict, root: Path) -> dict[str, list[dict]]:
    """The output's INPUTS_FILE as published (public_entry_function on each line, checked as it is
    read) into `root`, and `manifest`'s record of it made the published file's; returns the first
    CARD_INPUTS entries of the inputs and skipped sections for the card. A version-1 output has its
    entries in the manifest (made public there) and no file."""
    public = public_entry_function(source)
    card: dict[str, list[dict]] = {m.KEY_INPUTS: [], m.KEY_SKIPPED: []}
    if m.KEY_INPUTS_FILE not in manifest:
        return {section: manifest[section] for section in card}
    digest, size = hashlib.sha256(), 0
    try:
        with open(root / m.INPUTS_FILE, "wb") as handle:
            for section, entry in input_entries(directory, source):
                entry = public(section, entry)
                if section in card and len(card[section]) < CARD_INPUTS:
                    card[section].append(entry)
                line = m.input_line(section, entry).encode("ascii")
                digest.update(line)
                size += len(line)
                handle.write(line)
    except BadInputsFile as error:
        raise PublishError(f"{error}: not published (rerun preprocess to rebuild the output)") from None
    manifest[m.KEY_INPUTS_FILE] = {**manifest[m.KEY_INPUTS_FILE], m.KEY_BYTES: size, m.KEY_SHA256: digest.hexdigest()}
    return card


def _card_metadata(manifest: dict, data_files: dict, license_id: str, schema: pa.Schema) -> str:
    import datasets
    from huggingface_hub import DatasetCardData

    features = datasets.Features.from_arrow_schema(schema)
    splits = {split: datasets.SplitInfo(name=split, num_examples=manifest[m.KEY_SPLITS][split][m.KEY_ROWS],
                                        num_bytes=sum(s[m.KEY_BYTES]
                                                      for s in manifest[m.KEY_SPLITS][split][m.KEY_SHARDS]))
              for split in m.SPLITS if split in data_files["default"]}
    split_dict = datasets.SplitDict()
    for split_info in splits.values():
        split_dict.add(split_info)
    info = datasets.DatasetInfo(features=features, splits=split_dict)
    card = DatasetCardData(license=license_id, task_categories=["fill-mask"],
                           tags=["masked-language-modeling", "bert", "maskbeam", "pretraining"])
    datasets.info.DatasetInfosDict({"default": info}).to_dataset_card_data(card)
    # One config: `datasets` picks one builder per repository, so the extra Arrow copy of --format
    # both (under arrow/) is documented in the card, not declared as a second config.
    configs = [{"config_name": "default", "default": True,
                "data_files": [{"split": split, "path": paths} for split, paths in data_files["default"].items()]}]
    card.configs = configs
    return card.to_yaml()


def _inert(text: object) -> str:
    """Text from a manifest made inert for Markdown: control, format and separator characters (newlines,
    bidi overrides, zero-width marks) become U+FFFD, so nothing can start a line, a heading or a list."""
    out = []
    for ch in str(text):
        category = unicodedata.category(ch)
        out.append(ch if ch == " " or category[0] not in "CZ" else (" " if category == "Zs" else "\ufffd"))
    return "".join(out)


def md_code(text: object, *, in_table: bool = False) -> str:
    """Untrusted text as one Markdown code span: shown literally (no HTML, link, image or emphasis;
    no autolink), with a fence longer than any backtick run inside; `|` escaped in a table cell (GFM
    splits cells before it reads code spans, and drops the backslash)."""
    inner = _inert(text)
    if in_table:
        inner = inner.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", inner)), default=0)
    fence = "`" * (longest + 1)
    # CommonMark strips one space from each side when both are there: pad only where that is needed.
    pad = " " if not inner.strip(" ") or inner[0] == "`" or inner[-1] == "`" or inner[0] == inner[-1] == " " else ""
    return f"{fence}{pad}{inner}{pad}{fence}"


# What each column holds, for the card's schema table.
COLUMN_NOTES = {
    INPUT_IDS: "token ids: the [CLS]-like token, content, the [SEP]-like token, then padding",
    ATTENTION_MASK: "1 on tokens, 0 on padding",
    LABELS: f"the original id at each masked position, {IGNORE_INDEX} elsewhere",
    MASK_SEED: "the row's 64-bit seed: MaskBeam's mask of epoch e is a pure function of (mask_seed, e)",
}
MASKBEAM_INSTALL = 'pip install "maskbeam[train] @ git+<MaskBeam repository URL>"'


def schema_table(schema: pa.Schema) -> str:
    """The card's table of columns: name, dtype, shape per row, meaning."""
    notes = dict(COLUMN_NOTES)
    if LABELS in schema.names:
        notes[INPUT_IDS] += ", with the masks applied"
    rows = []
    for column in schema:
        kind = column.type
        if pa.types.is_fixed_size_list(kind):
            dtype, shape = kind.value_type, f"[{kind.list_size}]"
        else:
            dtype, shape = kind, "scalar"
        rows.append(f"| `{column.name}` | {dtype} | {shape} | {notes.get(column.name, '')} |")
    return "| column | dtype | shape | holds |\n|---|---|---|---|\n" + "\n".join(rows)


def _special_table(tokenizer_json: str, names: dict) -> str:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    rows = [f"| `{name}` | {md_code(names[name], in_table=True)} | {tokenizer.token_to_id(names[name])} |"
            for name in ("cls_token", "sep_token", "pad_token", "mask_token", "unk_token") if name in names]
    extra = names["additional_special_tokens"]
    if extra:
        rows.append(f"| `additional_special_tokens` | {len(extra):,} more, never masked | |")
    return "| attribute | token | id |\n|---|---|---|\n" + "\n".join(rows)


def _train_code(manifest: dict) -> str:
    """The card's training section: plain `transformers` code (static: default_data_collator; dynamic:
    DataCollatorForLanguageModeling, then MaskBeam's own collator for its seeded masks)."""
    config, tok = manifest[m.KEY_CONFIG], manifest[m.KEY_TOKENIZER]
    static = config[o.MASKING] == MASKING_STATIC
    positions = max(512, config[o.MAX_SEQ_LENGTH])
    collator_import = "default_data_collator" if static else "DataCollatorForLanguageModeling"
    model = f"""```python
from transformers import BertConfig, BertForMaskedLM, Trainer, TrainingArguments, {collator_import}

model = BertForMaskedLM(BertConfig(vocab_size={tok[m.KEY_VOCAB_SIZE]}, max_position_embeddings={positions},
                                   pad_token_id=tokenizer.pad_token_id))
args = TrainingArguments("mlm-run", max_steps=10_000, per_device_train_batch_size=32, report_to="none")
"""
    if static:
        return f"""Static masks: `input_ids` are already masked and `labels` hold the original ids at the targets
({IGNORE_INDEX} elsewhere), so `transformers.default_data_collator` is all a `Trainer` needs:

{model}trainer = Trainer(model=model, args=args, train_dataset=ds["train"], data_collator=default_data_collator)
trainer.train()
```
"""
    unit = config.get(o.MASKING_UNIT, o.UNIT_TOKEN)
    return f"""Dynamic masks: rows hold unmasked `input_ids` and a 64-bit `mask_seed` (no `labels`); the
masks are drawn at training time. With `transformers` alone, `DataCollatorForLanguageModeling` draws
new masks for every batch (single tokens; the special tokens above are never masked), and `Trainer`
drops the `mask_seed` column:

{model}collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability={config[o.MLM_PROBABILITY]},
                                           mask_replace_prob={config[o.MASK_REPLACE_PROB]},
                                           random_replace_prob={config[o.RANDOM_REPLACE_PROB]})
trainer = Trainer(model=model, args=args, train_dataset=ds["train"], data_collator=collator)
trainer.train()
```

MaskBeam's own masks (masking unit `{unit}`; the mask of epoch e is a pure function of
(`mask_seed`, e), the same in every process and on every rerun, and the counts above are those of
epoch 0) come from its collator, `MlmCollator`. MaskBeam is installed from its source, with the
`train` extra (a clone of the repository: `pip install ".[train]"` in it):

```bash
{MASKBEAM_INSTALL}
```

```python
from pipeline.consumers.loading import MlmCollator, epoch_callback

collator = MlmCollator.for_output(folder)  # the masking rule of manifest.json
args = TrainingArguments("mlm-run", max_steps=10_000, per_device_train_batch_size=32, report_to="none",
                         remove_unused_columns=False)  # the collator needs mask_seed
trainer = Trainer(model=model, args=args, train_dataset=ds["train"], data_collator=collator,
                  callbacks=[epoch_callback(collator)])
trainer.train()
```
"""


def dataset_card(manifest: dict, data_files: dict, repo_id: str, license_id: str, schema: pa.Schema,
                 tokenizer_json: str | bytes) -> str:
    """A real dataset card: YAML metadata, then what the data is, its schema and tokenizer, and how
    to load and train on it with `datasets` and `transformers`. Every string taken from the manifest
    or the tokenizer (input names, skip reasons, the tokenizer's name and tokens, the version) goes
    into a code span (md_code); numbers and enum values are validated by the schema."""
    if isinstance(tokenizer_json, bytes):
        tokenizer_json = tokenizer_json.decode("utf-8")
    config, counts, tok = manifest[m.KEY_CONFIG], manifest[m.KEY_COUNTS], manifest[m.KEY_TOKENIZER]
    names = special_tokens(tokenizer_json, tok)
    row_layout = " ".join((md_code(names["cls_token"]), "content", md_code(names["sep_token"]),
                           md_code(names["pad_token"]) + "..."))
    sources = "\n".join(f"| {md_code(posixpath.basename(e[m.KEY_PATH]), in_table=True)} | {e[m.TOKENS]:,} | "
                        f"{e[m.KEY_ROWS]:,} |" for e in manifest[m.KEY_INPUTS][:CARD_INPUTS])
    skipped = "\n".join(f"- {md_code(posixpath.basename(s[m.KEY_PATH]))}: {md_code(s[m.KEY_REASON])}"
                        for s in manifest[m.KEY_SKIPPED][:CARD_INPUTS]) or "none"
    listed = m.input_line_counts(manifest)
    if listed[m.KEY_SKIPPED] > CARD_INPUTS:
        skipped += f"\n- ... and {listed[m.KEY_SKIPPED] - CARD_INPUTS:,} more (all in `{m.INPUTS_FILE}`)"
    checksums = "\n".join(f"| {split} | `{s[m.KEY_FILENAME]}` | {s[m.KEY_ROWS]:,} | `{s[m.KEY_SHA256]}` |"
                          for split in m.SPLITS for s in manifest[m.KEY_SPLITS][split][m.KEY_SHARDS])
    unchanged = round(1 - config[o.MASK_REPLACE_PROB] - config[o.RANDOM_REPLACE_PROB], 6)
    arrow_note = ("\nThe MaskBeam Arrow stream shards are also under `arrow/` (memory-mappable with "
                  "`datasets.Dataset.from_file` after download).\n" if data_files.get("arrow") else "")
    splits = ", ".join(f'`ds["{split}"]`' for split in m.SPLITS if split in data_files["default"])
    body = f"""
# {repo_id}

Masked-language-model pretraining data made with MaskBeam {md_code(manifest[m.KEY_PACKAGE_VERSION])}:
{counts[m.DOCUMENTS]:,} documents from {counts[m.FILES_READ]:,} files ({counts[m.FILES_SKIPPED]:,} skipped),
{counts[m.TOKENS]:,} tokens in {counts[m.ROWS]:,} rows of {config[o.MAX_SEQ_LENGTH]} tokens
({row_layout}; packing `{config[o.PACKING]}`).

- tokenizer: {md_code(tok[m.KEY_NAME_OR_PATH])} (sha256 `{tok[m.KEY_SHA256]}`, {tok[m.KEY_VOCAB_SIZE]:,} ids),
  included: `{m.TOKENIZER_FILE}`, `{m.TOKENIZER_CONFIG_FILE}`, `{m.SPECIAL_TOKENS_MAP_FILE}`
- masking: {config[o.MASKING]}, mlm_probability {config[o.MLM_PROBABILITY]}, [MASK] {config[o.MASK_REPLACE_PROB]},
  random {config[o.RANDOM_REPLACE_PROB]}, unchanged {unchanged};
  special tokens are never selected nor used as random replacements; seed {config[o.SEED]}
- selected / [MASK] / random / unchanged positions: {counts[m.SELECTED]:,} / {counts[m.MASKED]:,} /
  {counts[m.RANDOM]:,} / {counts[m.UNCHANGED]:,}

## Schema

Every row has {config[o.MAX_SEQ_LENGTH]} positions; splits: {splits}.

{schema_table(schema)}

## Tokenizer

The tokenizer the rows were made with, with the configs that name its special tokens (the ids the
rows use):

{_special_table(tokenizer_json, names)}

## Load

```python
from huggingface_hub import snapshot_download

folder = snapshot_download("{repo_id}", repo_type="dataset")  # the data, the tokenizer and manifest.json
```

```python
from datasets import load_dataset
from transformers import AutoTokenizer

ds = load_dataset(folder)
tokenizer = AutoTokenizer.from_pretrained(folder)
```

(`load_dataset("{repo_id}")` loads the data alone.)

## Train

{_train_code(manifest)}{arrow_note}
## Sources

| file | tokens | rows |
|---|---|---|
{sources}

Skipped inputs:
{skipped}

## Checksums (MaskBeam Arrow shards, see manifest.json)

| split | shard | rows | sha256 |
|---|---|---|---|
{checksums}
"""
    metadata = _card_metadata(manifest, data_files, license_id, schema).rstrip("\n")
    return f"---\n{metadata}\n---\n{body}"


def resolve_token(token: str | None) -> str:
    """--token, else HF_TOKEN, else the stored login."""
    if token:
        return token
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    from huggingface_hub import get_token

    stored = get_token()
    if not stored:
        raise PublishError("no Hugging Face token: pass --token, set HF_TOKEN, or run `hf auth login`")
    return stored


def _status(error: Exception) -> int | None:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)


def _scrub(text: str, token: str) -> str:
    return text.replace(token, "***") if token else text


def with_retries(call: Callable, token: str, *, attempts: int = 5, base_delay: float = 2.0,
                 sleep: Callable[[float], None] = time.sleep):
    """Run call(); retry with exponential backoff on HTTP 429 and 5xx only."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as error:  # huggingface_hub raises HfHubHTTPError and subclasses
            status = _status(error)
            message = _scrub(str(error).splitlines()[0] if str(error) else type(error).__name__, token)
            if status in (401, 403):
                raise PublishError(f"the Hub refused the token (HTTP {status}): check it has write access "
                                   "to this repository") from None
            if status not in RETRY_STATUS or attempt == attempts:
                raise PublishError(f"upload failed (HTTP {status}): {message}") from None
            delay = base_delay * 2 ** (attempt - 1)
            _log.warning("Hub answered HTTP %s; retrying in %.0f s (attempt %d of %d)", status, delay, attempt,
                         attempts)
            sleep(delay)


def publish_streaming(directory: str, repo_id: str, *, fmt: str = "parquet", license_id: str = "other",
                      token: str | None = None, private: bool = False, api=None, scratch: str | None = None,
                      sleep: Callable[[float], None] = time.sleep) -> str:
    """Publish an output (local or on an object store) with bounded local disk: each data file is
    made in a scratch folder, pre-uploaded (LFS) and deleted before the next one, then one commit
    adds them all with the card, the manifest and its INPUTS_FILE. Returns the dataset URL."""
    from huggingface_hub import CommitOperationAdd

    check_repo_id(repo_id)
    secret = resolve_token(token)
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    source = load_manifest(directory)
    manifest = public_manifest(source)
    files, data_files = layout(directory, manifest, fmt)
    tokenizer = tokenizer_files(directory, manifest)
    with_retries(lambda: api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True,
                                         token=secret), secret, sleep=sleep)
    operations = []
    with tempfile.TemporaryDirectory(prefix="maskbeam-publish-", dir=scratch) as work:

        def upload(name: str, local: Path) -> None:
            operation = CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(local))
            with_retries(lambda op=operation: api.preupload_lfs_files(repo_id, additions=[op], repo_type="dataset",
                                                                       token=secret), secret, sleep=sleep)
            if getattr(operation, "_upload_mode", None) != "lfs":  # a regular file travels inside the commit
                operation.path_or_fileobj = local.read_bytes()
            local.unlink()
            operations.append(operation)

        card_entries = _write_public_inputs(directory, source, manifest, Path(work))  # first: it fails fast
        if m.KEY_INPUTS_FILE in manifest:
            upload(m.INPUTS_FILE, Path(work) / m.INPUTS_FILE)
        for number, data_file in enumerate(files, 1):
            local = Path(work) / data_file.name
            data_file.write(local)
            upload(data_file.name, local)
            _log.info("uploaded %s (%d of %d)", data_file.name, number, len(files))
    card = dataset_card({**manifest, **card_entries}, data_files, repo_id, license_id, files[0].schema,
                        tokenizer[m.TOKENIZER_FILE])
    operations += [CommitOperationAdd(path_in_repo=CARD_FILE, path_or_fileobj=card.encode("utf-8")),
                   CommitOperationAdd(path_in_repo=m.MANIFEST_FILE, path_or_fileobj=m.dumps(manifest).encode("utf-8"))]
    operations += [CommitOperationAdd(path_in_repo=name, path_or_fileobj=data) for name, data in tokenizer.items()]
    with_retries(lambda: api.create_commit(repo_id, operations=operations, repo_type="dataset", token=secret,
                                           commit_message=f"Upload MaskBeam {__version__} dataset"),
                 secret, sleep=sleep)
    url = f"https://huggingface.co/datasets/{repo_id}"
    _log.info("published %s", url)
    return url


def publish_output(directory: str, repo_id: str, *, private: bool, token: str | None = None) -> str:
    """Publish an output (local or on an object store) shard by shard; returns the dataset URL.
    The card's licence is `other` (logged): `jobs.publish --license ID` republishes with one."""
    _log.warning("the dataset card will say `license: other`; to name the licence, publish with "
                 "`python -m jobs.publish %s --repo_id %s --license ID`", directory, repo_id)
    return publish_streaming(directory, repo_id, token=token, private=private)
