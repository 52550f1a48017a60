"""A tokenizer as picklable JSON plus the facts the job derives from it (special ids, vocabulary
size, continuation pieces), and the worker-side `tokenizers.Tokenizer` built from it."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property

from tokenizers import Tokenizer

from pipeline.kernels.rows.chunking import RowLayout
from pipeline.kernels.rows.masking import MaskingRule
from pipeline.tokenizer.content import check_added_ids, content_tokenizer_json
from pipeline.tokenizer.errors import TokenizerError, is_panic, panic_error
from pipeline.tokenizer.families import continues_word
from pipeline.tokenizer.parsed import built_from, parsed, release_parses
from pipeline.tokenizer.safety.normalizer_growth import NormalizerGrowth, check_growth
from pipeline.tokenizer.safety.regexes import UnsafeRegex, check_regex
from schemas.manifest import MAX_VOCAB_SIZE
from schemas.options import SPECIAL_CLS, SPECIAL_PAD, SPECIAL_SEP, UNIT_TOKEN

# Candidate spellings of each special token, BERT first, then RoBERTa/SentencePiece style.
SPECIAL_CANDIDATES = {
    SPECIAL_CLS: ("[CLS]", "<s>", "<cls>"),
    SPECIAL_SEP: ("[SEP]", "</s>", "<sep>"),
    SPECIAL_PAD: ("[PAD]", "<pad>"),
    "mask": ("[MASK]", "<mask>"),
}
_UNUSED = re.compile(r"^\[unused\d+\]$|^<unused\d+>$")
MAX_TOKENIZER_BYTES = 256 * 1024 * 1024  # the largest published tokenizer.json files are ~35 MB
MIN_FREE_IDS = 1024  # unused ids (gaps) always allowed; beyond, at most as many as there are tokens


def _ids_in(config: dict) -> list[int]:
    """Every id a tokenizer.json assigns: its model's vocabulary and its added tokens."""
    model = config["model"]
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        ids = list(vocab.values())
    elif isinstance(vocab, list):  # Unigram: [piece, score] pairs, ids are positions
        ids = list(range(len(vocab)))
    elif vocab is None:
        ids = []
    else:
        raise TokenizerError(f"tokenizer model vocab: expected an object or a list, got {type(vocab).__name__}")
    added = config.get("added_tokens") or []
    if not isinstance(added, list):
        raise TokenizerError(f"tokenizer added_tokens: expected a list, got {type(added).__name__}")
    for token in added:
        ids.append(token.get("id") if isinstance(token, dict) else token)
    return ids


def _check_id_space(ids: list) -> None:
    """Ids are integers in [0, MAX_VOCAB_SIZE), and at most max(MIN_FREE_IDS, tokens) ids of the id
    space (largest id + 1: the size of every table indexed by id) are unused. One token at id
    2**31 - 8 would otherwise make serialising the tokenizer ask for 8 GiB, the masking tables ~30 GB."""
    for token_id in ids:
        if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
            raise TokenizerError(f"tokenizer ids must be integers >= 0, got {token_id!r}")
    if not ids:
        raise TokenizerError("tokenizer has an empty vocabulary")
    highest, distinct = max(ids), len(set(ids))
    if highest >= MAX_VOCAB_SIZE:
        raise TokenizerError(f"tokenizer id {highest:,} is over the {MAX_VOCAB_SIZE - 1:,} MaskBeam accepts "
                             f"(it holds {distinct:,} tokens)")
    allowed = max(MIN_FREE_IDS, distinct)
    if highest + 1 - distinct > allowed:
        raise TokenizerError(f"tokenizer ids run to {highest:,} but only {distinct:,} are used: "
                             f"{highest + 1 - distinct:,} unused ids (at most {allowed:,} allowed)")


def _token_ids(config: dict):
    """(token, id) of every token a tokenizer.json names: its model's vocabulary and its added tokens."""
    vocab = config["model"].get("vocab")
    if isinstance(vocab, dict):
        yield from vocab.items()
    elif isinstance(vocab, list):  # Unigram: [piece, score] pairs, ids are positions
        for i, entry in enumerate(vocab):
            if isinstance(entry, list) and entry and isinstance(entry[0], str):
                yield entry[0], i
    for token in config.get("added_tokens") or []:
        if isinstance(token, dict) and isinstance(token.get("content"), str):
            yield token["content"], token.get("id")


def _check_role_ids(config: dict) -> None:
    """Each special role ([CLS], [SEP], [PAD], [MASK]: the first candidate spelling the file holds)
    needs an id no other token has. `tokenizers` keeps one token per id when it loads and saves a
    file, so a clash ([MASK] = [PAD]) would come out as a role with no token, or two roles on one id."""
    role_of: dict[str, str] = {}
    names = {token for token, _ in _token_ids(config)}
    for role, candidates in SPECIAL_CANDIDATES.items():
        for token in candidates:
            if token in names:
                role_of[token] = role
                break
    holders: dict[object, set[str]] = {}
    for token, token_id in _token_ids(config):
        if token in role_of:
            holders.setdefault(token_id, set())
    for token, token_id in _token_ids(config):
        if token_id in holders:
            holders[token_id].add(token)
    for token_id, tokens in holders.items():
        if len(tokens) > 1:
            named = " and ".join(f"{token!r}" + (f" (its {role_of[token]} token)" if token in role_of else "")
                                 for token in sorted(tokens, key=lambda t: (t not in role_of, t)))
            raise TokenizerError(f"tokenizer gives id {token_id!r} to {named}: masked-LM rows need a [CLS]-, "
                                 "[SEP]-, [PAD]- and [MASK]-like token each with an id of its own; give each its "
                                 "own id in the tokenizer.json")


