"""The files beside an output's `tokenizer.json` that make `transformers.AutoTokenizer.from_pretrained`
load it with every special token named: `tokenizer_config.json` and `special_tokens_map.json`.

Made from the tokenizer and the manifest's tokenizer record (never copied from the user's tokenizer
folder, whose configs may name a class, code or other ids): the [CLS], [SEP], [PAD] and [MASK] of the
rows are the manifest's special ids, [UNK] is the one TokenizerSpec counts, and every other id the masking never
selects is an additional special token, so `DataCollatorForLanguageModeling` never masks it either.
The class is the generic fast tokenizer: it runs the `tokenizer.json` as it is, for every family.
"""

from __future__ import annotations

import json

from tokenizers import Tokenizer

from pipeline.tokenizer.errors import TokenizerError
from pipeline.tokenizer.spec import unk_id_of
from schemas import manifest as m
from schemas import options as o

TOKENIZER_CLASS = "PreTrainedTokenizerFast"
# transformers attribute -> role in the manifest's special ids
_ROLES = {"cls_token": o.SPECIAL_CLS, "sep_token": o.SPECIAL_SEP, "pad_token": o.SPECIAL_PAD,
          "mask_token": m.KEY_MASK_ID}


def _dumps(obj: dict) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def special_tokens(tokenizer_json: str, record: dict) -> dict:
    """The special-token map: `cls_token`, `sep_token`, `pad_token`, `mask_token` (the manifest's ids),
    `unk_token` where the model has one, and `additional_special_tokens` (the other never-selected ids).

    Raises:
        TokenizerError: a special id of the manifest is not a token of this tokenizer.
    """
    tokenizer = Tokenizer.from_str(tokenizer_json)
    ids = record[m.KEY_SPECIAL_IDS]
    names = {}
    for name, role in _ROLES.items():
        token = tokenizer.id_to_token(ids[role])
        if token is None:
            raise TokenizerError(f"the manifest's {role} id {ids[role]} is not a token of the output's "
                                 f"{m.TOKENIZER_FILE}: the folder does not hold the tokenizer of its rows")
        names[name] = token
    unk = unk_id_of(tokenizer, json.loads(tokenizer_json))  # the id TokenizerSpec.unk_id gives
    if unk >= 0 and tokenizer.id_to_token(unk) is not None:
        names["unk_token"] = tokenizer.id_to_token(unk)
    named = {tokenizer.token_to_id(token) for token in names.values()}
    extra = [tokenizer.id_to_token(i) for i in record[m.KEY_NEVER_SELECTED] if i not in named]
    names["additional_special_tokens"] = [token for token in extra if token is not None]
    return names


def transformers_files(tokenizer_json: str, record: dict, model_max_length: int) -> dict[str, str]:
    """{file name: text} of `tokenizer_config.json` and `special_tokens_map.json` for this tokenizer
    (`record`: the manifest's tokenizer section; `model_max_length`: the rows' length)."""
    names = special_tokens(tokenizer_json, record)
    config = {"tokenizer_class": TOKENIZER_CLASS, "model_max_length": model_max_length,
              # decode as the tokenizer's own decoder does (no extra clean-up of spaces)
              "clean_up_tokenization_spaces": False, **names}
    return {m.TOKENIZER_CONFIG_FILE: _dumps(config), m.SPECIAL_TOKENS_MAP_FILE: _dumps(names)}
