"""Files written whole or not at all (`arrow_io.write_chunks`, `partial_name`, `publish_file`):
Beam's Dask runner computes a side input's steps anew, so a step may write a file of the temp
folder again while another step reads it, and two writers of one file may run at once."""

from __future__ import annotations

import threading

from pipeline.beam.writing.arrow_io import partial_name, publish_file, write_chunks
from schemas import manifest as m


def test_a_temp_folder_file_is_written_under_a_name_of_its_writer_s_own(tmp_path):
    temp = str(tmp_path / "out" / m.TEMP_DIR / "x.bin")
    names = {partial_name(temp) for _ in range(3)}
    assert len(names) == 3 and all(n.startswith(temp + ".") and n.endswith(m.PARTIAL_SUFFIX) for n in names)
    output = str(tmp_path / "out" / "train" / "data-00000-of-00001.arrow")
    assert partial_name(output) == output + m.PARTIAL_SUFFIX  # a resumed run's writer replaces a killed one's
    assert partial_name("s3://bucket/out/.maskbeam-tmp/x.bin") == "s3://bucket/out/.maskbeam-tmp/x.bin"


def test_a_file_rewritten_while_it_is_read_is_the_old_one_or_the_new_one_whole(tmp_path):
    """Two writers of one file, each writing it many times in small chunks, and a reader opening
    it meanwhile: every read is one writer's bytes, whole (with one temp name a writer truncated
    the other's file as it was read: a band file read as 0 bytes)."""
    path = str(tmp_path / m.TEMP_DIR / "bands.bin")
    (tmp_path / m.TEMP_DIR).mkdir()
    contents = [bytes([n]) * 200_000 for n in (1, 2)]
    write_chunks(path, [contents[0]])
    stop, seen = threading.Event(), []

    def writer(data: bytes) -> None:
        while not stop.is_set():
            write_chunks(path, (data[i:i + 1000] for i in range(0, len(data), 1000)))

    threads = [threading.Thread(target=writer, args=(data,)) for data in contents]
    for thread in threads:
        thread.start()
    try:
        for _ in range(300):
            with open(path, "rb") as handle:
                seen.append(handle.read())
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert set(seen) <= set(contents), {len(s) for s in seen}
    assert [p.name for p in (tmp_path / m.TEMP_DIR).iterdir()] == ["bands.bin"]  # no temp file left


def test_a_local_publish_replaces_the_file_in_one_step(tmp_path):
    (tmp_path / "a.partial").write_bytes(b"new")
    (tmp_path / "a").write_bytes(b"old")
    publish_file(str(tmp_path / "a.partial"), str(tmp_path / "a"))
    assert (tmp_path / "a").read_bytes() == b"new" and not (tmp_path / "a.partial").exists()
    (tmp_path / "b.partial").write_bytes(b"url")
    publish_file(f"file://{tmp_path / 'b.partial'}", f"file://{tmp_path / 'b'}")
    assert (tmp_path / "b").read_bytes() == b"url"
