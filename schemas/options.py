"""Option values and the config keys of the manifest that consumers read back.

The preprocess job records its whole config under `manifest["config"]`; these are the keys and
enum values the rest of the code spells only through these constants.
"""

from __future__ import annotations

import os

# --packing
PACKING_DOC = "doc"
PACKING_CONCAT = "concat"
PACKING_SENTENCES = "sentences"
PACKING_MODES = (PACKING_DOC, PACKING_CONCAT, PACKING_SENTENCES)

# masking units: token (BERT), word (--whole_word_mask), span (--span_mask)
UNIT_TOKEN = "token"
UNIT_WORD = "word"
UNIT_SPAN = "span"
MASKING_UNITS = (UNIT_TOKEN, UNIT_WORD, UNIT_SPAN)

# --validation_unit
VALIDATION_BY_ROW = "row"
VALIDATION_BY_DOCUMENT = "document"
VALIDATION_UNITS = (VALIDATION_BY_ROW, VALIDATION_BY_DOCUMENT)

# --group_inputs: whole files up to GROUPED_INPUT_BYTES share a work unit, up to this many a unit
DEFAULT_GROUP_INPUTS = 1000
GROUPED_INPUT_BYTES = 1 << 20

# --task_inputs: the end of the job reads the inputs' results back in bucket tasks of about this many
DEFAULT_TASK_INPUTS = 20_000

# --tokenizer_backend
BACKEND_AUTO = "auto"
BACKEND_FAST = "fast"
BACKEND_HF = "hf"
TOKENIZER_BACKENDS = (BACKEND_AUTO, BACKEND_FAST, BACKEND_HF)

# jobs.train_tokenizer --kind
TOKENIZER_KINDS = ("wordpiece", "bpe")

# jobs.train: --arch, --config (sizes of a new model) and --read_mode (how rows leave the shards)
ARCHITECTURES = ("bert", "roberta", "xlm-roberta", "modernbert", "distilbert", "electra")
MODEL_SIZE_NAMES = ("tiny", "mini", "small", "base")
READ_PREAD = "pread"
READ_MMAP = "mmap"
READ_MODES = (READ_PREAD, READ_MMAP)
DEFAULT_READ_MODE = READ_PREAD if hasattr(os, "pread") else READ_MMAP

# Scripts of the per-input script mix (--scripts); letters of other scripts count as "Other".
SCRIPT_NAMES = ("Latin", "Greek", "Cyrillic", "Hebrew", "Arabic", "Devanagari", "Thai", "Hangul", "Hiragana",
                "Katakana", "Han")
SCRIPT_OTHER = "Other"

# Keys of manifest["config"] that consumers read.
MAX_SEQ_LENGTH = "max_seq_length"
MASKING = "masking"
MASKING_UNIT = "masking_unit"
MLM_PROBABILITY = "mlm_probability"
MASK_REPLACE_PROB = "mask_replace_prob"
RANDOM_REPLACE_PROB = "random_replace_prob"
SPAN_P = "span_p"
MAX_SPAN = "max_span"
PACKING = "packing"
SEED = "seed"
MAX_UNK_FRACTION = "max_unk_fraction"
NEAR_DEDUP = "near_dedup"
SCRIPTS = "scripts"
VALIDATION_UNIT = "validation_unit"

# Keys of manifest["tokenizer"]["special_ids"] besides KEY_MASK_ID.
SPECIAL_CLS = "cls"
SPECIAL_SEP = "sep"
SPECIAL_PAD = "pad"
KEY_ID_DTYPE = "id_dtype"

DEFAULT_SPAN_P = 0.2
DEFAULT_MAX_SPAN = 10
