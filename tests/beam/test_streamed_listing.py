"""The listing as a stream (#36): the launcher and the lister read the inputs' folders one at a time
and never hold the listing; the streamed order, entries and left-out outputs are the whole sorted
listing's, and the near-duplicate pairing holds only bands, not every input's name."""

from __future__ import annotations

import os
import re
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.beam.reading.listed_inputs import InputListing, list_inputs
from pipeline.beam.reading.listing import LocalEntry, _entry, _inside, iter_local
from pipeline.beam.reading.work_units import (
    InputError,
    WorkUnit,
    group_units,
    iter_groups,
    iter_split_large_inputs,
    split_large_inputs,
)
from pipeline.console.preflight import GLOB_CHARS, _glob_root


def _oracle(pattern: str) -> list[LocalEntry]:
    """The listing as it was before it streamed: `os.walk` over the whole tree, then one sort of
    every entry by path (the links' rules are `listing`'s)."""
    from apache_beam.io.filesystem import FileSystem

    def walk(top, root, keep):
        out = []
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            whole = []
            for name in sorted(dirnames):
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    if not _inside(path, root) and keep(path):
                        out.append(LocalEntry(path, refused="refused: a symbolic link to a folder out of the input "
                                                            "folder (not followed)"))
                    continue
                if keep(path):
                    whole.append(path)
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for path in whole:
                out.extend(walk(path, root, lambda p: True))
                dirnames.remove(os.path.basename(path))
            out.extend(_entry(os.path.join(dirpath, name), root) for name in filenames
                       if keep(os.path.join(dirpath, name)))
        return out

    if not GLOB_CHARS & set(pattern):
        if os.path.isdir(pattern):
            return sorted(walk(pattern, os.path.realpath(pattern), lambda p: True), key=lambda e: e.path)
        return [_entry(pattern, os.path.realpath(pattern))] if os.path.lexists(pattern) else []
    top = _glob_root(pattern)
    regex = re.compile(FileSystem.translate_pattern(pattern))
    return sorted(walk(top, os.path.realpath(top), lambda p: bool(regex.match(p))), key=lambda e: e.path)


# Names chosen to sort badly: a file that is a prefix of a folder, "-" and "." below "/", digits.
_NAMES = st.sampled_from(["a", "a.txt", "a-b", "ab", "a b", "b", "b.jsonl", "0", "z~", "é", "a.", "aa"])


@st.composite
def _trees(draw):
    """(files, folders, links) relative to the root: nested folders, files, and links to files and
    folders inside the tree, out of it, broken, and a loop."""
    folders = {""}
    files = set()
    for _ in range(draw(st.integers(1, 25))):
        parent = draw(st.sampled_from(sorted(folders)))
        name = draw(_NAMES)
        path = os.path.join(parent, name) if parent else name
        if path in folders or path in files or any(f.startswith(path + "/") for f in folders | files):
            continue
        if draw(st.booleans()) and path.count("/") < 3:
            folders.add(path)
        else:
            files.add(path)
    links = []
    for _ in range(draw(st.integers(0, 4))):
        parent = draw(st.sampled_from(sorted(folders)))
        name = draw(st.sampled_from(["l", "l.txt", "a-l", "ab"]))
        path = os.path.join(parent, name) if parent else name
        if path in folders or path in files or path in {p for p, _ in links}:
            continue
        target = draw(st.sampled_from(["file", "folder", "outside", "broken", "loop"]))
        links.append((path, target))
    return sorted(folders - {""}), sorted(files), links


def _make(root, tree):
    folders, files, links = tree
    inside = root / "in"
    for folder in folders:
        (inside / folder).mkdir(parents=True, exist_ok=True)
    inside.mkdir(exist_ok=True)
    for i, path in enumerate(files):
        (inside / path).write_text("x" * i)
    (root / "outside").mkdir(exist_ok=True)
    (root / "outside" / "secret.txt").write_text("secret")
    some_file = inside / files[0] if files else root / "outside" / "secret.txt"
    for path, target in links:
        source = {"file": some_file, "folder": inside / folders[0] if folders else inside, "outside": root / "outside",
                  "broken": root / "nowhere", "loop": inside}[target]
        os.symlink(source, inside / path)
    return inside


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=_trees(), glob=st.sampled_from(["", "/*", "/**", "/*.txt", "/a*", "/**/*.txt"]))
def test_the_streamed_listing_is_the_sorted_walk(tmp_path_factory, tree, glob):
    """Folder by folder, each read in the order of the paths below it, gives every entry the whole
    walk gave (links refused, read or left as the rules say), in the order one sort of them all gives."""
    root = tmp_path_factory.mktemp("tree")
    inside = _make(root, tree)
    pattern = str(inside) + glob
    streamed = list(iter_local(pattern))
    assert [e.path for e in streamed] == sorted(e.path for e in streamed)
    assert streamed == _oracle(pattern)


