"""The hand-off to people without MaskBeam: an output made with a tokenizer of one's own, published
with --dry_run, is loaded by `datasets` + `transformers` alone (a Python that cannot import MaskBeam)
and trained on for two steps by the code the dataset card shows; the card's MaskBeam collator block
runs after MaskBeam is installed from its source."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from pipeline.sample import SAMPLE_BOOKS
from schemas import manifest as m
from schemas import options as o
from schemas.shard import MASKING_MODES
from tests.conftest import REPO, run_preprocess

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")

OWN_TOKENIZER = REPO / "tests" / "data" / "tokenizers" / "roberta.json"  # <s> </s> <pad> <mask>, 3,000 ids
ROLES = {"cls_token_id": o.SPECIAL_CLS, "sep_token_id": o.SPECIAL_SEP, "pad_token_id": o.SPECIAL_PAD,
         "mask_token_id": m.KEY_MASK_ID}
TINY_BERT = "BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, "
SUBPROCESS_TIMEOUT = 600

# Run first in every script: this Python must not see MaskBeam (nor the editable install's finder).
NO_MASKBEAM = """
import importlib.util, sys
assert not any(type(f).__name__.startswith("_EditableFinder") for f in sys.meta_path), sys.meta_path
for name in ("pipeline", "schemas", "jobs"):
    assert importlib.util.find_spec(name) is None, (name, importlib.util.find_spec(name))
try:
    import pipeline
except ModuleNotFoundError:
    print("import pipeline: ModuleNotFoundError")
else:
    raise SystemExit("MaskBeam is importable: " + pipeline.__file__)
"""
CHECKS = """
import json, math
manifest = json.load(open(folder + "/manifest.json"))
ids = manifest["tokenizer"]["special_ids"]
assert (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id, tokenizer.mask_token_id) == \\
    (ids["cls"], ids["sep"], ids["pad"], ids["mask"]), tokenizer
