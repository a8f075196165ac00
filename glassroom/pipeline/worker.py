"""The process that runs one step: `python -m glassroom.pipeline.worker @SPEC_FILE` (or SPEC_JSON).

Started by the local runner (a subprocess) or inside a Ray task. It loads the experiment file again,
finds the step, checks the version still matches, calls the function with a StepContext, and on
success writes result.json, provenance.json and status "done" (only while its run still holds the
step's lease, so a run that lost the lease can never mark a step done). It dies with its parent
(Linux PR_SET_PDEATHSIG), so killing `glassroom run` stops its steps and their leases go stale.

A step with Resources(procs=N > 1) is re-launched under torchrun (`--standalone
--nproc_per_node=N`); each rank runs the function, rank 0 writes the files. This is the hook a
multi-GPU training step uses: the trainer calls torch.distributed.init_process_group itself.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from glassroom.errors import GlassroomError
from glassroom.pipeline.context import RAY_ADDRESS_ENV, StepContext
from glassroom.pipeline.experiment import load_experiment
from glassroom.pipeline.lock import holds
from glassroom.pipeline.provenance import provenance_record
from glassroom.pipeline.status import (
    DONE, FAILED, INTERRUPTED, PROVENANCE, RESULT, atomic_write_json, read_status, write_status,
)


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent exits (kept across exec, so torchrun too)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    expected = os.environ.get("GLASSROOM_PARENT_PID")
    if expected and str(os.getppid()) != expected:
        os._exit(137)  # the parent died before prctl took effect


def torchrun_command(spec_json: str, procs: int, max_restarts: int = 0) -> list[str]:
    """The command a multi-process step runs: torchrun around this worker, one process per GPU;
    with restarts, every process is started again when one fails (TORCH_DISABLE_SHARE_RDZV_TCP_STORE
    must then be 1: glassroom/train/preflight.py check_launch says why)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}",
            f"--max-restarts={max_restarts}", "-m", "glassroom.pipeline.worker", spec_json]


def main(argv: list[str]) -> int:
    arg = argv[0]
    if arg.startswith("@"):
        with open(arg[1:], encoding="utf-8") as f:
            spec = json.load(f)
    else:
        spec = json.loads(arg)
    under_torchrun = "LOCAL_RANK" in os.environ and "TORCHELASTIC_RUN_ID" in os.environ
    if under_torchrun:
        os.environ.pop("GLASSROOM_PARENT_PID", None)  # our parent is the torchrun agent
    die_with_parent()
    rank = int(os.environ.get("RANK", "0")) if under_torchrun else 0
    world = int(os.environ.get("WORLD_SIZE", "1")) if under_torchrun else 1
    output = Path(spec["output"])
    sys.stdout.reconfigure(line_buffering=True)
    print(f"--- {spec['name']} {spec['version']} attempt {spec['attempt']} "
          f"pid {os.getpid()} rank {rank}/{world} {time.strftime('%Y-%m-%d %H:%M:%S')}", flush=True)

    def fail(state: str, message: str) -> int:
        if rank == 0:
            write_status(output, state, error=message, finished=time.time())
        print(f"--- {state}: {message}", file=sys.stderr, flush=True)
        return 1

    try:
        experiment = load_experiment(spec["experiment"])
        graph = experiment.graph(Path(spec["workspace"]))
    except GlassroomError as exc:
        return fail(FAILED, str(exc))
    node = graph.nodes.get(spec["name"])
    if node is None or node.version != spec["version"]:
        now = node.version if node else "no such step"
        return fail(FAILED, f"the experiment file changed while the run was going: {spec['name']} is now {now}, "
                            f"not {spec['version']}; run `glassroom run` again")
    step = node.step
    res = step.resources
    ray_address = os.environ.get(RAY_ADDRESS_ENV)
    local_procs = res.procs if ray_address else res.processes  # on Ray, workers are Ray Train's
    if local_procs > 1 and not under_torchrun:
        os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        os.execv(sys.executable, torchrun_command(argv[0], local_procs, res.max_restarts))

    if rank == 0:
        where = {"executor": os.environ["GLASSROOM_EXECUTOR"]} if "GLASSROOM_EXECUTOR" in os.environ else {}
        write_status(output, "running", worker_pid=os.getpid(), **where)
    ctx = StepContext(
        name=node.name, version=node.version, output=output, config=node.resolved_config(graph),
        inputs={d: graph.nodes[d].output for d in node.deps}, attempt=spec["attempt"],
        cpus=res.cpus, gpus=res.gpus, rank=rank, world_size=world, workers=res.workers,
        gpus_per_worker=res.gpus_per_worker, max_restarts=res.max_restarts, ray_address=ray_address,
    )
    try:
        result = step.fn(ctx)
    except KeyboardInterrupt:
        return fail(INTERRUPTED, "interrupted")
    except BaseException as exc:  # the step's own code failed: record it, show where in the log
        traceback.print_exc()
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return fail(FAILED, f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__)
    if rank != 0:
        return 0
    if result is not None:
        try:
            json.dumps(result)
        except (TypeError, ValueError):
            return fail(FAILED, f"the function returned a {type(result).__name__}, which is not JSON; "
                                "return a mapping of numbers and text, or None")
        atomic_write_json(output / RESULT, result)
    if not holds(output, spec["token"]):
        print("--- the lease on this step was taken by another run; not marking it done", file=sys.stderr)
        return 3
    # provenance first, then status: a step is "done" only once its provenance is on disk
    finished = time.time()
    status = dict(read_status(output) or {}, host=socket.gethostname(), finished=finished)
    status["duration_s"] = round(finished - (status.get("started") or finished), 3)
    atomic_write_json(output / PROVENANCE, provenance_record(graph, node, spec["context"], status))
    status = write_status(output, DONE, finished=finished, error=None)
    print(f"--- done in {status.get('duration_s', 0):.2f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
