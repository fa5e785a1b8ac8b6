"""The optimisation loop the gradient recipes share (``memlab.training.loop``), on a linear model."""

from __future__ import annotations

import json
import random

import pytest
import torch

from memlab.training import MetricsLog, make_accelerator
from memlab.training.loop import Optimisation, fit, shuffled_batches
from memlab.training.resume import ResumeError, Resumption


def regression(tmp_path, scores: list[float] | None, stop_at: int | None = None, **options):
    """Fit y = 2x with a linear model (dropout before it, so a resumed run needs torch's random
    state); validation returns the next of ``scores`` (None: a final fit). ``stop_at``: the batch
    whose loss raises KeyboardInterrupt, as an interrupted run."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Dropout(0.2), torch.nn.Linear(1, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step))
    data = [(x / 10, 2 * x / 10) for x in range(10)]
    rng, saved, remaining, calls = random.Random(0), [], list(scores or []), []

    def batch_loss(batch):
        calls.append(len(batch))
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        x = torch.tensor([[a] for a, _ in batch])
        return torch.nn.functional.mse_loss(model(x), torch.tensor([[b] for _, b in batch]))

    resume = options.get("resume")
    if resume is not None:  # validations already logged answered the scores they used
        remaining = remaining[sum(1 for _ in (tmp_path / "metrics.jsonl").open()) if (tmp_path / "metrics.jsonl").exists() else 0:]
    log = MetricsLog(tmp_path / "metrics.jsonl", keep=resume is not None)
    summary = fit(Optimisation(model, make_accelerator("no", cpu=True), optimizer, scheduler),
                  n_steps=options.pop("n_steps", 10),
                  epoch_batches=lambda: shuffled_batches(data, 4, rng), batch_loss=batch_loss,
                  save=lambda: saved.append(model[1].weight.item()), log=log,
                  validate=(lambda: {"score": remaining.pop(0)}) if scores is not None else None,
                  metric=lambda s: s["score"], patience=2, progress=False, **options)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return summary, saved, lines, model


def test_shuffled_batches_cover_every_item_once_in_a_seeded_order():
    items = list(range(10))
    first, again = shuffled_batches(items, 4, random.Random(3)), shuffled_batches(items, 4, random.Random(3))
    assert first == again and [len(b) for b in first] == [4, 4, 2]
    assert sorted(i for batch in first for i in batch) == items and first != [items[:4], items[4:8], items[8:]]


def test_validation_every_n_steps_keeps_the_best_and_stops_after_patience(tmp_path):
    summary, saved, lines, _ = regression(tmp_path, [0.5, 0.7, 0.6, 0.65, 0.9], n_steps=10, eval_every=2)
    # 0.5 (saved), 0.7 (saved), 0.6, 0.65: two evaluations without a gain stop the run at step 8
    assert summary["steps"] == 8 and "epochs" not in summary
    assert summary["best"] == {"step": 4, "validation": {"score": 0.7}} and len(saved) == 2
    assert [line["step"] for line in lines] == [2, 4, 6, 8] and lines[-1]["best"] == 0.7
    assert summary["examples_seen"] == 4 + 4 + 2 + 4 + 4 + 2 + 4 + 4  # epochs of batches 4, 4, 2; cut at step 8
    assert summary["examples_per_second"] > 0


def test_validation_per_epoch_and_the_initial_weights_first(tmp_path):
    summary, saved, lines, _ = regression(tmp_path, [0.4, 0.3, 0.8, 0.2, 0.1], n_steps=12, validate_first=True,
                                          unit="rows")
    assert summary["validation_initial"] == {"score": 0.4}
    assert [(line.get("epoch"), line["step"]) for line in lines] == [(None, 0), (1, 3), (2, 6), (3, 9), (4, 12)]
    assert summary["best"] == {"epoch": 2, "step": 6, "validation": {"score": 0.8}} and len(saved) == 2
    assert summary["epochs"] == 4 and summary["rows_seen"] == 40 and "rows_per_second" in lines[-1]


def test_a_final_fit_trains_its_length_and_saves_the_last_weights(tmp_path):
    summary, saved, lines, model = regression(tmp_path, None, n_steps=30, eval_every=5)
    assert summary["steps"] == 30 and summary["best"] is None and len(saved) == 1
    assert saved[0] == model[1].weight.item() and abs(model[1].weight.item() - 2) < abs(0.0 - 2)  # it learned
    assert len(lines) == 1 and lines[0]["step"] == 30


def test_an_epoch_without_batches_is_an_error_not_a_hang(tmp_path):
    with pytest.raises(ValueError, match="an epoch gave no batch"):
        fit(Optimisation(torch.nn.Linear(1, 1), make_accelerator("no", cpu=True), None), n_steps=3,
            epoch_batches=lambda: [], batch_loss=None, save=lambda: None, log=MetricsLog(tmp_path / "m.jsonl"),
            validate=None, metric=None, patience=1, progress=False)


@pytest.mark.parametrize("options", [{"n_steps": 10, "eval_every": 3}, {"n_steps": 12, "validate_first": True}])
@pytest.mark.parametrize("stop_at", [2, 5, 7])
def test_a_run_interrupted_and_started_again_ends_as_if_it_had_never_stopped(tmp_path, options, stop_at):
    """State every 2 steps and after each validation; the second start continues from it with
    fresh objects and ends with the uninterrupted run's weights, log and summary."""
    scores = [0.1, 0.3, 0.2, 0.5, 0.4, 0.6]
    whole, whole_saved, whole_lines, whole_model = regression(tmp_path / "whole", scores, **options)

    def resumable():
        return Resumption(tmp_path / "cut" / "state", every=2, fingerprint="f")

    with pytest.raises(KeyboardInterrupt):
        regression(tmp_path / "cut", scores, stop_at=stop_at, resume=resumable(), **options)
    assert (tmp_path / "cut" / "state" / "resume.pt").is_file() or stop_at == 2  # (2: nothing saved yet)
    summary, _, lines, model = regression(tmp_path / "cut", scores, resume=resumable(), **options)
    assert model[1].weight.item() == pytest.approx(whole_model[1].weight.item(), abs=1e-7)
    drop = ("elapsed_s", "examples_per_second")
    assert [{k: v for k, v in line.items() if k not in drop} for line in lines] == \
        [{k: v for k, v in line.items() if k not in drop} for line in whole_lines]
    drop = ("train_seconds", "examples_per_second")
    assert {k: v for k, v in summary.items() if k not in drop} == {k: v for k, v in whole.items() if k not in drop}
    assert not (tmp_path / "cut" / "state").exists()  # a complete run leaves no state behind


