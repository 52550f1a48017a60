"""Reading inputs, one module per stage, in the order the data goes through them:

1. `listing`: the local files a path, folder or glob names, without leaving the input folder (a
   link out of it is listed as refused, never opened); object stores through Beam's FileSystems.
2. `work_units`: listed files to `WorkUnit`s, each with its format from the name
   (`formats.registry`); a large uncompressed file is spread as its format says (a `.jsonl` cut
   into line ranges, one unit each; a text file marked for input splits), and `--hf_dataset`
   rows become row ranges. `listed_inputs` is the listing every job shares: the units less the
   job's own output and any MaskBeam output among the inputs. `group_files`: a group of small
   inputs as the lister hands it on, its units in a file of the temp folder and a reference
   through the runner.
3. `reader.UnitReader`: one unit in two streaming passes, so memory does not grow with its size:
   `scan()` measures (content key, counts, script letters, signature, every reason to skip the
   whole input), then `documents()` hands out each document's clean text in pieces to tokenize.
   Below it:

   * `formats/`: one module per format; `formats.registry` is the one table of formats (name,
     suffixes, text or records, how a large file is spread, the record reader), and every
     stage above asks it;
   * `compression`: decompression by suffix or signature, every member, bounded output (no bombs);
   * `byte_ranges`: a file's line ranges (the units of a large `.jsonl`) and exact byte ranges
     (what an input split, `pipeline.beam.input_splits`, reads).

The stages below the reader (listing, compression, byte ranges, formats) know nothing of work
units, the reader or the pipeline (an import-linter contract in setup.cfg).
"""
