"""`memoized_option_views`: one view per options values, flags and class while a job runs; the same
graph as Beam builds without it; Beam's own `view_as` again afterwards, and for an unreviewed Beam."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TypeOptions

from pipeline.beam.run import option_views
from pipeline.beam.run.option_views import memoized_option_views

_ORIGINAL = PipelineOptions.view_as


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
    with memoized_option_views():
        first = options.view_as(TypeOptions)
        assert options.view_as(TypeOptions) is first and not first.pipeline_type_check
        first.pipeline_type_check = True  # a value set through one view is every view's
        assert options.view_as(TypeOptions).pipeline_type_check
        assert options.view_as(StandardOptions).view_as(TypeOptions) is first  # a view of a view: same values
        other = PipelineOptions(["--runner=FnApiRunner"])
        assert other.view_as(TypeOptions) is not first  # other values, other view
    assert PipelineOptions.view_as is _ORIGINAL and not option_views._views
    assert options.view_as(TypeOptions) is not options.view_as(TypeOptions)
    assert options.view_as(TypeOptions).pipeline_type_check


def test_the_graph_is_the_one_beam_builds_without_it():
    plain = _graph(PipelineOptions(["--runner=FnApiRunner"]))
    with memoized_option_views():
        memoized = _graph(PipelineOptions(["--runner=FnApiRunner"]))
    assert memoized == plain


def test_an_unreviewed_view_as_is_left_alone(monkeypatch):
    monkeypatch.setattr(option_views, "REVIEWED", {})
    with memoized_option_views():
        assert PipelineOptions.view_as is _ORIGINAL
    assert PipelineOptions.view_as is _ORIGINAL
