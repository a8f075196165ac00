"""`glassroom serve DIR`: the read-only live dashboard over every run below DIR."""

from __future__ import annotations

import argparse
import errno
import socket
from pathlib import Path

from glassroom.commands import new_command, whole
from glassroom.errors import GlassroomError

DESCRIPTION = """\
Serve a read-only web dashboard over every run below DIR (a run is a folder with store.sqlite):
a run list with status and latest values; per run, charts of loss and per-domain evaluation,
learning rate, grad/update/param norms in total, by group and by layer, expert load per MoE layer,
router-bias trajectories, throughput, MFU and tokens per domain, with the journal of events and the
config; several runs on shared charts; and each scaling ladder's rungs against training FLOPs with
the fitted law and the hero's preregistered band (/ladders). Pages update live (a new point shows within 2 s).
GET and HEAD only; binds 127.0.0.1 unless --host says otherwise; answers only Host headers naming
the loopback, the --host address or an --allow-host name. Secrets are redacted; bound to any other
address than the loopback, runs and notes marked private are hidden. docs/serve.md has the details.

example:
  glassroom serve lab/runs --port 8080     # then open http://127.0.0.1:8080/
"""


def register(sub) -> None:
    p = new_command(sub, "serve", "live read-only dashboard over the runs below a folder", DESCRIPTION)
    p.add_argument("dir", metavar="DIR", help="folder holding runs (searched recursively), or one run")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=whole, default=8080, help="port (default 8080)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also answer requests whose Host header names NAME (e.g. the machine's DNS name "
                        "behind a proxy); repeatable")
    p.set_defaults(run=run)


def check_port(host: str, port: int) -> None:
    """Fail with one line, before uvicorn starts, when the address cannot be bound."""
    if not 1 <= port <= 65535:
        raise GlassroomError(f"--port: must be in 1-65535, got {port}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise GlassroomError(f"--host: cannot resolve {host!r}") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise GlassroomError(f"port {port} on {host} is in use; pick another with --port") from None
            raise GlassroomError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def run(args: argparse.Namespace) -> int:
    from glassroom.observe.runs import find_runs, looks_secret
    from glassroom.web.server import is_loopback_name, serve

    if not args.dir.strip():
        raise GlassroomError("DIR is empty; give the folder that holds your runs")
    root = Path(args.dir)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "no such folder"
        raise GlassroomError(f"{root}: {what}; give the folder that holds your runs")
    for name in args.allow_host:
        if not name or any(c in name for c in "/ :@") and not name.startswith("["):
            raise GlassroomError(f"--allow-host: {name!r} is not a host name (give a name like lab.example.org, no port)")
    check_port(args.host, args.port)
    runs = [i for i in find_runs(root) if not looks_secret(i)]   # as the dashboard lists them
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
    shown = f"[{shown}]" if ":" in shown and not shown.startswith("[") else shown
    print(f"serving {len(runs)} run{'s' if len(runs) != 1 else ''} below {root} at http://{shown}:{args.port}/ "
          "(read-only; Ctrl-C stops)", flush=True)
    if not is_loopback_name(args.host.lower()):
        print(f"note: bound to {args.host}: other machines can read these runs (private runs and notes "
              "are hidden)", flush=True)
    serve(root, host=args.host, port=args.port, allow_hosts=tuple(args.allow_host))
    return 0
