"""``config.Steps``: the one owner of a run's steps and batch geometry (``--batch-size``, ``--grad-accum``,
``--max-steps``, ``--eval-every``), which the loops, the inputs, resume and the evaluations ask instead of the
flags. The runs themselves are held by tests/trainer/finetune/test_steps.py, test_run_safety.py, test_elastic.py."""

from __future__ import annotations

from bertstream.trainer.config import Steps, TrainConfig
from bertstream.trainer.finetune.config import FinetuneConfig, FinetuneSteps


def test_each_command_makes_its_steps_once_from_its_flags():
    pre = TrainConfig.build(paths=("ds",), output="run", batch_size=8, grad_accum=2, max_steps=7, eval_every=3)
    assert pre.steps == Steps(rows=8, accum=2, total=7, eval_period=3)
    assert [s for s in range(1, 8) if pre.steps.evaluates_at(s)] == [3, 6]  # the loop adds the last step
    assert pre.steps.per_epoch(5) == 3  # the epoch's last step takes what is left
    fine = FinetuneConfig.build(task="classification", train_data="t", eval_data="e", init="i", output="o")
    assert isinstance(fine.steps, FinetuneSteps) and fine.steps.total == 0 and fine.steps.eval_period == 0
    assert not any(fine.steps.evaluates_at(s) for s in range(1, 50))  # --eval-every 0: the epochs' ends only
    assert fine.steps.until(3, 4) == 12 and FinetuneSteps(32, 1, 5, 0).until(3, 4) == 5  # --max-steps wins


def test_a_resume_keeps_the_micro_step_batch_on_any_number_of_processes():
    steps = Steps(rows=4, accum=1, total=10, eval_period=5)
    assert steps.resume_refusal({"batch_size": 8, "grad_accum": 1}, 1, 2, "ck") is None  # 1 x 8 = 2 x 4
    assert "the run has 1 x 8 = 8, this resume 1 x 4 = 4" in str(steps.resume_refusal({"batch_size": 8}, 1, 1, "ck"))
    assert "train batch_size '8' is not a count" in str(steps.resume_refusal({"batch_size": "8"}, 1, 1, "ck"))
    assert steps.below(10, "ck") is None and "--max-steps 10 is below step 11 of ck" in str(steps.below(11, "ck"))