def _many_files(folder, folders: int, each: int) -> None:
    for f in range(folders):
        sub = folder / f"{f:03d}"
        sub.mkdir(parents=True)
        for i in range(each):
            (sub / f"doc{i:05d}.txt").write_bytes(b"x")


def _peak_of(consume) -> int:
    tracemalloc.start()
    try:
        consume()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_listing_is_never_held_whole(tmp_path):
    """20,000 files in 40 folders: iterating the launcher's listing (and the lister's groups) holds
    a folder's names at a time, a small part of what the same listing as a list holds (~300 bytes a
    unit, 600 MB at a million files)."""
    inputs = tmp_path / "in"
    _many_files(inputs, 40, 500)
    out = str(tmp_path / "out")
    count = []
    whole = _peak_of(lambda: count.append(len(split_large_inputs(list_inputs([str(inputs)], out).units, 1 << 20))))
    streamed = _peak_of(lambda: count.append(sum(1 for _ in iter_split_large_inputs(InputListing([str(inputs)], out),
                                                                                    1 << 20))))
    grouped = _peak_of(lambda: count.append(sum(1 for _ in iter_groups(InputListing([str(inputs)], out), 100,
                                                                        1 << 20))))
    assert count == [20_000, 20_000, 200]
    assert whole > 4_000_000, whole  # the oracle holds every unit: the measure sees a listing
    assert streamed < whole / 8 and grouped < whole / 8, (whole, streamed, grouped)


def test_the_streamed_listing_gives_the_units_and_left_out_outputs_of_the_list(tmp_path):
    """Two overlapping patterns, a MaskBeam output among the files (left out with its count), the
    job's own output inside the input folder: the stream is the list the patterns' listings merged
    make, each file once; a pattern of only an output's files is refused when the listing is made."""
    import json

    from schemas import manifest as m

    inputs = tmp_path / "in"
    _many_files(inputs / "books", 3, 7)
    (inputs / "books" / "000" / "doc00003.txt").write_bytes(b"y" * 30)
    made = inputs / "old-output"  # what the manifest check needs of an output of ours, and a shard
    (made / "train").mkdir(parents=True)
    (made / m.MANIFEST_FILE).write_text(json.dumps({m.KEY_VERSION: 3, m.KEY_PACKAGE_VERSION: "0.1", m.KEY_SPLITS: {},
                                                    m.KEY_TOKENIZER: {}, m.KEY_CONFIG: {}}))
    (made / "train" / "shard-00000.txt").write_text("not training text")
    (inputs / "run" / "mine").mkdir(parents=True)
    (inputs / "run" / "mine" / "part.txt").write_text("the job's own output")
    patterns = [str(inputs), str(inputs / "books" / "00[01]")]
    listing = InputListing(patterns, str(inputs / "run"))
    units = list(listing)
    assert [u.source for u in units] == sorted(str(p) for p in (inputs / "books").rglob("*.txt"))
    assert all(isinstance(u, WorkUnit) and u.size == os.path.getsize(u.source) for u in units)
    assert list(listing) == units  # a second pass lists the same
    files_of_output = sum(1 for p in made.rglob("*") if p.is_file())
    assert listing.left_out == {str(made): files_of_output}
    assert list_inputs(patterns, str(inputs / "run")).units == units
    with pytest.raises(InputError, match="names only files of MaskBeam outputs"):
        InputListing([str(made)], str(tmp_path / "elsewhere"))
    with pytest.raises(InputError):
        InputListing([str(tmp_path / "no-such-folder")], str(tmp_path / "elsewhere"))


