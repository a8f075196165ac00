"""The post-training pipeline steps through `glassroom run` (glassroom/steps/posttrain.py): a tiny
pretraining run, a chat set from one source, its SFT and DPO data with the base run's tokenizer, SFT
from the base and DPO from the SFT run; every step cached on a second run, an edited SFT config reruns
SFT and DPO but not the chat set; the demo's summary helpers read the runs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from glassroom.demo import _posttrain, format_summary
from glassroom.observe.store import StoreReader
from pipeline_helpers import glassroom

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"steps": 4, "batch_size": 4, "micro_batch_size": 4, "seq_len": 64, "warmup_steps": 1,
         "checkpoint_every": 2, "eval_every": 2, "eval_sequences": 4, "device": "cpu"}

EXPERIMENT = '''
from glassroom.steps.ladder import train_rung
from glassroom.pipeline import Step
from glassroom.steps.posttrain import chat_data_step, chatset_step, finetune_step

BASE = {base!r}
SFT = {sft!r}
DPO = {dpo!r}

base = Step("base", train_rung, {{"run": BASE}}, kind="runs")
chat = chatset_step("chatset", max_per_source=40, sources=("python",))
sft_data = chat_data_step("sft-data", chat, "sft", tokenizer=base / "tokenizer.json", cpus=1)
dpo_data = chat_data_step("dpo-data", chat, "dpo", tokenizer=base / "tokenizer.json", cpus=1)
sft = finetune_step("sft", SFT, sft_data, base=base, cpus=1)
dpo = finetune_step("dpo", DPO, dpo_data, base=sft, cpus=1)
steps = [base, chat, sft_data, sft, dpo_data, dpo]
'''


def write_experiment(path: Path, dataset: Path, sft_lr: float = 2e-3) -> Path:
    base = yaml.safe_load((ROOT / "tests" / "configs" / "train-tiny.yaml").read_text())
    base["data"]["path"] = str(dataset)
    base["train"].update(steps=6, checkpoint_every=3, eval_every=6)
    sft = {"observe": {"sample_prompts": ["What does json.dumps do?"], "sample_tokens": 8},
           "train": {"task": "sft", "lr": sft_lr, **SMALL}}
    dpo = {"train": {"task": "dpo", "lr": 1e-3, "dpo_beta": 0.1, **SMALL}}
    path.write_text(textwrap.dedent(EXPERIMENT.format(base=base, sft=sft, dpo=dpo)))
    return path


@pytest.mark.slow
def test_posttrain_steps_run_cache_and_rerun(tiny_dataset, tmp_path, capsys):
    experiment = write_experiment(tmp_path / "exp.py", tiny_dataset)
    workspace = tmp_path / "ws"
    code, out, err = glassroom("run", experiment, "--workspace", workspace, "--jobs", "1", capsys=capsys)
    assert code == 0, out + err
    from glassroom.pipeline.experiment import load_experiment

    graph = load_experiment(experiment).graph(workspace)
    outputs = {n.step.name: n.output for n in graph}
    sft_dir, dpo_dir = outputs["sft"], outputs["dpo"]
    with StoreReader(sft_dir) as reader:
        lineage = reader.artifact("lineage")
        samples = reader.events(kinds=["samples"])
    assert lineage["task"] == "sft" and Path(lineage["base"]).resolve().is_relative_to(outputs["base"].resolve())
    assert [e["step"] for e in samples][0] == 0 and samples[-1]["step"] == 4   # the base, then the tuned model
    with StoreReader(dpo_dir) as reader:
        assert reader.artifact("lineage")["task"] == "dpo"
        assert Path(reader.artifact("lineage")["base"]).resolve().is_relative_to(sft_dir.resolve())
        assert reader.latest("eval/dpo/accuracy") is not None

    # The demo's summary helpers read such runs.
    post = _posttrain(sft_dir, dpo_dir)
    assert post["sft_loss"]["base"][0] == 0 and post["sft_loss"]["tuned"][0] == 4
    assert post["sample"]["prompt"] == "What does json.dumps do?" and post["sample"]["base"][0] == 0
    assert post["dpo_eval"]["accuracy"][0] == 4
    summary = {"dataset": "d", "rungs": [], "ladder": "l", "hero": "h", "achieved": None, "site": str(tmp_path / "site"),
               "seconds": {"train": 60, "publish": 1}, "posttrain": post}
    text = format_summary(summary)
    assert f"sft:      {sft_dir}: held-out assistant loss" in text and "dpo:      " in text
    assert "'What does json.dumps do?': step 0" in text

    # A second run reuses every step.
    mtimes = {name: (path / "store.sqlite").stat().st_mtime_ns for name, path in outputs.items() if (path / "store.sqlite").is_file()}
    code, out, err = glassroom("run", experiment, "--workspace", workspace, "--jobs", "1", capsys=capsys)
    assert code == 0, out + err
    assert {name: (outputs[name] / "store.sqlite").stat().st_mtime_ns for name in mtimes} == mtimes
    assert set(dry_run(experiment, workspace, capsys).values()) == {"done"}

    # An edited SFT config reruns SFT and DPO (which starts from it), not the base, the chat set or its data.
    write_experiment(experiment, tiny_dataset, sft_lr=1e-3)
    states = dry_run(experiment, workspace, capsys)
    assert {name for name, state in states.items() if state != "done"} == {"sft", "dpo"}, states
    chat_mtime = (outputs["chatset"] / "set" / "sft.yaml").stat().st_mtime_ns
    code, out, err = glassroom("run", experiment, "--workspace", workspace, "--jobs", "1", capsys=capsys)
    assert code == 0, out + err
    assert (outputs["chatset"] / "set" / "sft.yaml").stat().st_mtime_ns == chat_mtime
    assert (outputs["base"] / "store.sqlite").stat().st_mtime_ns == mtimes["base"]
    graph = load_experiment(experiment).graph(workspace)
    new = {n.step.name: n.output for n in graph}
    assert new["sft"] != sft_dir and new["dpo"] != dpo_dir and new["sft-data"] == outputs["sft-data"]
    with StoreReader(new["dpo"]) as reader:   # the new DPO run starts from the new SFT run
        assert Path(reader.artifact("lineage")["base"]).resolve().is_relative_to(new["sft"].resolve())
    assert set(dry_run(experiment, workspace, capsys).values()) == {"done"}


def dry_run(experiment: Path, workspace: Path, capsys) -> dict:
    """{step: its state} as `glassroom run --dry-run` lists them."""
    code, out, err = glassroom("run", experiment, "--workspace", workspace, "--dry-run", capsys=capsys)
    assert code == 0, out + err
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    return {row[-3]: " ".join(row[:-3]) for row in rows}


BAD_SPECS = {
    "no sft section": ("chatset: {max_per_source: 10}\ndpo: {train: {task: dpo}}\n", "`sft:` is missing or not a mapping"),
    "a word for a number": ("chatset: {max_per_source: lots}\nsft: {train: {task: sft}}\ndpo: {train: {task: dpo}}\n",
                            "chatset: max_per_source must be a whole number of at least 1, got 'lots'"),
    "no conversations": ("chatset: {max_per_source: 0}\nsft: {train: {task: sft}}\ndpo: {train: {task: dpo}}\n",
                         "chatset: max_per_source must be a whole number of at least 1, got 0"),
    "a source misspelt": ("chatset: {sources: [manpages]}\nsft: {train: {task: sft}}\ndpo: {train: {task: dpo}}\n",
                          "chatset: sources: give each of man, python, gcide, wn at most once (unknown: 'manpages')"),
    "a stray key": ("chatset: {max_per_sorce: 10}\nsft: {train: {task: sft}}\ndpo: {train: {task: dpo}}\n",
                    "unexpected keyword argument 'max_per_sorce'"),
    "swapped task": ("chatset: {}\nsft: {train: {task: pretrain}}\ndpo: {train: {task: dpo}}\n",
                     "hero-sft: train.task must be one of ('sft', 'dpo'), got 'pretrain'"),
    "its own init.from": ("chatset: {}\nsft: {init: {from: /elsewhere}, train: {task: sft}}\ndpo: {train: {task: dpo}}\n",
                          "hero-sft: init is set by the step (from `base` and `data`); remove it from the config"),
    "its own data.path": ("chatset: {}\nsft: {train: {task: sft}}\ndpo: {data: {path: /x}, train: {task: dpo}}\n",
                          "hero-dpo: data.path is set by the step"),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_an_edited_posttrain_demo_spec_is_one_line(tmp_path, capsys, case):
    """Before: a KeyError or an int() error from the experiment file, never naming the file the user
    edited; a misspelt source or max_per_source 0 failed only when the chat set step ran (after the
    hero); an init.from or data.path of the user's own was silently replaced by the step's."""
    text, expected = BAD_SPECS[case]
    (tmp_path / "posttrain-demo.yaml").write_text(text)
    experiment = tmp_path / "exp.py"
    experiment.write_text(textwrap.dedent(f'''
        from pathlib import Path
        from glassroom.demo import posttrain_steps
        from glassroom.pipeline import Step

        hero = Step("hero", print, {{}}, kind="runs")
        steps = [hero, *posttrain_steps(Path({str(tmp_path)!r}), hero)]
    '''))
    code, out, err = glassroom("run", experiment, "--workspace", tmp_path / "ws", "--dry-run", capsys=capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and expected in err and "Traceback" not in err, err
    assert str(tmp_path / "posttrain-demo.yaml") in err, err   # the file the user edited


def test_step_arguments_a_user_gets_wrong_are_caught_at_load():
    from glassroom.pipeline import Step
    from glassroom.steps.posttrain import chat_data_step, chatset_step, finetune_step

    assert chatset_step("chat", sources="man").config["sources"] == ["man"]   # was ['m', 'a', 'n']
    chat = chatset_step("chat", sources=("python",), max_per_source=10)
    data = chat_data_step("data", chat, "sft", tokenizer="/x/tokenizer.json")
    with pytest.raises(ValueError, match=r"^sft: base and data must be steps .* got PosixPath; for a model folder"):
        finetune_step("sft", {"train": {"task": "sft"}}, data, base=Path("/models/smol"))
    base = Step("base", print, {}, kind="runs")
    assert finetune_step("sft", {"train": {"task": "sft"}}, data, base=base).config["run"]["init"] == {"from": base.output()}