_PATTERN_PLACES = ("normalizer", "pre_tokenizer", "decoder")  # where a tokenizer.json holds regexes


def _regexes(config: dict):
    """(where, pattern) of every regex a tokenizer.json holds: the `{"Regex": pattern}` of a `pattern`
    (Split pre-tokenizers, Replace normalizers and decoders) inside the normalizer, pre-tokenizer and
    decoder, at any depth of their Sequences. Nowhere else: a vocabulary may hold the token `Regex`."""

    def walk(node, where: str):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "pattern" and isinstance(value, dict) and "Regex" in value:
                    yield f"{where}.pattern", value["Regex"]
                else:
                    yield from walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, f"{where}[{i}]")

    for place in _PATTERN_PLACES:
        yield from walk(config.get(place), place)


def check_tokenizer_json(raw: str) -> dict:
    """Check a tokenizer.json before `tokenizers` builds or serialises it: JSON with a model, ids in
    range without large gaps, and no regex that can backtrack catastrophically (regex_safety).
    Returns the parsed JSON.

    Raises:
        TokenizerError: naming what is wrong (not JSON, not a tokenizer, an id, a pattern).
    """
    if len(raw) > MAX_TOKENIZER_BYTES:
        raise TokenizerError(f"tokenizer file is {len(raw):,} bytes, over the {MAX_TOKENIZER_BYTES:,} accepted")
    try:
        config = parsed(raw)
    except (ValueError, RecursionError) as error:
        raise TokenizerError(f"not a valid tokenizer.json: not JSON ({str(error)[:200]})") from None
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
        keys = ", ".join(sorted(map(str, config))[:5]) if isinstance(config, dict) else type(config).__name__
        raise TokenizerError(f"valid JSON but not a tokenizer.json: it has no \"model\" object (found: {keys}); "
                             "give the tokenizer.json that `tokenizers` or `transformers` saves")
    _check_id_space(_ids_in(config))
    _check_role_ids(config)
    for where, pattern in _regexes(config):
        if not isinstance(pattern, str):
            raise TokenizerError(f"tokenizer {where}: a regex must be a string, got {type(pattern).__name__}")
        try:
            check_regex(pattern)
        except UnsafeRegex as error:
            raise TokenizerError(f"tokenizer {where}: {error}") from None
    return config


def unk_token(config: dict) -> str:
    """The unknown token of a tokenizer.json: its model's `unk_token`, else `[UNK]` (whether the
    tokenizer holds it or not)."""
    return (config.get("model") or {}).get("unk_token") or "[UNK]"


def unk_id_of(tokenizer: Tokenizer, config: dict) -> int:
    """The id of the unknown token (-1: none): a Unigram model names it by id, the others by string."""
    model = config.get("model") or {}
    if model.get("type") == "Unigram":  # Unigram names its unknown piece by id
        unk = model.get("unk_id")
        return unk if isinstance(unk, int) and not isinstance(unk, bool) else -1
    found = tokenizer.token_to_id(unk_token(config))
    return -1 if found is None else found


def _vocab_size(vocab: dict[str, int]) -> int:
    """Largest id + 1: the size every id-indexed table needs. A vocabulary with gaps in its ids has
    fewer tokens than that, and counting tokens would index past the end of those tables."""
    if not vocab:
        raise TokenizerError("tokenizer has an empty vocabulary")
    lowest, highest = min(vocab.values()), max(vocab.values())
    if lowest < 0 or highest >= 2**31 - 1:
        raise TokenizerError(f"tokenizer ids must lie in [0, 2**31 - 1), got [{lowest}, {highest}]")
    return highest + 1


def _load(raw: str) -> tuple[Tokenizer, dict]:
    """The checked tokenizer.json (check_tokenizer_json) built by `tokenizers`, and its parsed JSON;
    a normalizer that grows text past bounds, or panics on the probe, is refused."""
    config = check_tokenizer_json(raw)
    try:
        tokenizer = Tokenizer.from_str(raw)
    except Exception as error:  # tokenizers raises a bare Exception on a malformed file
        raise TokenizerError(f"not a valid tokenizer.json: {error}") from None
    if tokenizer.normalizer is not None:
        try:
            check_growth(tokenizer.normalizer.normalize_str, config.get("normalizer"))
        except NormalizerGrowth as error:
            raise TokenizerError(f"tokenizer {error}: refused") from None
        except BaseException as error:  # pyo3's PanicException: a regex gave up on a probe
            if not is_panic(error):
                raise
            raise TokenizerError(f"tokenizer normalizer: {panic_error(error)} (on a short probe text at "
                                 f"load: refused)") from None
    return tokenizer, config


