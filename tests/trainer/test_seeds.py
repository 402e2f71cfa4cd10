"""One ``--seed``, every stream derived from it (``trainer.seeds.Seeds``): the run section and the data section
(linked to the same flag) give the same streams, and the streams are the ones saved runs were drawn with (a
resume continues them: a changed derivation would give a resumed run other numbers than its first part)."""

from __future__ import annotations

from bertstream.trainer.config import TrainConfig
from bertstream.trainer.seeds import Seeds


def test_the_run_and_its_loader_take_their_streams_from_the_one_seed():
    cfg = TrainConfig.build(paths=("ds",), output="run", seed=7)
    assert cfg.run.seeds == cfg.data.seeds == Seeds(7)
    assert TrainConfig.build(paths=("ds",), output="run").data.seeds == Seeds(0)


def test_the_streams_are_those_saved_runs_were_drawn_with():
    s = Seeds(7)
    assert (s.init, s.order, s.masks) == (7, 7, 7)
    assert s.workers(2) == 7 * 1_000_003 + 2  # the loader's generator of epoch 2
    assert [s.dropout(r) for r in (0, 1)] == [7000, 7001]  # one dropout stream per rank
    assert s.dropout_after(1, 50) == 7001 * 1_000_003 + 50  # an elastic resume's, from its step
    assert Seeds(2**32 - 1).dropout_after(1023, 2**31) < 2**63  # the largest --seed stays in torch's int64
