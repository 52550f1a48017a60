"""A one-page report of a processed dataset: plots people look at before they trust data.

Figures: content length of rows, tokens per input, top tokens, the [UNK] rate per input, mask
ratios per shard, and the share of padding. Static PNGs plus one self-contained HTML page.
"""

from __future__ import annotations

import base64
import html
import os
import posixpath
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from pipeline.consumers.outputs import (
    check_id_rows,
    check_no_nulls,
    load_manifest,
    manifest_with_inputs,
    masking_rule,
    tokenizer_spec,
    verified_shard_paths,
)
from pipeline.storage.arrow_files import fixed_list_to_numpy, read_table
from pipeline.tokenizer.spec import build_tokenizer
from schemas import manifest as m
from schemas import options as o
from schemas.shard import ATTENTION_MASK, IGNORE_INDEX, INPUT_IDS, LABELS, MASKING_STATIC

TOP_TOKENS = 30
TOP_INPUTS = 40


@dataclass
class SplitStats:
    lengths: list[np.ndarray] = field(default_factory=list)
    token_counts: np.ndarray | None = None
    padding: int = 0
    slots: int = 0
    shard_eligible: list[int] = field(default_factory=list)


def collect(directory: str, split: str = m.TRAIN) -> tuple[dict, SplitStats]:
    """Stream the shards of a split once: lengths, token frequencies, padding, eligible per shard.
    Each shard is checked against the manifest (size, sha256) before it is read, and its ids and
    labels against the vocabulary before they index anything (a label of 2e9 would make the
    bincount ask for 15 GiB)."""
    manifest = load_manifest(directory)
    rule = masking_rule(manifest)
    seq_len = manifest[m.KEY_CONFIG]["max_seq_length"]
    static = manifest[m.KEY_CONFIG]["masking"] == MASKING_STATIC
    stats = SplitStats(token_counts=np.zeros(rule.vocab_size, dtype=np.int64))
    for path in verified_shard_paths(directory, manifest, split):
        table: pa.Table = read_table(path)
        eligible = first_row = 0
        for batch in table.to_batches():
            read = [INPUT_IDS, ATTENTION_MASK] + ([LABELS] if static else [])
            check_no_nulls(path, {name: batch.column(name) for name in read}, first_row)
            ids = fixed_list_to_numpy(batch.column(INPUT_IDS), seq_len)
            attention = fixed_list_to_numpy(batch.column(ATTENTION_MASK), seq_len)
            check_id_rows(path, INPUT_IDS, ids, rule.vocab_size, first_row)
            if static:
                labels = fixed_list_to_numpy(batch.column(LABELS), seq_len)
                check_id_rows(path, LABELS, labels, rule.vocab_size, first_row, IGNORE_INDEX)
                ids = np.where(labels != IGNORE_INDEX, labels, ids)
            first_row += batch.num_rows
            lengths = attention.sum(axis=1)
            stats.lengths.append(lengths - 2)
            stats.padding += int(attention.size - lengths.sum())
            stats.slots += int(attention.size)
            real = ids[attention.astype(bool)]
            stats.token_counts += np.bincount(real, minlength=rule.vocab_size)
            eligible += int((~rule.is_special[real]).sum())
        stats.shard_eligible.append(eligible)
    return manifest, stats


def _label(text: str) -> str:
    """A name from the data as a plot label: matplotlib reads `$...$` as math and stops at control
    characters, so `$` is escaped and non-printable characters shown as U+FFFD."""
    return "".join(ch if ch.isprintable() else "\ufffd" for ch in str(text)).replace("$", r"\$")


