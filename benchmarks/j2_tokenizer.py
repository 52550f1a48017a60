"""AI21 J2's tokenizer as a tokenizer.json: the SentencePiece `.model` the `ai21-tokenizer` wheel
ships (Apache-2.0; a 262,144-piece byte-fallback Unigram, `nmt_nfkc` precompiled charsmap, no
dummy prefix, pieces across spaces, user-defined pieces `,` `(` `)`), converted by transformers'
`SpmConverter.build_tokenizer_from_spm_proto` (protobuf, no `sentencepiece` needed), with masked-LM
special tokens added the way ModernBERT added them to OLMo's tokenizer.

The converter writes the user-defined pieces as an isolated `Split` of literal characters
(`,|\\(|\\)`) after the normalizer `Precompiled` + `Replace(" ", "▁")`: the SentencePiece family's
case of literal isolated characters. Never committed (6.7 MB `.model`, ~14 MB as JSON): converted
at test or benchmark time.

    python -m benchmarks.j2_tokenizer --out /tmp/j2.json
"""

from __future__ import annotations

import argparse
import importlib.resources
from pathlib import Path

from benchmarks.real_tokenizers import with_mlm_specials


def j2_model_path() -> Path:
    """The `.model` inside the installed `ai21-tokenizer` wheel (ImportError where it is not installed)."""
    import ai21_tokenizer

    return Path(str(importlib.resources.files(ai21_tokenizer) / "resources" / "j2-tokenizer" / "j2-tokenizer.model"))


def convert_j2(model_path: Path | None = None) -> str:
    """J2's `.model` as transformers converts it (a tokenizer.json string, no specials added)."""
    from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf

    proto = import_protobuf().ModelProto()
    proto.ParseFromString((model_path or j2_model_path()).read_bytes())
    vocab = [(piece.piece, piece.score) for piece in proto.pieces]
    return SpmConverter.build_tokenizer_from_spm_proto(proto, vocab).to_str()


def j2_mlm_json() -> str:
    """J2 converted, with the masked-LM specials."""
    return with_mlm_specials(convert_j2())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the tokenizer.json")
    args = parser.parse_args()
    args.out.write_text(j2_mlm_json(), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
