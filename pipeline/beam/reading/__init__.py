"""Reading inputs, one concern per module:

* `listing`: the local files a path, folder or glob names (links stay inside the input folder);
* `compression`: decompression by suffix, every member, bounded output (no bombs);
* `byte_ranges`: a range of a file (whole lines) as a first-class part of one input;
* `text`, `jsonl`, `parquet`, `hf`: one reader per format.

`pipeline.beam.reading.reader.UnitReader` runs the two passes over a unit with these readers.
"""