def _figure(draw, path: str, size=(8, 4.2)) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size)
    draw(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight", pad_inches=0.1)  # long labels grow the image, never cut
    plt.close(fig)
    return path


def _base64(path: str) -> str:
    with open(path, "rb") as handle:
        return base64.b64encode(handle.read()).decode()


def write_report(directory: str, out_dir: str, html_path: str | None = None) -> dict[str, str]:
    """Write the PNGs to out_dir (and the HTML page); returns {figure name: png path}."""
    manifest, stats = collect(directory)
    spec = tokenizer_spec(directory, manifest)
    manifest = manifest_with_inputs(directory, manifest)  # its per-input sections, from INPUTS_FILE
    tokenizer = build_tokenizer(spec)
    os.makedirs(out_dir, exist_ok=True)
    inputs = sorted(manifest[m.KEY_INPUTS], key=lambda e: -e[m.TOKENS])[:TOP_INPUTS]
    names = [_label(posixpath.basename(e[m.KEY_PATH])[:40]) for e in inputs]
    seq_len = manifest[m.KEY_CONFIG]["max_seq_length"]
    lengths = np.concatenate(stats.lengths) if stats.lengths else np.zeros(0)
    ordinary = stats.token_counts.copy()
    ordinary[list(spec.special_ids)] = 0
    top = np.argsort(ordinary)[::-1][:TOP_TOKENS]
    shards = manifest[m.KEY_SPLITS][m.TRAIN][m.KEY_SHARDS]
    figures = {}

    def lengths_plot(ax):
        ax.hist(lengths, bins=min(64, seq_len), color="#2a7")
        ax.set(title=f"Content tokens per row (train, {len(lengths):,} rows, max {seq_len - 2})",
               xlabel="content tokens", ylabel="rows")
        ax.set_yscale("log")

    def tokens_plot(ax):
        ax.barh(names[::-1], [e[m.TOKENS] for e in inputs][::-1], color="#47a")
        ax.set(title=f"Tokens per input (top {len(inputs)})", xlabel="tokens")
        ax.tick_params(axis="y", labelsize=6)

    def top_plot(ax):
        labels = [_label(tokenizer.id_to_token(int(i))) for i in top]
        ax.bar(range(len(top)), ordinary[top] / max(ordinary.sum(), 1), color="#a74")
        ax.set_xticks(range(len(top)), labels, rotation=70, fontsize=7)
        ax.set(title="Top tokens (share of ordinary tokens, train)", ylabel="share")

    gate = manifest[m.KEY_CONFIG].get(o.MAX_UNK_FRACTION)
    measured = sorted((e for e in (*manifest[m.KEY_INPUTS], *manifest[m.KEY_SKIPPED])
                       if e.get(m.KEY_UNK_FRACTION) is not None), key=lambda e: -e[m.KEY_UNK_FRACTION])[:TOP_INPUTS]

    def unk_plot(ax):
        labels = [_label(posixpath.basename(e[m.KEY_PATH])[:40]) for e in measured]
        rates = [e[m.KEY_UNK_FRACTION] for e in measured]
        colors = ["#c55" if m.KEY_REASON in e else "#47a" for e in measured]
        ax.barh(labels[::-1], rates[::-1], color=colors[::-1])
        if gate is not None and gate < 1:
            ax.axvline(gate, color="k", linestyle="--", label=f"[UNK] gate {gate:g} (red: skipped)")
            ax.legend(fontsize=7)
        ax.set(title=f"[UNK] rate per input (top {len(measured)} of {len(manifest[m.KEY_INPUTS])} kept "
                     f"and {len(manifest[m.KEY_SKIPPED])} skipped)", xlabel="share of tokens")
        ax.tick_params(axis="y", labelsize=6)

    mixed = [e for e in (*manifest[m.KEY_INPUTS], *manifest[m.KEY_SKIPPED]) if e.get(m.KEY_SCRIPTS)]
    mixed = sorted(mixed, key=lambda e: (e[m.KEY_SCRIPTS].get("Latin", 0), e[m.KEY_PATH]))[:TOP_INPUTS]

    def scripts_plot(ax):
        labels = [_label(posixpath.basename(e[m.KEY_PATH])[:40]) for e in mixed][::-1]
        left = np.zeros(len(mixed))
        for script in sorted({s for e in mixed for s in e[m.KEY_SCRIPTS]}):
            shares = np.array([e[m.KEY_SCRIPTS].get(script, 0.0) for e in mixed][::-1])
            ax.barh(labels, shares, left=left, label=_label(script))
            left += shares
        ax.set(title=f"Script mix of the letters per input (the {len(mixed)} least Latin)", xlabel="share of letters",
               xlim=(0, 1))
        ax.legend(fontsize=7, loc="lower right")
        ax.tick_params(axis="y", labelsize=6)

    def mask_plot(ax):
        x = np.arange(len(shards), dtype=float)
        selected = np.array([s[m.KEY_MASK_COUNTS][m.SELECTED] for s in shards], dtype=float)
        eligible = np.maximum(np.array(stats.shard_eligible, dtype=float), 1)
        series = [(f"{name} / selected", np.array([s[m.KEY_MASK_COUNTS][name] for s in shards]) / np.maximum(
            selected, 1), color, marker) for name, color, marker in
                  ((m.MASKED, "#2a7", "o"), (m.RANDOM, "#a74", "^"), (m.UNCHANGED, "#47a", "v"))]
        series.append(("selected / eligible", selected / eligible, "k", "s"))
        # Random and unchanged sit on the same 0.1: each series is dodged sideways and drawn with its
        # own marker, and with few shards every value is written next to its point.
        for k, (label, values, color, marker) in enumerate(series):
            xs = x + (k - 1.5) * 0.12
            ax.plot(xs, values, marker=marker, linestyle="-" if len(shards) > 1 else "", color=color, label=label)
            if len(shards) <= 4:
                for xi, v in zip(xs, values):
                    ax.annotate(f"{v:.3f}", (xi, v), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set(title=f"Mask ratios per train shard ({len(shards)} shard{'s' if len(shards) != 1 else ''})",
               xlabel="train shard", ylabel="ratio", ylim=(0, 1), xlim=(-0.6, max(len(shards) - 0.4, 0.6)))
        ax.set_xticks(x if len(shards) <= 20 else np.linspace(0, len(shards) - 1, 11).round())
        ax.legend(fontsize=7, loc="center right")

    def padding_plot(ax):
        real = stats.slots - stats.padding
        ax.pie([real, stats.padding], labels=["tokens", "padding"], autopct="%1.1f%%", colors=["#2a7", "#ccc"])
        ax.set(title="Share of padding (train)")

    for name, draw, size in (("row_lengths", lengths_plot, (8, 4.2)), ("tokens_per_input", tokens_plot, (8, 7)),
                             ("top_tokens", top_plot, (9, 4.2)), ("unk_rate", unk_plot, (8, 7)),
                             ("script_mix", scripts_plot, (8, 7)),
                             ("mask_ratios", mask_plot, (8, 4.2)), ("padding", padding_plot, (5, 4))):
        figures[name] = _figure(draw, os.path.join(out_dir, f"{name}.png"), size)
    if html_path:
        write_html(manifest, figures, stats, html_path)
    return figures


def _e(value: object) -> str:
    """Any value as HTML text (quotes too): every field of the page goes through here."""
    return html.escape(str(value), quote=True)


def write_html(manifest: dict, figures: dict[str, str], stats: SplitStats, path: str) -> None:
    """One self-contained page: the summary table and every figure inlined as base64 PNG. Every
    value from the manifest is escaped (_e), whatever its type should be."""
    counts = manifest[m.KEY_COUNTS]
    config = manifest[m.KEY_CONFIG]
    rows = "".join(f"<tr><td>{_e(k)}</td><td>{_e(f'{v:,}')}</td></tr>"
                   for k, v in sorted(counts.items()) if isinstance(v, int))
    by_reason = counts.get(m.FILES_SKIPPED_BY_REASON) or {}
    reasons = "".join(f"<tr><td>{_e(reason)}</td><td>{_e(f'{n:,}')}</td></tr>" for reason, n in by_reason.items())
    reason_table = (f"<table><tr><th>reason</th><th>inputs</th></tr>{reasons}</table>" if reasons else "")
    skipped = "".join(f"<li>{_e(posixpath.basename(s[m.KEY_PATH]))}: {_e(s[m.KEY_REASON])}</li>"
                      for s in manifest[m.KEY_SKIPPED]) or "<li>none</li>"
    near = "".join(f"<tr><td>{_e(posixpath.basename(e[m.KEY_PATH]))}</td>"
                   f"<td>{_e(posixpath.basename(e[m.KEY_NEAR_DUPLICATE_OF]))}</td>"
                   f"<td>{_e(f'{e[m.KEY_SIMILARITY]:.2f}')}</td></tr>" for e in manifest.get(m.KEY_NEAR_DUPLICATES, []))
    near_table = (f"<table><tr><th>input</th><th>near duplicate of</th><th>similarity</th></tr>{near}</table>"
                  if near else "<p>none (word-bigram similarity of every pair below 0.5)</p>")
    near_dedup = config.get(o.NEAR_DEDUP)
    dropping = f"dropped at similarity {near_dedup:g}" if near_dedup else "reported, not dropped"
    kept_scripts = f"; scripts kept: {_e(', '.join(config[o.SCRIPTS]))}" if config.get(o.SCRIPTS) else ""
    gates = (f"<p>[UNK] gate: inputs with more than {_e(f'{config.get(o.MAX_UNK_FRACTION, 1):g}')} of their "
             f"tokens [UNK] are skipped; near duplicates are {_e(dropping)}{kept_scripts}.</p>")
    images = "".join(
        f'<figure><img alt="{_e(name)}" src="data:image/png;base64,{_base64(p)}">'
        f"<figcaption>{_e(name.replace('_', ' '))}</figcaption></figure>" for name, p in figures.items())
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>MaskBeam report</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}}td{{padding:2px 12px}}
figure{{margin:1.5em 0}}img{{max-width:100%}}</style></head><body>
<h1>MaskBeam dataset report</h1>
<p>masking {_e(config[o.MASKING])}, unit {_e(config.get(o.MASKING_UNIT, o.UNIT_TOKEN))},
max_seq_length {_e(config[o.MAX_SEQ_LENGTH])}, packing {_e(config[o.PACKING])}, seed {_e(config[o.SEED])},
tokenizer {_e(manifest[m.KEY_TOKENIZER][m.KEY_NAME_OR_PATH])};
padding {stats.padding / max(stats.slots, 1):.1%} of train slots.</p>
<table>{rows}</table>
<h2>Skipped inputs</h2>{reason_table}<ul>{skipped}</ul>
<h2>Quality gates</h2>{gates}
<h3>Near-duplicate inputs</h3>{near_table}
{images}
</body></html>
"""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(page)
