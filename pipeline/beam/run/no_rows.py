"""A run that makes no rows is an error, not an empty dataset: every input was skipped, and the
reasons say why (an empty folder, the wrong --text_column, binary files, ...).

Such a run writes no manifest (whose presence marks a complete output): what it found stays in
its temp folder (NO_ROWS_FILE, beside the run file), so `--resume` or a plain retry continues the
folder, and `validate` or a loader never takes it for a dataset."""

from __future__ import annotations

from collections.abc import Iterable

from schemas import manifest as m


class NoRowsError(ValueError):
    """The run made no rows; the message (one line) lists the skip reasons with their counts."""


def made_rows(manifest: dict) -> bool:
    return any(manifest[m.KEY_SPLITS][split][m.KEY_ROWS] for split in manifest[m.KEY_SPLITS])


def check_made_rows(manifest: dict, entries: Iterable[tuple[str, dict]] = ()) -> None:
    """Raise NoRowsError when a finished run's manifest holds no rows. `entries`: its per-input
    (section, entry) records (inputs_file.read_entries), read only then.

    Raises:
        NoRowsError: naming each skip reason and how many inputs it skipped (and a few paths).
    """
    if made_rows(manifest):
        return
    reasons: dict[str, tuple[list[str], list[int]]] = {}
    skipped = kept = 0
    for section, entry in entries:
        if section == m.KEY_INPUTS:
            kept += 1
        elif section == m.KEY_SKIPPED:
            skipped += 1
            paths, count = reasons.setdefault(entry[m.KEY_REASON], ([], [0]))
            count[0] += 1
            if len(paths) < 3:
                paths.append(entry[m.KEY_PATH])
    listed = "; ".join(f"{count} x {reason} ({', '.join(paths)}{' ...' if count > 3 else ''})"
                       for reason, (paths, (count,)) in sorted(reasons.items()))
    raise NoRowsError(f"the run made no rows: {skipped} input(s) skipped"
                      + (f", {kept} too short for a row (--min_tokens)" if kept else "")
                      + (f": {listed}" if listed else "")
                      + "; no manifest was written: fix the inputs or options and rerun into the same --output")