assert trainer.state.global_step == 2, trainer.state.global_step
loss = trainer.state.log_history[-1]["train_loss"]
assert math.isfinite(loss), trainer.state.log_history
print("trained", trainer.state.global_step, "steps, loss", loss, "collator", type(trainer.data_collator).__name__)
"""


@pytest.fixture(scope="module")
def handoff(tmp_path_factory) -> Path:
    """Per masking mode: one short book with the tokenizer of one's own (rows of 32 tokens), and its
    --dry_run upload folder."""
    from jobs.publish import run

    base = tmp_path_factory.mktemp("handoff")
    for mode in MASKING_MODES:
        run_preprocess([SAMPLE_BOOKS / "classics__yellow_wallpaper.txt"], base / mode, "--max_seq_length", "32",
                       "--min_tokens", "8", "--masking", mode, "--validation_fraction", "0.05",
                       tokenizer=OWN_TOKENIZER)
        run([str(base / mode), "--repo_id", "someone/books-mlm", "--dry_run", str(base / f"{mode}-hub"),
             "--license", "cc0-1.0"])
    return base


@pytest.mark.parametrize("mode", MASKING_MODES)
def test_auto_tokenizer_of_the_output_and_of_the_upload(handoff, mode):
    """AutoTokenizer on the output folder and on the dry-run folder names the manifest's special ids
    (without the configs it named none, and DataCollatorForLanguageModeling refused it)."""
    manifest = json.loads((handoff / mode / m.MANIFEST_FILE).read_text())
    for folder in (handoff / mode, handoff / f"{mode}-hub"):
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
        for attribute, role in ROLES.items():
            assert getattr(tokenizer, attribute) == manifest[m.KEY_TOKENIZER][m.KEY_SPECIAL_IDS][role], attribute
        assert tokenizer.model_max_length == manifest[m.KEY_CONFIG][o.MAX_SEQ_LENGTH]
        transformers.DataCollatorForLanguageModeling(tokenizer)  # raises without a mask token
        for name in m.TOKENIZER_FILES:
            assert (folder / name).read_bytes() == (handoff / mode / name).read_bytes()


def _python_blocks(card: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", card, flags=re.S)


def _card_script(folder: Path, with_maskbeam: bool) -> str:
    """The card's Python blocks as a recipient runs them on the downloaded folder: the download
    block replaced by the folder, two steps of a tiny BERT instead of a long run."""
    blocks = _python_blocks((folder / "README.md").read_text(encoding="utf-8"))
    assert "snapshot_download(" in blocks[0]
    script = [NO_MASKBEAM if not with_maskbeam else "", f"folder = {str(folder)!r}"]
    for block in blocks[1:]:
        if "from pipeline" in block and not with_maskbeam:
            continue
        if "max_steps=10_000" in block:
            block = block.replace("max_steps=10_000", "max_steps=2")
        if "BertConfig(vocab_size=" in block:
            block = block.replace("BertConfig(", TINY_BERT, 1)
        script.append(block)
    return "\n".join(script) + CHECKS


def _python_without_maskbeam(script: str, cwd: Path, *, extra_path: tuple[str, ...] = ()):
    """Run `script` in a Python that has the installed packages but not MaskBeam: no site processing
    (-S: no `.pth` file, so no editable-install finder mapping `pipeline` to a checkout), site-packages
    on PYTHONPATH by hand, cwd a folder without the project; Hub and `datasets` offline, their caches
    in `cwd`."""
    site = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HF_", "MASKBEAM"))}
    env.update(PYTHONPATH=os.pathsep.join([*extra_path, *dict.fromkeys(site)]), PYTHONNOUSERSITE="1",
               HF_HOME=str(cwd / "hf-home"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    done = subprocess.run([sys.executable, "-S", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-6000:]}"
    return done.stdout


@pytest.mark.parametrize("mode", MASKING_MODES)
def test_a_recipient_without_maskbeam_trains_on_the_upload(handoff, mode, tmp_path):
    """The dry-run folder stands for the downloaded repository; the card's code, run by `datasets` and
    `transformers` alone, loads it (AutoTokenizer from the folder) and trains two steps:
    default_data_collator for static masks, DataCollatorForLanguageModeling for dynamic ones."""
    script = _card_script(handoff / f"{mode}-hub", with_maskbeam=False)
    assert ("default_data_collator" in script) == (mode == "static")
    assert ("DataCollatorForLanguageModeling(tokenizer" in script) == (mode == "dynamic")
    out = _python_without_maskbeam(script, tmp_path)
    assert "import pipeline: ModuleNotFoundError" in out
    collator = "function" if mode == "static" else "DataCollatorForLanguageModeling"
    assert "trained 2 steps" in out and f"collator {collator}" in out, out


def test_the_card_s_maskbeam_collator_after_installing_from_source(handoff, tmp_path):
    """The dynamic card's install line and import path: MaskBeam installed from a copy of its source
    (offline, no dependencies: they are there) into a folder of its own; the card's MlmCollator block
    then trains two steps with MaskBeam's seeded masks."""
    source = tmp_path / "maskbeam"
    source.mkdir()
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in ("pipeline", "schemas", "jobs"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    card = (handoff / "dynamic-hub" / "README.md").read_text(encoding="utf-8")
    assert 'pip install "maskbeam[train] @ git+' in card and 'pip install ".[train]"' in card
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                          "--quiet", "--target", str(target), str(source)], capture_output=True, text=True,
                         timeout=SUBPROCESS_TIMEOUT)
    if pip.returncode != 0 and "setuptools" in pip.stderr:
        pytest.skip(f"cannot build MaskBeam offline here: {pip.stderr.strip().splitlines()[-1]}")
    assert pip.returncode == 0, pip.stderr
    script = _card_script(handoff / "dynamic-hub", with_maskbeam=True)
    assert "from pipeline.consumers.loading import MlmCollator, epoch_callback" in script
    script = f"import pipeline\nassert pipeline.__file__.startswith({str(target)!r}), pipeline.__file__\n" + script
    out = _python_without_maskbeam(script, tmp_path, extra_path=(str(target),))
    assert "trained 2 steps" in out and "collator MlmCollator" in out, out
