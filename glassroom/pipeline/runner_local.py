"""The local runner: each step in its own subprocess on this machine, within a concurrency limit.

At most `jobs` steps run at once, and the CPUs the running steps declare never add up to more than
this machine has (a step that asks for more runs alone). Each step's process gets its share of
threads: OMP_NUM_THREADS and MKL_NUM_THREADS (which torch and the BLAS libraries read) are the CPUs
it declares, rounded down, at least 1, and never more than an OMP_NUM_THREADS the user set (on 2
cores, two torch processes with 2 threads each slow each other far more than 2x). GPUs are handed
out by index through CUDA_VISIBLE_DEVICES; a step that needs more GPUs than the machine has is an error before anything
starts. Each step's stdout and stderr are appended to `<output>/log.txt`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from glassroom.errors import GlassroomError
from glassroom.pipeline.graph import Node
from glassroom.pipeline.status import LOG, SPEC, atomic_write_json


def worker_command(spec: dict) -> list[str]:
    """The step's process; its spec goes in a file beside the output (argv has a 128 KB limit)."""
    path = Path(spec["output"]) / SPEC
    atomic_write_json(path, spec)
    return [sys.executable, "-m", "glassroom.pipeline.worker", f"@{path}"]


def visible_gpus() -> list[str]:
    """GPU ids this process may use: CUDA_VISIBLE_DEVICES if set, else what nvidia-smi lists."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g for g in env.split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def thread_share(cpus: float, environ=os.environ) -> str:
    """OMP_NUM_THREADS for a step that declares `cpus`: floor(cpus), at least 1, capped by the user's own."""
    share = max(1, int(cpus))
    user = environ.get("OMP_NUM_THREADS", "")
    if user.strip().isdigit() and int(user) >= 1:
        share = min(share, int(user))
    return str(share)


@dataclass
class _Job:
    proc: subprocess.Popen
    cpus: float
    gpus: list[str]


class LocalBackend:
    name = "local"

    def __init__(self, jobs: int | None = None):
        self.cpus = float(os.cpu_count() or 1)
        self.jobs = jobs or int(self.cpus)
        if self.jobs < 1:
            raise GlassroomError(f"--jobs: must be at least 1, got {self.jobs}")
        self.gpus: list[str] | None = None  # looked up only when a step wants GPUs
        self.free_gpus: list[str] = []
        self.running: dict[str, _Job] = {}

    def check(self, nodes: list[Node]) -> None:
        wanted = max((n.step.resources.total_gpus for n in nodes), default=0)
        if wanted:
            self.gpus = visible_gpus()
            self.free_gpus = list(self.gpus)
            for node in nodes:
                if node.step.resources.total_gpus > len(self.gpus):
                    raise GlassroomError(
                        f"step {node.name} needs {node.step.resources.total_gpus} GPUs and this machine has "
                        f"{len(self.gpus)}; run it on a Ray cluster (--ray ADDRESS) or lower its Resources(gpus=...)"
                    )

    def _cpus(self, node: Node) -> float:
        return min(float(node.step.resources.cpus), self.cpus)

    def can_start(self, node: Node) -> bool:
        if len(self.running) >= self.jobs:
            return False
        used = sum(job.cpus for job in self.running.values())
        if used + self._cpus(node) > self.cpus + 1e-9:
            return False
        return node.step.resources.total_gpus <= len(self.free_gpus)

    def start(self, node: Node, spec: dict) -> None:
        gpus = [self.free_gpus.pop(0) for _ in range(node.step.resources.total_gpus)]
        threads = thread_share(self._cpus(node) / node.step.resources.processes)  # each torchrun process its share
        env = dict(os.environ, GLASSROOM_PARENT_PID=str(os.getpid()), PYTHONUNBUFFERED="1",
                   OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        node.output.mkdir(parents=True, exist_ok=True)
        with open(node.output / LOG, "ab") as log:
            proc = subprocess.Popen(worker_command(spec), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env)
        self.running[node.name] = _Job(proc, self._cpus(node), gpus)

    def poll(self) -> list[tuple[str, int]]:
        done = []
        for name, job in list(self.running.items()):
            code = job.proc.poll()
            if code is not None:
                del self.running[name]
                self.free_gpus.extend(job.gpus)
                done.append((name, code))
        return done

    def cancel(self, name: str) -> None:
        job = self.running.get(name)
        if job is None or job.proc.poll() is not None:
            return
        job.proc.send_signal(signal.SIGTERM)
        try:
            job.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            job.proc.kill()
            job.proc.wait()

    def close(self) -> None:
        for name in list(self.running):
            self.cancel(name)