def test_a_state_saved_under_another_configuration_is_refused(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        regression(tmp_path, None, stop_at=4, n_steps=6, resume=Resumption(tmp_path / "state", 1, "a"))
    with pytest.raises(ResumeError, match="saved by a run with another configuration"):
        regression(tmp_path, None, n_steps=6, resume=Resumption(tmp_path / "state", 1, "b"))
    (tmp_path / "state" / "resume.pt").write_bytes(b"torn")
    with pytest.raises(ResumeError, match="unreadable training state"):
        regression(tmp_path, None, n_steps=6, resume=Resumption(tmp_path / "state", 1, "a"))


def test_stop_after_ends_the_run_early_on_the_whole_runs_schedule(tmp_path):
    """A run boxed to 4 of 10 steps has, at step 4, the weights and learning rate of the whole run at
    step 4 (the schedule is the whole run's), keeps its best, says where it stopped; continued
    from a state past the box, it ends at once with what it has."""
    scores = [0.1, 0.3, 0.2, 0.5, 0.4]
    boxed, _, boxed_lines, boxed_model = regression(tmp_path / "boxed", scores, n_steps=10, eval_every=2, stop_after=4)
    assert boxed["steps"] == 4 and boxed["stopped_after"] == {"step": 4, "of": 10}
    assert boxed["best"] == {"step": 4, "validation": {"score": 0.3}} and [line["step"] for line in boxed_lines] == [2, 4]
    # the whole run, interrupted at its 5th batch, has trained the same 4 steps on the same schedule
    with pytest.raises(KeyboardInterrupt):
        regression(tmp_path / "cut", scores, stop_at=5, n_steps=10, eval_every=2,
                   resume=Resumption(tmp_path / "cut" / "state", every=2, fingerprint="f"))
    state = torch.load(tmp_path / "cut" / "state" / "resume.pt", weights_only=False)
    assert state["progress"]["step"] == 4
    assert state["weights"]["1.weight"].item() == pytest.approx(boxed_model[1].weight.item(), abs=1e-7)
    ended, _, _, _ = regression(tmp_path / "cut", scores, n_steps=10, eval_every=2, stop_after=3,
                                resume=Resumption(tmp_path / "cut" / "state", every=2, fingerprint="f"))
    assert ended["steps"] == 4 and ended["stopped_after"] == {"step": 4, "of": 10}
    assert not (tmp_path / "cut" / "state").exists()
    unboxed, _, _, _ = regression(tmp_path / "unboxed", scores, n_steps=10, eval_every=2, stop_after=20)
    assert "stopped_after" not in unboxed  # early stopping ended it, not the box


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU rule")
def test_bf16_autocasts_on_a_cpu_only_where_it_has_bf16_kernels(monkeypatch, caplog):
    """Emulated bf16 is several times slower than full precision (an AVX2 EPYC's answerer test
    took 40 minutes in it): a CPU without avx512_bf16 trains in full precision, and says so."""
    import memlab.eval.machine as machine

    for features, expected in ((["avx2", "avx512f", "avx512_bf16"], "bf16"), (["avx2", "fma"], "no")):
        monkeypatch.setattr(machine, "cpu_description", lambda features=features: {"model": "x", "features": features})
        assert make_accelerator("bf16", cpu_bf16=True).mixed_precision == expected
        assert make_accelerator("bf16").mixed_precision == "no"  # a small encoder's recipe: full precision anyway
    assert "no bf16 kernels" in caplog.text
