"""`glassroom train` end to end on the tiny real dataset: resume, torchrun, NaN, the run store."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from glassroom.observe.store import StoreReader
from cli_helpers import glassroom_in_process
from train_helpers import ROOT, TINY, assert_same_store, losses, run_train, run_train_here, train_cmd


@pytest.fixture(scope="module")
def reference_run(tiny_dataset, tmp_path_factory) -> Path:
    """An uninterrupted 12-step MoE run that other tests compare against."""
    out = tmp_path_factory.mktemp("runs") / "reference"
    result = run_train_here(out, tiny_dataset)
    assert result.returncode == 0, result.stderr
    return out


def test_run_store_has_the_metrics_events_and_evaluations(reference_run):
    with StoreReader(reference_run) as reader:
        names = set(reader.names())
        for name in ("train/loss", "train/lr", "train/grad_norm", "throughput/tokens_per_s", "throughput/mfu",
                     "data/tokens/prose", "data/tokens/docs", "data/tokens/code", "eval/macro/bpb",
                     "eval/prose/bpb", "moe/layer_1/imbalance", "moe/layer_1/entropy", "norm/param/total",
                     "norm/grad/experts", "norm/update/router_bias", "norm/param/layer_1"):
            assert name in names, name
        steps, values = reader.series("train/loss")
        assert list(steps) == list(range(1, 13)) and np.isfinite(values).all()
        assert len(reader.vectors("moe/layer_1/tokens_per_expert")) == 12
        kinds = [e["kind"] for e in reader.events()]
        assert kinds[0] == "start" and kinds[-1] == "end"
        assert kinds.count("checkpoint") == 3 and kinds.count("eval") == 2
        assert reader.status()["state"] == "finished"
        # Tokens per domain add up to every token trained on.
        total = sum(reader.latest(f"data/tokens/{d}")[1] for d in ("prose", "docs", "code"))
        assert total == 12 * 8 * 32
        bpb = reader.latest("eval/prose/bpb")[1]
        assert 1.0 < bpb < 5.0
    saved = (reference_run / "config.yaml").read_text()
    assert "micro_batch_size: 4" in saved and "moe:" in saved


@pytest.mark.slow
def test_sigkill_then_resume_continues_bit_for_bit(tiny_dataset, reference_run, tmp_path):
    out = tmp_path / "killed"
    # SIGKILL planted right after step 4's checkpoint is renamed into place: no timing race.
    killed = run_train(out, tiny_dataset, env={"GLASSROOM_FAULTS": "kill_after_checkpoint@4"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(losses(out)) == 4  # it really was interrupted, with every row of the visible checkpoint
    resumed = run_train_here(out, tiny_dataset, resume=True)  # the kill was the process's; the resume needs none
    assert resumed.returncode == 0, resumed.stderr
    np.testing.assert_array_equal(losses(out), losses(reference_run))
    np.testing.assert_array_equal(losses(out, "eval/macro/bpb"), losses(reference_run, "eval/macro/bpb"))
    assert_same_store(out, reference_run)
    with StoreReader(out) as reader:
        assert any(e["kind"] == "resume" for e in reader.events())


@pytest.mark.dist
def test_torchrun_two_processes_fsdp2_match_one_process(tiny_dataset, reference_run, tmp_path):
    out = tmp_path / "fsdp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "glassroom",
           *train_cmd(out, tiny_dataset)[3:], "--set", "train.parallel=fsdp"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    one, two = losses(reference_run), losses(out)
    assert len(two) == 12
    # Same global batch, same data: the curves agree within bf16/reduction-order noise.
    np.testing.assert_allclose(two, one, rtol=1e-3)
    assert (out / "checkpoints" / "step_0000012").exists()


def test_nan_steps_are_skipped_and_recorded(tiny_dataset, tmp_path):
    out = tmp_path / "nan"
    result = run_train_here(out, tiny_dataset, "train.steps=6", env={"GLASSROOM_FAULTS": "nan@3"})
    assert result.returncode == 0, result.stderr
    with StoreReader(out) as reader:
        skips = [e for e in reader.events() if e["kind"] == "skip"]
        assert [e["step"] for e in skips] == [3]
        assert "not finite" in skips[0]["text"]
        values = reader.series("train/loss")[1]
        assert np.isnan(values[2]) and np.isfinite(values[3:]).all()


def test_too_many_nan_steps_stop_the_run_with_its_checkpoint_intact(tiny_dataset, tmp_path):
    out = tmp_path / "nans"
    env = {"GLASSROOM_FAULTS": "nan@5,nan@6,nan@7"}
    result = run_train_here(out, tiny_dataset, "train.max_bad_steps=3", env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: stopped at step 7: 3 steps in a row")
    assert "step_0000004" in lines[-1]
    assert (out / "checkpoints" / "step_0000004" / "trainer.json").exists()
    with StoreReader(out) as reader:
        assert reader.status()["state"] == "failed"


@pytest.mark.slow
def test_the_store_is_read_by_another_process_while_training(tiny_dataset, tmp_path):
    out = tmp_path / "live"
    process = subprocess.Popen(train_cmd(out, tiny_dataset, "train.steps=40", "train.checkpoint_every=100"),
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    reader_script = (
        "import sys, time; from glassroom.observe.store import StoreReader\n"
        "seen = []\n"
        "deadline = time.time() + 300\n"
        "while time.time() < deadline:\n"
        "    try:\n"
        "        with StoreReader(sys.argv[1]) as r:\n"
        "            seen.append(len(r.series('train/loss')[0])); state = r.status()['state']\n"
        "    except FileNotFoundError:\n"
        "        state = 'absent'\n"
        "    if state in ('finished', 'failed'): break\n"
        "    time.sleep(0.2)\n"
        "print(seen)\n"
    )
    observed = subprocess.run([sys.executable, "-c", reader_script, str(out)], capture_output=True, text=True,
                              timeout=400)
    process.wait(timeout=300)
    assert process.returncode == 0, process.stderr.read()
    counts = json.loads(observed.stdout)
    partial = [c for c in counts if 0 < c < 40]
    assert partial, f"the reader never saw a run in progress: {counts}"
    assert counts == sorted(counts) and counts[-1] == 40


def test_resume_with_an_incompatible_config_is_a_clear_error(reference_run, tiny_dataset, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(reference_run, out)
    result = run_train_here(out, tiny_dataset, "model.d_model=128", resume=True)
    assert result.returncode == 2
    assert "model.d_model (64 -> 128)" in result.stderr and result.stderr.count("\n") == 1
    again = run_train_here(out, tiny_dataset)
    assert again.returncode == 2 and "already holds a run" in again.stderr


@pytest.mark.parametrize("setting,message", [
    ("train.micro_batch_size=3", "train.micro_batch_size: 3 does not divide batch_size (8)"),
    ("train.seq_len=128", "train.seq_len: 128 is longer than model.max_seq_len (64)"),
    ("train.lrr=1", "train.lrr: unknown key (did you mean lr?)"),
    ("data.weights={prose: -1}", "data.weights.prose: must be zero or more"),
    ("train.device=tpu", "train.device: 'tpu' is not one of cpu, cuda, auto"),
])
def test_bad_run_configs_are_one_line_errors(tiny_dataset, tmp_path, setting, message):
    # the first through python -m glassroom (the one line and exit code 2 as a user gets them), the rest in this process
    train = run_train if setting == "train.micro_batch_size=3" else run_train_here
    result = train(tmp_path / "bad", tiny_dataset, setting)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr
    assert not (tmp_path / "bad").exists()


def test_missing_dataset_is_a_clear_error(tmp_path):
    result = run_train_here(tmp_path / "run", tmp_path / "no-such-data")
    assert result.returncode == 2 and "not a built dataset" in result.stderr


def glassroom(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "glassroom", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def glassroom_here(*args: str) -> subprocess.CompletedProcess:
    return glassroom_in_process(*args)


def test_metrics_runs_and_note_commands(reference_run, tmp_path):
    # Each command's refusal once through python -m glassroom (metrics' wrong name, note's folder
    # without a run, runs' file); what the commands print is read in this process.
    listing = glassroom_here("metrics", str(reference_run))
    assert listing.returncode == 0 and "train/loss" in listing.stdout
    series = json.loads(glassroom_here("metrics", str(reference_run), "--name", "train/loss").stdout)
    assert [s for s, _ in series] == list(range(1, 13))
    assert [v for _, v in series] == list(losses(reference_run))
    wrong = glassroom("metrics", str(reference_run), "--name", "train/los")
    assert wrong.returncode == 2 and "did you mean train/loss" in wrong.stderr
    runs = glassroom_here("runs", str(reference_run.parent))
    assert runs.returncode == 0
    assert any(line.split()[:3] == ["reference", "finished", "12"] for line in runs.stdout.splitlines())
    copy = tmp_path / "noted"
    shutil.copytree(reference_run, copy)
    noted = glassroom_here("note", str(copy), "loss looks fine; continuing")
    assert noted.returncode == 0
    with StoreReader(copy) as reader:
        notes = [e for e in reader.events() if e["kind"] == "note"]
        assert [(n["step"], n["text"]) for n in notes] == [(12, "loss looks fine; continuing")]
        assert reader.status()["state"] == "finished"
    for args in (["note", str(tmp_path), "x"], ["note", str(copy), "  "], ["runs", str(tmp_path / "none")],
                 ["metrics", str(tmp_path)]):
        result = (glassroom if args[0] == "note" and args[2] == "x" else glassroom_here)(*args)
        assert result.returncode == 2 and result.stderr.startswith("error: "), args
    a_file = tmp_path / "a.txt"
    a_file.write_text("not runs\n")
    result = glassroom("runs", str(a_file))
    assert result.returncode == 2 and result.stderr == f"error: {a_file}: is a file, not a folder; give the folder that holds the runs\n"


def in_process_trainer(dataset: Path, out: Path, *sets: str):
    """A Trainer of the tiny MoE built in this process (fp32, no clipping, no evals or checkpoints)."""
    from glassroom.train.config import load_run_config
    from glassroom.train.trainer import Trainer

    cfg = load_run_config(TINY, [f"data.path={dataset}", "train.precision=fp32", "train.grad_clip=null",
                                 "train.eval_every=1000", "train.checkpoint_every=1000", *sets])
    return Trainer(cfg, out, quiet=True)


def first_step_gradients(dataset: Path, out: Path, coef: float):
    """One train_step at train.z_loss_coef=coef: the gradients it would apply (the optimizer step is
    left out and the buffers put back, so the model is as it was), the inputs of each micro-batch, the trainer."""
    import torch

    trainer = in_process_trainer(dataset, out, f"train.z_loss_coef={coef}")
    inputs: list = []
    trainer.core.register_forward_pre_hook(lambda module, args: inputs.append(args[0].clone()))
    grads: dict = {}

    def capture(*args, **kwargs):
        grads.update({n: p.grad.detach().clone() for n, p in trainer.core.named_parameters() if p.grad is not None})

    trainer.optimizer.step = capture
    buffers = {n: b.clone() for n, b in trainer.core.named_buffers()}   # the router bias moves after backward
    trainer.train_step()
    with torch.no_grad():
        for n, b in trainer.core.named_buffers():
            b.copy_(buffers[n])
    return grads, inputs, trainer


def test_the_logit_z_loss_is_added_to_the_objective_with_its_coefficient(tiny_dataset, tmp_path):
    """The trainer optimises loss + z_loss_coef * mean(logsumexp(logits)^2): the gradient at coef c
    minus the gradient at coef 0 (same weights, same batch) equals c times the gradient of the z-loss
    computed here from the logits, micro-batch by micro-batch (averaged over the accumulation)."""
    import torch

    from glassroom.train import parallel

    coef = 0.05
    try:
        plain, inputs, _ = first_step_gradients(tiny_dataset, tmp_path / "plain", 0.0)
        with_z, inputs_z, trainer = first_step_gradients(tiny_dataset, tmp_path / "z", coef)
        assert len(inputs) == trainer.accum == 2 and all(torch.equal(a, b) for a, b in zip(inputs, inputs_z))
        model = trainer.core
        model.zero_grad(set_to_none=True)
        model.train()
        term = 0.0
        for micro in inputs:
            logits = model(micro).logits.float()
            term = term + coef * torch.logsumexp(logits, dim=-1).pow(2).mean() / trainer.accum
        term.backward()
        assert term.item() > 1.0   # about coef * log(vocab)^2 at the start: not a negligible term
        assert plain.keys() == with_z.keys()
        # The difference of two gradients carries the float rounding of their cross-entropy part:
        # compared as vectors (relative error of the norm), per parameter and over all of them.
        names = [n for n, p in model.named_parameters() if n in plain]
        grads = dict(model.named_parameters())
        for name in names:
            diff, want = (with_z[name] - plain[name]).flatten(), grads[name].grad.flatten()
            assert (diff - want).norm() < 2e-2 * want.norm(), name
        diff = torch.cat([(with_z[n] - plain[n]).flatten() for n in names])
        want = torch.cat([grads[n].grad.flatten() for n in names])
        assert (diff - want).norm() < 1e-2 * want.norm()
    finally:
        parallel.teardown()


def mean_logsumexp(trainer) -> float:
    import torch

    batch = trainer.objective.batch(1000).tensors["tokens"]
    trainer.core.eval()
    with torch.no_grad():
        return float(torch.logsumexp(trainer.core(batch[:, :-1]).logits.float(), dim=-1).mean())


def test_training_with_a_large_z_loss_coefficient_shrinks_the_logsumexp(tiny_dataset, tmp_path):
    """Eight steps with z_loss_coef 1 pull log Z of the logits towards 0, well below the same eight
    steps without it (and below where it started): the term is minimised, not maximised."""
    from glassroom.train import parallel

    sets = ("train.steps=8", "train.lr=1e-2")
    try:
        start = mean_logsumexp(in_process_trainer(tiny_dataset, tmp_path / "start", *sets))
        after = {}
        for coef in (0.0, 1.0):
            trainer = in_process_trainer(tiny_dataset, tmp_path / f"coef-{coef}", *sets, f"train.z_loss_coef={coef}")
            for _ in range(8):
                trainer.train_step()
            after[coef] = mean_logsumexp(trainer)
    finally:
        parallel.teardown()
    assert after[1.0] < after[0.0] - 0.5 and after[1.0] < start - 1.0, (start, after)