def _role_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """role -> id of the first candidate spelling (SPECIAL_CANDIDATES) the tokenizer holds; every
    role is needed, each with an id of its own."""
    ids, missing = {}, []
    for role, candidates in SPECIAL_CANDIDATES.items():
        found = [tokenizer.token_to_id(tok) for tok in candidates if tokenizer.token_to_id(tok) is not None]
        if found:
            ids[role] = found[0]
        else:
            missing.append(f"no {role} token (looked for {', '.join(candidates)})")
    if missing:  # every role at once: a T5-style tokenizer lacks both [CLS] and [MASK]
        raise TokenizerError(f"tokenizer has {' and '.join(missing)}: masked-LM rows need a [CLS]-, [SEP]-, "
                             f"[PAD]- and [MASK]-like special token; add the missing ones to the tokenizer "
                             f"(tokenizer.add_special_tokens) or use an encoder's tokenizer")
    shared = {i: [role for role in ids if ids[role] == i] for i in ids.values()}
    for token_id, roles in shared.items():
        if len(roles) > 1:  # what the file names apart, the loaded tokenizer maps to one id
            raise TokenizerError(f"tokenizer maps its {' and '.join(roles)} tokens to one id, {token_id}: "
                                 "masked-LM rows need an id of its own for each; give each its own id in the "
                                 "tokenizer.json")
    return ids


@dataclass(frozen=True)
class TokenizerSpec:
    """A tokenizer as JSON plus the facts derived from it. Small and picklable: Beam ships it to
    workers, which build the Tokenizer in `DoFn.setup`."""

    json: str
    cls_id: int
    sep_id: int
    pad_id: int
    mask_id: int
    vocab_size: int
    special_ids: tuple[int, ...]
    unused_ids: tuple[int, ...] = field(default=())
    continuation_ids: tuple[int, ...] = field(default=())
    unk_id: int = -1

    @classmethod
    def from_json(cls, raw: str) -> TokenizerSpec:
        """The spec of a tokenizer.json, checked first (check_tokenizer_json).

        Raises:
            TokenizerError: the file is not a safe tokenizer.json, or lacks a special token."""
        tokenizer, config = _load(raw)
        ids = _role_ids(tokenizer)
        special = sorted(i for i, tok in tokenizer.get_added_tokens_decoder().items() if tok.special)
        special = sorted(set(special) | set(ids.values()))
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        vocab_size = _vocab_size(vocab)
        unused = sorted(i for tok, i in vocab.items() if _UNUSED.match(tok))
        is_continuation = continues_word(config)  # by the tokenizer's family (families.py)
        never = set(special)  # a set: the list is searched once per vocabulary entry (seconds at 100k+ ids)
        continuation = sorted(i for tok, i in vocab.items() if is_continuation(tok) and i not in never)
        return cls(
            json=raw,
            cls_id=ids[SPECIAL_CLS],
            sep_id=ids[SPECIAL_SEP],
            pad_id=ids[SPECIAL_PAD],
            mask_id=ids["mask"],
            vocab_size=vocab_size,
            special_ids=tuple(special),
            unused_ids=tuple(unused),
            continuation_ids=tuple(continuation),
            unk_id=unk_id_of(tokenizer, config),
        )

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the canonical tokenizer JSON (after truncation and padding were switched off)."""
        canonical = json.dumps(parsed(self.json), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def layout(self, seq_len: int, min_tokens: int) -> RowLayout:
        return RowLayout(seq_len=seq_len, cls_id=self.cls_id, sep_id=self.sep_id, pad_id=self.pad_id,
                         min_tokens=min_tokens, unk_id=self.unk_id)

    def masking_rule(self, mlm_probability: float, mask_replace_prob: float, random_replace_prob: float,
                     unit: str = UNIT_TOKEN, span_p: float = 0.2, max_span: int = 10) -> MaskingRule:
        """Special ids are never selected; random replacements come from ordinary ids only
        (not special, not `[unused*]`)."""
        return MaskingRule.from_ids(self.vocab_size, list(self.special_ids), list(self.unused_ids), self.mask_id,
                                    mlm_probability, mask_replace_prob, random_replace_prob, unit=unit,
                                    continuation_ids=list(self.continuation_ids), span_p=span_p, max_span=max_span)


def build_tokenizer(spec: TokenizerSpec) -> Tokenizer:
    """The worker-side Tokenizer. Special-token strings inside the text ("[SEP]" in a book) are
    tokenized as plain text, so raw input can never forge a row boundary or a mask; a Unigram
    model's special pieces are out of its lattice (`content.content_tokenizer_json`)."""
    content = content_tokenizer_json(spec.json, set(spec.special_ids))
    tokenizer = built_from(Tokenizer.from_str(content), content)  # read back without to_str (facts.py)
    if content is not spec.json:
        check_added_ids(tokenizer, parsed(spec.json))
    release_parses()  # a Unigram's parse, kept by the content check, is not kept for the process's life
    tokenizer.encode_special_tokens = True
    return tokenizer
