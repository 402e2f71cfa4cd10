"""Several global combines as one step: each input gets its own combine's output, an empty one included."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.combiners import CountCombineFn, ToListCombineFn

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.combine import CombineEach


def test_each_input_is_combined_by_its_own_fn_and_an_empty_one_gives_the_fn_of_nothing():
    counters = [{"documents_read": 2, "tokens": 5}, {"documents_read": 1}, {"tokens": 7}]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        parts = {
            "counters": p | "C" >> beam.Create(counters),
            "sizes": p | "S" >> beam.Create([3, 1, 2]),
            "none": p | "N" >> beam.Create([]),
            "count": p | "K" >> beam.Create(["a", "b"]),
        }
        fns = {
            "counters": C.MergeCounters(),
            "sizes": ToListCombineFn(),
            "none": ToListCombineFn(),
            "count": CountCombineFn(),
        }
        out = parts | CombineEach(fns) | beam.Map(lambda d: {**d, "sizes": sorted(d["sizes"])})
        expected = {"counters": {"documents_read": 3, "tokens": 12}, "sizes": [1, 2, 3], "none": [], "count": 2}
        assert_that(out, equal_to([expected]))


def test_inputs_and_combines_must_name_the_same_parts():
    with pytest.raises(ValueError, match="differ"), beam.Pipeline(runner=FnApiRunner()) as p:
        _ = {"a": p | beam.Create([1])} | CombineEach({"b": ToListCombineFn()})
