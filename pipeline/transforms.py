"""Beam composites of the preprocess job: thin wrappers over the library functions.

    units | TokenizeAndChunk(...) | WriteShards(...)  ->  one manifest dict

Only small records travel between steps (unit and shard results); rows go through part files, so
no token is ever shuffled through a GroupByKey.
"""

from __future__ import annotations

import posixpath

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.combiners import ToListCombineFn

from pipeline.config import PreprocessConfig
from pipeline.finalize import finalize_output
from pipeline.readers import WorkUnit
from pipeline.sharding import ShardTask, plan_shards, row_bytes, write_shard
from pipeline.tokenization import TokenizerSpec, build_tokenizer
from pipeline.units import UnitResult, process_unit
from schemas import manifest as m
from schemas.shard import id_dtype_for_vocab

__all__ = ["TokenizeAndChunk", "WriteShards", "Preprocess", "METRICS_NAMESPACE"]

METRICS_NAMESPACE = "maskbeam"


def _id_dtype(spec: TokenizerSpec) -> np.dtype:
    return id_dtype_for_vocab(spec.vocab_size)


class _ProcessUnitFn(beam.DoFn):
    def __init__(self, spec: TokenizerSpec, config: PreprocessConfig, temp_dir: str) -> None:
        self._spec = spec
        self._config = config
        self._temp_dir = temp_dir
        self._counters = {name: Metrics.counter(METRICS_NAMESPACE, name) for name in m.INPUT_COUNT_NAMES}

    def setup(self) -> None:
        self._tokenizer = build_tokenizer(self._spec)
        self._layout = self._spec.layout(self._config.max_seq_length, self._config.min_tokens)

    def process(self, unit: WorkUnit):
        result = process_unit(unit, self._tokenizer, self._layout, _id_dtype(self._spec), self._config,
                              self._temp_dir)
        for name, value in result.counts.items():
            self._counters[name].inc(value)
        yield result


class _WriteShardFn(beam.DoFn):
    def __init__(self, spec: TokenizerSpec, config: PreprocessConfig) -> None:
        self._spec = spec
        self._config = config
        self._shards_written = Metrics.counter(METRICS_NAMESPACE, "shards_written")

    def setup(self) -> None:
        c = self._config
        self._rule = self._spec.masking_rule(c.mlm_probability, c.mask_replace_prob, c.random_replace_prob)

    def process(self, task: ShardTask):
        result = write_shard(task, self._config, self._rule, _id_dtype(self._spec))
        self._shards_written.inc()
        yield result


class TokenizeAndChunk(beam.PTransform):
    """WorkUnit -> UnitResult: read, clean, tokenize and chunk each input into unmasked part files."""

    def __init__(self, *, spec: TokenizerSpec, config: PreprocessConfig, temp_dir: str) -> None:
        super().__init__()
        if not temp_dir:
            raise ValueError("temp_dir is required")
        self._fn = _ProcessUnitFn(spec, config, temp_dir)

    def expand(self, units):
        return units | "SpreadUnits" >> beam.Reshuffle() | "ProcessUnits" >> beam.ParDo(self._fn)


class WriteShards(beam.PTransform):
    """UnitResult -> one manifest dict: plan shards, mask and write them in parallel, then finalize."""

    def __init__(self, *, spec: TokenizerSpec, config: PreprocessConfig) -> None:
        super().__init__()
        self._spec = spec
        self._config = config

    def expand(self, unit_results):
        spec, config = self._spec, self._config
        bytes_per_row = row_bytes(config.max_seq_length, _id_dtype(spec), config.masking)
        units = unit_results | "CollectUnits" >> beam.CombineGlobally(ToListCombineFn())
        shards = (
            units
            | "PlanShards" >> beam.FlatMap(plan_shards, config=config, bytes_per_row=bytes_per_row)
            | "SpreadShards" >> beam.Reshuffle()
            | "WriteShard" >> beam.ParDo(_WriteShardFn(spec, config))
            | "CollectShards" >> beam.CombineGlobally(ToListCombineFn())
        )
        tokenizer_info = tokenizer_record(spec, config.tokenizer)
        return shards | "Finalize" >> beam.Map(
            lambda shard_results, unit_list: finalize_output(unit_list, shard_results, config, tokenizer_info,
                                                             _id_dtype(spec)),
            unit_list=beam.pvalue.AsSingleton(units),
        )


def tokenizer_record(spec: TokenizerSpec, name: str) -> dict:
    return {
        "name_or_path": name,
        "sha256": spec.fingerprint,
        "vocab_size": spec.vocab_size,
        "special_ids": {"cls": spec.cls_id, "sep": spec.sep_id, "pad": spec.pad_id, "mask": spec.mask_id},
        "never_selected_ids": list(spec.special_ids),
        "id_dtype": _id_dtype(spec).name,
    }


class Preprocess(beam.PTransform):
    """The whole job from a root: work units to shards and a manifest (a PCollection of one dict)."""

    def __init__(self, *, units: list[WorkUnit], spec: TokenizerSpec, config: PreprocessConfig) -> None:
        super().__init__()
        if not units:
            raise ValueError("no input units")
        self._units = units
        self._spec = spec
        self._config = config

    def expand(self, root):
        temp_dir = posixpath.join(self._config.output, m.TEMP_DIR)
        return (
            root
            | "ListInputs" >> beam.Create(self._units)
            | "TokenizeAndChunk" >> TokenizeAndChunk(spec=self._spec, config=self._config, temp_dir=temp_dir)
            | "WriteShards" >> WriteShards(spec=self._spec, config=self._config)
        )
