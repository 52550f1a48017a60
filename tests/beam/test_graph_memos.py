"""`graph_memos`: one options view per options values, flags and class, and each DoFn's state and
timer specs found once, while a job runs; the same graph as Beam builds without them; Beam's own
functions again afterwards, and for an unreviewed Beam."""

from __future__ import annotations

import gc

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TypeOptions
from apache_beam.transforms import userstate

from pipeline.beam.run import graph_memos as memos
from pipeline.beam.run.graph_memos import graph_memos

_ORIGINAL = PipelineOptions.view_as
_SPECS = userstate.get_dofn_specs


def _graph(options: PipelineOptions):
    pipeline = beam.Pipeline(options=options)
    _ = (pipeline | beam.Create([("a", 1), ("b", 2), ("a", 3)]) | beam.GroupByKey()
         | beam.MapTuple(lambda key, values: (key, sum(values))) | beam.combiners.Count.Globally())
    components = pipeline.to_runner_api().components
    return (sorted((k, v.SerializeToString(deterministic=True)) for k, v in components.coders.items()),
            sorted((t.unique_name, t.spec.urn) for t in components.transforms.values()),
            sorted((p.unique_name, p.coder_id) for p in components.pcollections.values()))


def test_views_are_shared_while_active_and_fresh_again_after():
    options = PipelineOptions(["--runner=FnApiRunner", "--no_pipeline_type_check"])
    with graph_memos():
        first = options.view_as(TypeOptions)
        assert options.view_as(TypeOptions) is first and not first.pipeline_type_check
        first.pipeline_type_check = True  # a value set through one view is every view's
        assert options.view_as(TypeOptions).pipeline_type_check
        assert options.view_as(StandardOptions).view_as(TypeOptions) is first  # a view of a view: same values
        other = PipelineOptions(["--runner=FnApiRunner"])
        assert other.view_as(TypeOptions) is not first  # other values, other view
    assert PipelineOptions.view_as is _ORIGINAL and not memos._views
    assert options.view_as(TypeOptions) is not options.view_as(TypeOptions)
    assert options.view_as(TypeOptions).pipeline_type_check


def test_the_graph_is_the_one_beam_builds_without_it():
    plain = _graph(PipelineOptions(["--runner=FnApiRunner"]))
    with graph_memos():
        memoized = _graph(PipelineOptions(["--runner=FnApiRunner"]))
    assert memoized == plain


class _Stateful(beam.DoFn):
    COUNT = userstate.CombiningValueStateSpec("count", sum)

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        yield element


def test_dofn_specs_are_found_once_per_dofn_and_handed_out_as_copies():
    calls = []

    def counting(dofn):
        calls.append(dofn)
        return _SPECS(dofn)

    saved = memos._get_dofn_specs
    try:
        with graph_memos():
            memos._get_dofn_specs = counting  # after the reviewed original was installed
            first, second = _Stateful(), _Stateful()
            states, timers = userstate.get_dofn_specs(first)
            assert [spec.name for spec in states] == ["count"] and not timers
            states.clear()  # the caller's copy
            assert [s.name for s in userstate.get_dofn_specs(first)[0]] == ["count"]
            userstate.get_dofn_specs(second)
            assert calls == [first, second]
            del first, second
            calls.clear()
            gc.collect()
            assert all(ref() is None for ref, _, _ in memos._specs.values())  # weakly held
            memos._get_dofn_specs = saved
    finally:
        memos._get_dofn_specs = saved
    assert userstate.get_dofn_specs is _SPECS and not memos._specs


def test_unreviewed_beam_functions_are_left_alone(monkeypatch):
    monkeypatch.setattr(memos, "REVIEWED_VIEW_AS", {})
    monkeypatch.setattr(memos, "REVIEWED_DOFN_SPECS", {})
    with graph_memos():
        assert PipelineOptions.view_as is _ORIGINAL and userstate.get_dofn_specs is _SPECS
    assert PipelineOptions.view_as is _ORIGINAL and userstate.get_dofn_specs is _SPECS
