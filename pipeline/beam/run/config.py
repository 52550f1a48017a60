"""The preprocess job's configuration: validated once in the launcher, recorded in the manifest."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pipeline.kernels.rows.masking import check_probabilities
from schemas.options import (
    BACKEND_AUTO,
    MASKING_UNITS,
    PACKING_DOC,
    PACKING_MODES,
    SCRIPT_NAMES,
    SCRIPT_OTHER,
    TOKENIZER_BACKENDS,
    UNIT_TOKEN,
    VALIDATION_BY_ROW,
    VALIDATION_UNITS,
)
from schemas.shard import DEFAULT_SEQ_LEN, MASKING_DYNAMIC, MASKING_MODES, MASKING_STATIC, MIN_SEQ_LEN

# Options recorded in the manifest that do not decide a byte of the shards: where the output goes,
# and which tokenizer backend produced the (identical) ids.
NOT_IN_THE_BYTES = ("output", "tokenizer_backend")


@dataclass(frozen=True)
class PreprocessConfig:
    """Everything that decides the bytes of the output (runner options do not)."""

    inputs: tuple[str, ...]
    output: str
    tokenizer: str
    hf_dataset: str | None = None
    hf_split: str = "train"
    hf_revision: str = ""  # resolved by the launcher: the Hub commit, or "fingerprint:..." of a local folder
    text_column: str = "text"
    keep_boilerplate: bool = False
    max_seq_length: int = DEFAULT_SEQ_LEN
    min_tokens: int = 64
    packing: str = PACKING_DOC
    masking: str = MASKING_STATIC
    dupe_factor: int = 1
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    seed: int = 0
    validation_fraction: float = 0.01
    num_shards: int | None = None
    dedup: bool = False
    masking_unit: str = UNIT_TOKEN  # "token", "word" (--whole_word_mask) or "span" (--span_mask)
    span_p: float = 0.2
    max_span: int = 10
    short_seq_prob: float = 0.1  # with --packing sentences: share of rows with a shorter target (BERT)
    split_bytes: int = 64 * 1024 * 1024  # uncompressed text and .jsonl files above this: byte ranges, many workers
    tokenizer_backend: str = BACKEND_AUTO  # the launcher records the backend it resolved (fast or hf)
    max_unk_fraction: float = 0.1  # inputs with more [UNK] among their tokens are skipped (1 turns it off)
    near_dedup: float | None = None  # drop the later member of near-duplicate clusters at this similarity
    scripts: tuple[str, ...] = ()  # keep only inputs whose dominant script is listed (empty: all)
    validation_unit: str = VALIDATION_BY_ROW  # "row": rows drawn one by one; "document": whole documents

    def validate(self) -> None:
        """Raise ValueError naming the first bad option."""
        if not self.inputs and not self.hf_dataset:
            raise ValueError("give at least one --input PATTERN or --hf_dataset NAME")
        if not self.output:
            raise ValueError("--output is required")
        if self.max_seq_length < MIN_SEQ_LEN:
            raise ValueError(f"--max_seq_length must be >= {MIN_SEQ_LEN}, got {self.max_seq_length}")
        if not 0 <= self.min_tokens <= self.max_seq_length - 2:
            raise ValueError(f"--min_tokens must be in [0, max_seq_length - 2 = {self.max_seq_length - 2}], "
                             f"got {self.min_tokens}")
        if self.packing not in PACKING_MODES:
            raise ValueError(f"--packing must be one of {PACKING_MODES}, got {self.packing!r}")
        if self.masking not in MASKING_MODES:
            raise ValueError(f"--masking must be one of {MASKING_MODES}, got {self.masking!r}")
        if self.dupe_factor < 1:
            raise ValueError(f"--dupe_factor must be >= 1, got {self.dupe_factor}")
        if self.masking == MASKING_DYNAMIC and self.dupe_factor != 1:
            raise ValueError("--dupe_factor applies to --masking static only; dynamic output masks per epoch")
        try:
            check_probabilities(self.mlm_probability, self.mask_replace_prob, self.random_replace_prob)
        except ValueError as error:
            raise ValueError(f"--{error}") from None
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"--validation_fraction must be in [0, 1), got {self.validation_fraction}")
        if self.validation_unit not in VALIDATION_UNITS:
            raise ValueError(f"--validation_unit must be one of {', '.join(VALIDATION_UNITS)}, "
                             f"got {self.validation_unit!r}")
        if self.num_shards is not None and self.num_shards < 1:
            raise ValueError(f"--num_shards must be >= 1, got {self.num_shards}")
        if self.masking_unit not in MASKING_UNITS:
            raise ValueError(f"masking unit must be token, word or span, got {self.masking_unit!r}")
        if not 0.0 < self.span_p <= 1.0:
            raise ValueError(f"--span_p must be in (0, 1], got {self.span_p}")
        if self.split_bytes < 1024:
            raise ValueError(f"--split_bytes must be >= 1024, got {self.split_bytes}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"--short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
        if self.max_span < 1:
            raise ValueError(f"--max_span must be >= 1, got {self.max_span}")
        if not 0.0 <= self.max_unk_fraction <= 1.0:
            raise ValueError(f"--max_unk_fraction must be in [0, 1], got {self.max_unk_fraction}")
        if self.near_dedup is not None and not 0.0 < self.near_dedup <= 1.0:
            raise ValueError(f"--near_dedup must be in (0, 1], got {self.near_dedup}")
        unknown = [s for s in self.scripts if s not in (*SCRIPT_NAMES, SCRIPT_OTHER)]
        if unknown:
            raise ValueError(f"--scripts: unknown script(s) {', '.join(unknown)}; "
                             f"choose from {', '.join((*SCRIPT_NAMES, SCRIPT_OTHER))}")
        if self.tokenizer_backend not in TOKENIZER_BACKENDS:
            raise ValueError(f"--tokenizer_backend must be one of {TOKENIZER_BACKENDS}, got {self.tokenizer_backend!r}")
        if not 0 <= self.seed < 2**64:
            raise ValueError(f"--seed must be in [0, 2**64), got {self.seed}")

    @property
    def copies(self) -> int:
        """Rows written per chunk: dupe_factor static copies, or one unmasked row."""
        return self.dupe_factor if self.masking == MASKING_STATIC else 1

    def to_record(self) -> dict:
        """The config as recorded in the manifest: inputs sorted, so input order changes nothing."""
        record = asdict(self)
        record["inputs"] = sorted(self.inputs)
        record["scripts"] = list(self.scripts)
        return record