def test_streamed_groups_are_the_groups_of_the_list(tmp_path):
    """`iter_groups` over units in path order makes the groups `group_units` makes of the list,
    large files and byte ranges left alone."""
    rng = np.random.default_rng(3)
    units = [WorkUnit(source=f"/in/{i:04d}.txt", format="text", size=int(rng.integers(1, 5000)))
             for i in range(500)]
    units[17] = WorkUnit(source=units[17].source, format="text", size=10 << 20)
    units[90] = WorkUnit(source="/in/0090.jsonl@0", format="jsonl", size=9, path="/in/0090.jsonl", stop=9)
    for max_inputs in (1, 2, 7, 64):
        grouped = list(iter_groups(units, max_inputs, 20_000))
        assert sorted(grouped, key=str) == sorted(group_units(units, max_inputs, 20_000), key=str)


def test_the_pairing_holds_bands_not_names_and_a_large_partition_in_passes(tmp_path, monkeypatch):
    """One partition of 20,000 inputs' bands, in band files of 500 inputs: the pairing holds 12
    bytes a band and its sort, and reads the names of the inputs of shared bands only (every input's
    name was read and held, with an array view of its bands: ~300 bytes an input). Past
    MAX_PAIRING_BANDS bands it pairs in passes, each a share of the band hashes: the same pairs, in
    a fraction of the memory."""
    from pipeline.beam.dedup import band_packs
    from pipeline.beam.dedup.band_packs import pack_bands, pairs_in_partition, write_band_file

    rng = np.random.default_rng(36)
    slices = []
    previous = None
    n = 20_000
    for start in range(0, n, 500):
        packs = []
        for i in range(start, start + 500):
            signature = rng.integers(0, 2 ** 32, 256, dtype=np.uint64)
            if i % 1000 == 1:  # a near copy of the input before it: its bands are shared
                signature = previous.copy()
                signature[:8] = 7
            previous = signature
            name = f"/a/long/folder/name/of/the/corpus/document-{i:07d}.txt"
            packs.extend(p for p in pack_bands(name, f"key{i}", signature, 0) if p[0] == 0)
        slices.extend(value for p, value in write_band_file(str(tmp_path / f"b{start}.bin"), packs) if p == 0)
    pairs = []
    peak = _peak_of(lambda: pairs.extend(pairs_in_partition((0, slices))))
    assert len(pairs) >= n // 1000 // 2 and all(int(a[-11:-4]) + 1 == int(b[-11:-4]) for a, b, _, _ in pairs)
    assert peak / n < 150, f"{peak / n:.0f} bytes an input"
    bands = sum(piece.entries for piece in slices)
    assert n < bands < 3 * n  # ~2 of an input's 64 bands in each of 32 partitions
    monkeypatch.setattr(band_packs, "MAX_PAIRING_BANDS", bands // 8)
    in_passes = []
    peak_in_passes = _peak_of(lambda: in_passes.extend(pairs_in_partition((0, slices))))
    assert sorted(in_passes) == sorted(pairs)
    assert peak_in_passes < peak / 3, (peak_in_passes, peak)


def test_a_changed_band_file_is_named_not_misread(tmp_path):
    """A band file whose member index points past its members, or whose members' table was cut or
    overwritten, is an error naming the file (the pairing reads numbers and names from it, nothing
    that runs)."""
    import struct

    from pipeline.beam.dedup.band_packs import pack_bands, pairs_in_partition, write_band_file

    signature = np.arange(256, dtype=np.uint64)
    packs = [p for name in ("/in/a.txt", "/in/b.txt") for p in pack_bands(name, name, signature, 0) if p[0] == 3]
    path = tmp_path / "g-bands.bin"
    [piece] = [v for p, v in write_band_file(str(path), packs) if p == 3]
    assert {(a, b) for a, b, _, _ in pairs_in_partition((3, [piece]))} == {("/in/a.txt", "/in/b.txt")}
    good = path.read_bytes()
    count, entries, _ = struct.unpack_from("<III", good, piece.offset)
    owners_at = piece.offset + 12 + 8 * entries
    planted = bytearray(good)
    planted[owners_at:owners_at + 4] = struct.pack("<I", 7)  # a member past the two
    path.write_bytes(bytes(planted))
    with pytest.raises(OSError, match=f"{path}.*member past its 2"):
        pairs_in_partition((3, [piece]))
    planted = bytearray(good)
    table_at = owners_at + 4 * entries
    planted[table_at + 1:table_at + 3] = struct.pack("<H", 200)  # the first name's length overwritten
    path.write_bytes(bytes(planted))
    with pytest.raises(OSError, match=f"{path} at {table_at} does not hold the 2 members"):
        pairs_in_partition((3, [piece]))
