"""The Ray runner: each ready step is a Ray task with the CPUs and GPUs the step declares.

Ray is an optional extra (`pip install -e '.[ray]'`). `--ray local` starts Ray on this machine with
every CPU (and GPU) it has and a small object store (GLASSROOM_RAY_OBJECT_STORE_MB, default 128:
steps pass paths, not objects); `--ray ADDRESS` joins a running cluster (`auto`, `host:6379`, or
`ray://host:10001`). Inside its task a step runs exactly as locally, in a subprocess of the task
(`python -m glassroom.pipeline.worker`), so a step with Resources(procs=N) starts torchrun there
with the task's GPUs (Ray sets CUDA_VISIBLE_DEVICES); a step with Resources(workers=W) holds no
CPU itself and its function starts W Ray Train workers on the same cluster (GLASSROOM_RAY_ADDRESS). The run (Ray's driver) holds the steps'
leases; outputs and leases live in the workspace, which must be a folder every Ray node sees at the
same path (a shared filesystem) — and every node needs glassroom installed and the experiment file.
"""

from __future__ import annotations

import os

from glassroom.errors import GlassroomError
from glassroom.pipeline.context import RAY_ADDRESS_ENV
from glassroom.pipeline.graph import Node
from glassroom.pipeline.runner_local import worker_command
from glassroom.pipeline.status import LOG


def import_ray(option: str = "--ray"):
    try:
        import ray  # lazy: ray loads only when this runs
    except ImportError:
        raise GlassroomError(f"{option} needs Ray, an optional extra: pip install -e '.[ray]'") from None
    return ray


def execute_in_task(spec: dict) -> int:
    """Body of the Ray task: run the step's worker process, its output appended to log.txt."""
    import socket
    import subprocess

    import ray  # lazy: ray loads only when this runs

    node_ip = ray.util.get_node_ip_address()
    env = dict(os.environ, GLASSROOM_PARENT_PID=str(os.getpid()), PYTHONUNBUFFERED="1",
               GLASSROOM_EXECUTOR=f"ray:{node_ip}", **{RAY_ADDRESS_ENV: ray.get_runtime_context().gcs_address})
    output = spec["output"]
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, LOG), "ab") as log:
        log.write(f"--- ray task on {socket.gethostname()} ({node_ip}), "
                  f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}\n".encode())
        log.flush()
        proc = subprocess.run(worker_command(spec), stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=env)
    return proc.returncode


def check_reachable(address: str) -> None:
    """A one-line error at once for a HOST:PORT nobody listens on (Ray itself retries for minutes)."""
    import socket

    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if address in ("local", "auto") or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as exc:
        raise GlassroomError(f"--ray {address}: cannot reach a Ray cluster there ({exc.strerror or exc}); "
                             "start one with `ray start --head` or use --ray local") from None


def init_ray(ray, address: str, log_to_driver: bool = False) -> None:
    """ray.init for `--ray ADDRESS`: `local` starts Ray here with every CPU and a small object store
    (GLASSROOM_RAY_OBJECT_STORE_MB, default 128); anything else joins that cluster. One-line error.
    `log_to_driver`: the workers' output printed here (`glassroom train --ray`)."""
    try:
        if address == "local":
            store_mb = int(os.environ.get("GLASSROOM_RAY_OBJECT_STORE_MB", "128"))
            ray.init(address="local", num_cpus=os.cpu_count() or 1, object_store_memory=store_mb * 1024 * 1024,
                     include_dashboard=False, log_to_driver=log_to_driver, logging_level="warning")
        else:
            ray.init(address=address, log_to_driver=log_to_driver, logging_level="warning")
    except (ConnectionError, RuntimeError, ValueError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GlassroomError(f"--ray {address}: cannot start or reach Ray: {first}") from None


class RayBackend:
    name = "ray"

    def __init__(self, address: str):
        self.ray = import_ray()
        ray = self.ray
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        check_reachable(address)
        init_ray(ray, address)
        self.remote = ray.remote(max_retries=0)(execute_in_task)
        self.refs: dict[str, object] = {}  # step name -> ObjectRef

    def check(self, nodes: list[Node]) -> None:
        total = self.ray.cluster_resources()
        for node in nodes:
            res = node.step.resources
            for key, want in (("CPU", res.cpus * res.workers), ("GPU", res.total_gpus)):
                have = total.get(key, 0)
                if want > have:
                    raise GlassroomError(
                        f"step {node.name} needs {want:g} {key}s and the Ray cluster has {have:g}; "
                        "add nodes with them or lower the step's Resources"
                    )

    def can_start(self, node: Node) -> bool:
        return True  # Ray queues tasks until their resources are free

    def start(self, node: Node, spec: dict) -> None:
        res = node.step.resources
        # A step of several workers is the driver of a Ray Train launch whose workers hold the CPUs
        # and GPUs (glassroom/train/ray_train.py); its own task holds none.
        cpus, gpus = (0, 0) if res.workers > 1 else (res.cpus, res.gpus)
        self.refs[node.name] = self.remote.options(
            num_cpus=cpus, num_gpus=gpus, name=f"glassroom:{node.name}-{node.version}"
        ).remote(spec)

    def poll(self) -> list[tuple[str, int]]:
        if not self.refs:
            return []
        ready, _ = self.ray.wait(list(self.refs.values()), num_returns=len(self.refs), timeout=0)
        done = []
        for name, ref in list(self.refs.items()):
            if ref in ready:
                del self.refs[name]
                try:
                    code = int(self.ray.get(ref))
                except Exception:  # the task itself died (node lost, cancelled): the step failed
                    code = -1
                done.append((name, code))
        return done

    def cancel(self, name: str) -> None:
        ref = self.refs.get(name)
        if ref is not None:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # already finished or gone
                pass

    def close(self) -> None:
        for name in list(self.refs):
            self.cancel(name)
        self.ray.shutdown()
