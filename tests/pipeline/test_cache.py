"""glassroom run: done steps are reused, a changed value reruns only its step and descendants,
failures rerun, --only/--force/--dry-run, provenance and `glassroom show`."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from glassroom.errors import GlassroomError
from glassroom.pipeline import Step
from glassroom.pipeline.graph import build_graph
from pipeline_helpers import calls, glassroom, write_experiment

# a -> b -> c, and a -> d: b and d are independent
DIAMOND = """
a = Step("a", work, {{"add": 1}}, kind="data")
b = Step("b", work, {{"in_a": a / "value.json", "add": {b_add}, "fail_if": {fail_if!r}}})
c = Step("c", work, {{"in_b": b / "value.json", "add": 100}}, kind="runs")
d = Step("d", work, {{"in_a": output_of("a", "value.json"), "add": 1000}})
steps = [c, d]
"""


def diamond(tmp_path: Path, b_add: int = 10, fail_if: str = "") -> Path:
    return write_experiment(tmp_path, DIAMOND.format(b_add=b_add, fail_if=fail_if))


def value(ws: Path, kind: str, name: str) -> int:
    return json.loads((_newest(ws / kind, name) / "value.json").read_text())["value"]


def _newest(folder: Path, name: str) -> Path:
    return max(folder.glob(f"{name}-*"), key=lambda p: (p / "status.json").stat().st_mtime)


def _rows(dry_run_output: str) -> dict[str, tuple[str, str]]:
    """step name -> (state, the rest of its line) from `glassroom run --dry-run`."""
    rows = {}
    for line in dry_run_output.splitlines()[1:]:
        for state in ("done", "to run", "running"):
            if line.strip().startswith(state + " "):
                rest = line.strip()[len(state):].split()
                rows[rest[0]] = (state, " ".join(rest[1:]))
    return rows


def test_rerun_reuses_every_done_step(tmp_path, capsys):
    exp, ws = diamond(tmp_path), tmp_path / "ws"
    code, _, err = glassroom("run", exp, "--workspace", ws, capsys=capsys)
    assert code == 0, err
    assert [calls(tmp_path, s) for s in "abcd"] == [1, 1, 1, 1]
    assert value(ws, "runs", "c") == 1 + 10 + 100 and value(ws, "steps", "d") == 1 + 1000
    assert "4 steps: 0 reused, 4 ran" in err

    code, _, err = glassroom("run", exp, "--workspace", ws, capsys=capsys)
    assert code == 0
    assert [calls(tmp_path, s) for s in "abcd"] == [1, 1, 1, 1]  # nothing recomputed
    assert "4 steps: 4 reused, 0 ran" in err


def test_changing_one_value_reruns_only_that_step_and_its_descendants(tmp_path, capsys):
    ws = tmp_path / "ws"
    assert glassroom("run", diamond(tmp_path, b_add=10), "--workspace", ws, capsys=capsys)[0] == 0
    old_b = next((ws / "steps").glob("b-*"))
    old_c = next((ws / "runs").glob("c-*"))

    code, _, err = glassroom("run", diamond(tmp_path, b_add=20), "--workspace", ws, capsys=capsys)
    assert code == 0, err
    assert [calls(tmp_path, s) for s in "abcd"] == [1, 2, 2, 1]
    assert "4 steps: 2 reused, 2 ran" in err
    # new versions live beside the old ones, which are kept
    assert len(list((ws / "steps").glob("b-*"))) == 2 and old_b.exists() and old_c.exists()
    new_c = _newest(ws / "runs", "c")
    assert new_c != old_c and json.loads((new_c / "value.json").read_text())["value"] == 1 + 20 + 100

    # and back again: both versions are done, nothing runs
    assert glassroom("run", diamond(tmp_path, b_add=10), "--workspace", ws, capsys=capsys)[0] == 0
    assert [calls(tmp_path, s) for s in "abcd"] == [1, 2, 2, 1]


def test_failed_step_blocks_only_its_descendants_and_reruns(tmp_path, capsys):
    marker = tmp_path / "fail-now"
    marker.touch()
    exp, ws = diamond(tmp_path, fail_if=str(marker)), tmp_path / "ws"
    code, _, err = glassroom("run", exp, "--workspace", ws, capsys=capsys)
    assert code == 1
    assert "FAILED b: RuntimeError: asked to fail" in err
    assert "skip   c: it needs b" in err
    assert [calls(tmp_path, s) for s in "abcd"] == [1, 1, 0, 1]  # d is independent of b: it ran
    b_dir = next((ws / "steps").glob("b-*"))
    status = json.loads((b_dir / "status.json").read_text())
    assert status["state"] == "failed" and "asked to fail" in status["error"]
    assert "Traceback" in (b_dir / "log.txt").read_text()

    code, out, _ = glassroom("run", exp, "--workspace", ws, "--dry-run", capsys=capsys)
    assert "to run   b" in out and "failed before: RuntimeError: asked to fail" in out

    marker.unlink()
    code, _, err = glassroom("run", exp, "--workspace", ws, capsys=capsys)
    assert code == 0, err
    assert [calls(tmp_path, s) for s in "abcd"] == [1, 2, 1, 1]
    assert "start  b" in err and "attempt 2" in err
    assert json.loads((b_dir / "status.json").read_text())["attempt"] == 2


def test_dry_run_lists_state_version_and_output_and_runs_nothing(tmp_path, capsys):
    exp, ws = diamond(tmp_path), tmp_path / "ws"
    assert glassroom("run", exp, "--workspace", ws, "--only", "^d$", capsys=capsys)[0] == 0
    assert [calls(tmp_path, s) for s in "abcd"] == [1, 0, 0, 1]  # --only d runs d and what it needs
    code, out, _ = glassroom("run", exp, "--workspace", ws, "--dry-run", capsys=capsys)
    assert code == 0
    graph = build_graph(_load_steps(exp), ws)
    rows = _rows(out)
    for name, state in {"a": "done", "b": "to run", "c": "to run", "d": "done"}.items():
        node = graph.nodes[name]
        assert rows[name][0] == state, out
        assert rows[name][1].split()[:2] == [node.version, str(node.output)]
    assert "4 steps (2 done, 2 to run, 0 running elsewhere)" in out
    assert [calls(tmp_path, s) for s in "abcd"] == [1, 0, 0, 1]
    assert not list((ws / "steps").glob("b-*"))  # a dry run writes nothing


def test_force_recomputes_the_step_and_everything_downstream(tmp_path, capsys):
    exp, ws = diamond(tmp_path), tmp_path / "ws"
    assert glassroom("run", exp, "--workspace", ws, capsys=capsys)[0] == 0
    stray = next((ws / "steps").glob("b-*")) / "stray.txt"
    stray.write_text("left by an old version of the step")
    code, out, _ = glassroom("run", exp, "--workspace", ws, "--force", "b", "--dry-run", capsys=capsys)
    assert "(forced)" in out
    code, _, err = glassroom("run", exp, "--workspace", ws, "--force", "b", capsys=capsys)
    assert code == 0, err
    assert [calls(tmp_path, s) for s in "abcd"] == [1, 2, 2, 1]
    assert not stray.exists()  # a forced step starts from an empty folder


def test_inputs_reach_the_function_as_paths_and_dataclass_configs_hash(tmp_path):
    @dataclass(frozen=True)
    class Cfg:
        lr: float
        layers: int = 2

    def fn(ctx):  # never called here
        return None

    fn.__qualname__ = "fn"  # pretend it is top level, as an experiment's function would be
    a = Step("a", fn, Cfg(lr=1e-3))
    b = Step("b", fn, {"data": a / "shards", "cfg": Cfg(lr=1e-3)})
    g1 = build_graph([b], tmp_path)
    g2 = build_graph([Step("b", fn, {"data": Step("a", fn, Cfg(lr=2e-3)) / "shards", "cfg": Cfg(lr=1e-3)})], tmp_path)
    g3 = build_graph([Step("b", fn, {"data": Step("a", fn, Cfg(lr=1e-3)) / "shards", "cfg": Cfg(lr=1e-3)})], tmp_path)
    assert g1.nodes["a"].version != g2.nodes["a"].version
    assert g1.nodes["b"].version != g2.nodes["b"].version  # an input's version is part of b's
    assert {n: g1.nodes[n].version for n in "ab"} == {n: g3.nodes[n].version for n in "ab"}  # stable
    assert g1.nodes["a"].output == tmp_path / "steps" / f"a-{g1.nodes['a'].version}"
    resolved = g1.nodes["b"].resolved_config(g1)
    assert resolved["data"] == str(g1.nodes["a"].output / "shards")
    assert resolved["cfg"] == Cfg(lr=1e-3)
    with pytest.raises(GlassroomError, match=r"config\.bad: a object cannot be part"):
        build_graph([Step("x", fn, {"bad": object()})], tmp_path)


def test_show_prints_how_an_output_was_produced(tmp_path, capsys):
    exp, ws = diamond(tmp_path), tmp_path / "ws"
    assert glassroom("run", exp, "--workspace", ws, capsys=capsys)[0] == 0
    c_dir = next((ws / "runs").glob("c-*"))
    code, out, _ = glassroom("show", c_dir / "value.json", capsys=capsys)
    assert code == 0
    prov = json.loads((c_dir / "provenance.json").read_text())
    assert [s["name"] for s in prov["chain"]] == ["a", "b", "c"]  # the step chain, inputs first
    assert prov["experiment"]["path"] == str(exp.resolve())
    commit = subprocess.run(["git", "-C", str(Path(__file__).parent.parent), "rev-parse", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    assert prov["glassroom"]["commit"] == commit
    assert str(c_dir) in out and "status      done" in out and str(exp.resolve()) in out
    assert f"at commit {commit[:12]}" in out
    for s in prov["chain"]:
        assert f"{s['name']}  {s['version']}  exp.py:work" in out
    assert "in_b <- b@" in out and "value = 111" in out

    code, out, _ = glassroom("show", c_dir, "--json", capsys=capsys)
    assert json.loads(out)["provenance"]["chain"][-1]["name"] == "c"
    code, _, err = glassroom("show", tmp_path, capsys=capsys)
    assert code == 2 and err.startswith("error: ") and "not inside a step output" in err


@pytest.mark.slow
def test_example_experiment_runs_and_its_report_is_real(tmp_path, capsys):
    exp = Path(__file__).parent.parent.parent / "experiments" / "stdlib_tokens.py"
    ws = tmp_path / "ws"
    code, _, err = glassroom("run", exp, "--workspace", ws, "--jobs", "2", capsys=capsys)
    assert code == 0, err
    report = next((ws / "stats").glob("stdlib-report-*"))
    result = json.loads((report / "result.json").read_text())
    # byte-level BPE with a 4K vocab needs more tokens than Python's own tokenizer on the same code
    assert result["tokens"] > 100_000 and result["lines"] > 10_000
    assert 1 < result["bpe_bytes_per_token"] < result["python_bytes_per_token"]
    assert "standard library" in (report / "report.md").read_text()


@pytest.mark.dist
def test_torchrun_hook_runs_a_multi_process_step(tmp_path, capsys):
    pytest.importorskip("torch")
    exp = write_experiment(tmp_path, """
    def ranks(ctx):
        (ctx.output / f"rank{ctx.rank}-of-{ctx.world_size}").write_text(os.environ.get("LOCAL_RANK", "?"))
        return {"world": ctx.world_size} if ctx.is_main else None

    steps = [Step("ddp", ranks, {"x": 1}, resources=Resources(cpus=1, procs=2))]
    """)
    code, _, err = glassroom("run", exp, "--workspace", tmp_path / "ws", capsys=capsys)
    assert code == 0, err
    out = next((tmp_path / "ws" / "steps").glob("ddp-*"))
    assert sorted(p.name for p in out.glob("rank*")) == ["rank0-of-2", "rank1-of-2"]
    assert json.loads((out / "result.json").read_text()) == {"world": 2}


@pytest.mark.dist
def test_a_step_of_two_workers_is_restarted_whole_when_one_dies(tmp_path, capsys):
    pytest.importorskip("torch")
    exp = write_experiment(tmp_path, """
    def ranks(ctx):
        attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
        (ctx.output / f"rank{ctx.rank}-attempt{attempt}").write_text("")
        import torch.distributed as dist
        dist.init_process_group("gloo")
        if ctx.rank == 1 and attempt == "0":
            os.kill(os.getpid(), 9)   # a worker lost: every worker starts again
        dist.barrier()
        dist.destroy_process_group()
        return {"attempt": attempt, "world": ctx.world_size} if ctx.is_main else None

    steps = [Step("two", ranks, {"x": 1}, resources=Resources(cpus=2, workers=2, max_restarts=1))]
    """)
    code, _, err = glassroom("run", exp, "--workspace", tmp_path / "ws", capsys=capsys)
    assert code == 0, err
    out = next((tmp_path / "ws" / "steps").glob("two-*"))
    assert {"rank0-attempt1", "rank1-attempt0", "rank1-attempt1"} <= {p.name for p in out.glob("rank*")}
    assert json.loads((out / "result.json").read_text()) == {"attempt": "1", "world": 2}


@pytest.mark.parametrize("kwargs,message", [
    ({"workers": 0}, "Resources.workers must be a whole number >= 1"),
    ({"max_restarts": -1}, "Resources.max_restarts must be a whole number >= 0"),
    ({"procs": 2, "workers": 2}, "give one of them"),
    ({"gpus": 1, "workers": 2}, "say gpus_per_worker instead"),
    ({"gpus_per_worker": True}, "Resources.gpus_per_worker must be a whole number"),
])
def test_resources_that_cannot_be_launched_are_refused(kwargs, message):
    from glassroom.pipeline.step import Resources

    with pytest.raises(GlassroomError, match=message):
        Resources(**kwargs)


def _load_steps(exp: Path):
    from glassroom.pipeline.experiment import load_experiment

    return load_experiment(exp).steps


if sys.platform != "linux":  # leases rely on Linux /proc and flock semantics
    pytestmark = pytest.mark.skip("pipeline tests need Linux")
