#!/usr/bin/env python3
"""A one-node Slurm cluster on 127.0.0.1, for running a sharded `capsim sweep` as a real job array
and checking that the merge equals the unsharded sweep. Four commands:

    scripts/slurm_local.py install
        Installs Debian's slurm-wlm and munge (apt-get) when slurmctld, slurmd or munged is
        missing. Nothing in /etc is changed and no system service is started.
    scripts/slurm_local.py start --dir DIR
        Starts munged (as the munge user, with a key, socket and logs of its own under DIR/munge),
        slurmctld and slurmd (in the foreground of processes this script leaves running, on two
        free loopback ports), with a one-node slurm.conf written to DIR/slurm.conf, and waits
        until the node is idle. Writes DIR/pids.json. Point Slurm's commands at it with
        `export SLURM_CONF=DIR/slurm.conf`.
    scripts/slurm_local.py sweep --dir DIR --shards N --out OUT [--capsim BIN] -- SWEEP_ARGS...
        Submits scripts/slurm/sweep.sbatch as an array of N tasks (task I runs
        `capsim sweep SWEEP_ARGS --shard I/N --no-report -o OUT/shard-I`) and
        scripts/slurm/merge.sbatch after it (`--dependency=afterok`: `capsim merge OUT/shard-*
        -o OUT/merged`), waits for both, and fails unless every task and the merge ended
        COMPLETED with exit code 0:0. The jobs' logs are OUT/slurm-*.out.
    scripts/slurm_local.py stop --dir DIR
        Stops slurmd, slurmctld and munged by the PIDs start wrote, then removes what start wrote
        under DIR (the jobs' outputs elsewhere stay).

On a real cluster only the two .sbatch files and their submission carry over (README.md, "Sharding a
big sweep"); the daemons, the key and slurm.conf are the cluster's own.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from local_server import free_port

ROOT = Path(__file__).resolve().parent.parent
SBATCH_DIR = ROOT / "scripts" / "slurm"
DAEMONS = ("slurmctld", "slurmd", "munged")
# Everything `start` writes under DIR, which `stop` removes.
STATE = ("munge", "state", "spool", "log", "slurm.conf", "pids.json")
START_TIMEOUT_S = 30.0
JOB_TIMEOUT_S = 600.0


def install() -> None:
    missing = [d for d in ("slurmctld", "slurmd", "munged", "mungekey") if not shutil.which(d)]
    if not missing:
        return
    print(f"slurm_local: installing slurm-wlm and munge (apt-get): {', '.join(missing)} missing",
          flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "slurm-wlm", "munge"], check=True,
                   env=env, stdout=subprocess.DEVNULL)


def node_line() -> str:
    """This machine's node definition as `slurmd -C` reports it, named localhost on 127.0.0.1."""
    out = subprocess.run(["slurmd", "-C"], check=True, capture_output=True, text=True).stdout
    fields = [f for f in out.splitlines()[0].split() if not f.startswith("NodeName=")]
    return " ".join(["NodeName=localhost", "NodeAddr=127.0.0.1", *fields, "State=UNKNOWN"])


def slurm_conf(state: Path, ctld_port: int, slurmd_port: int) -> str:
    return "\n".join([
        "ClusterName=capsim",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={state / 'munge' / 'munge.socket'}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={state / 'state'}",
        f"SlurmdSpoolDir={state / 'spool'}",
        f"SlurmctldPidFile={state / 'state' / 'slurmctld.pid'}",
        f"SlurmdPidFile={state / 'spool' / 'slurmd.pid'}",
        f"SlurmctldLogFile={state / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={state / 'log' / 'slurmd.log'}",
        # No cgroups in a container, no mail, no accounting database.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MailProg=/bin/true",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=batch_sched_delay=0",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        node_line(),
        "PartitionName=capsim Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def spawn(command: list, log: Path) -> int:
    """Starts `command` in a session of its own, output to `log`; returns its PID."""
    with open(log, "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True).pid


def start_munge(munge: Path) -> int:
    """munged as the munge user, with its own key; its folder must be traversable by all (the
    socket's) and owned by munge."""
    munge.mkdir(parents=True)
    shutil.chown(munge, "munge", "munge")
    munge.chmod(0o755)
    key = munge / "munge.key"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True)
    shutil.chown(key, "munge", "munge")
    key.chmod(0o600)
    return spawn(["setpriv", "--reuid=munge", "--regid=munge", "--init-groups", "munged",
                  "--foreground", f"--socket={munge / 'munge.socket'}", f"--key-file={key}",
                  f"--log-file={munge / 'munged.log'}", f"--pid-file={munge / 'munged.pid'}",
                  f"--seed-file={munge / 'munged.seed'}"], munge.parent / "log" / "munged.out")


def wait_for(what: str, ready, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.1)
    raise SystemExit(f"slurm_local: {what} not ready after {timeout_s:.0f} s")


def slurm_env(state: Path) -> dict:
    return dict(os.environ, SLURM_CONF=str(state / "slurm.conf"))


def node_idle(state: Path) -> bool:
    out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                         env=slurm_env(state))
    return out.returncode == 0 and out.stdout.strip() == "idle"


def start(state: Path) -> None:
    state = state.resolve()
    if (state / "pids.json").exists():
        raise SystemExit(f"slurm_local: {state / 'pids.json'} exists: stop that cluster first")
    for name in ("state", "spool", "log"):
        (state / name).mkdir(parents=True, exist_ok=True)
    pids = {}
    try:
        pids["munged"] = start_munge(state / "munge")
        wait_for("munged", lambda: (state / "munge" / "munge.socket").exists())
        conf = state / "slurm.conf"
        conf.write_text(slurm_conf(state, free_port(), free_port()))
        pids["slurmctld"] = spawn(["slurmctld", "-D", "-f", str(conf)],
                                  state / "log" / "slurmctld.out")
        pids["slurmd"] = spawn(["slurmd", "-D", "-N", "localhost", "-f", str(conf)],
                               state / "log" / "slurmd.out")
        (state / "pids.json").write_text(json.dumps(pids))
        wait_for("the node", lambda: node_idle(state))
    except BaseException:
        stop_pids(pids)
        raise
    print(f"slurm_local: up; export SLURM_CONF={state / 'slurm.conf'}")


def stop_pids(pids: dict) -> None:
    """SIGTERM to each daemon in turn, SIGKILL after 5 s."""
    for name in DAEMONS:
        pid = pids.get(name)
        if pid is None:
            continue
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                # Reaps it when it is our child; elsewhere only asks whether it is alive.
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    break
            except ChildProcessError:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
            time.sleep(0.05)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def stop(state: Path) -> None:
    state = state.resolve()
    pids_file = state / "pids.json"
    if pids_file.exists():
        stop_pids(json.loads(pids_file.read_text()))
    for name in STATE:
        path = state / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    try:
        state.rmdir()
    except OSError:
        pass  # it holds something start did not write


def submit(state: Path, args: list) -> str:
    out = subprocess.run(["sbatch", "--parsable", *args], check=True, capture_output=True,
                         text=True, env=slurm_env(state))
    return out.stdout.strip().split(";")[0]


def job_states(state: Path, job: str) -> list:
    """(JobId, JobState, ExitCode) of `job` and, for an array, of each of its tasks."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True,
                         env=slurm_env(state))
    rows = []
    for line in out.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        rows.append((fields.get("JobId"), fields.get("JobState"), fields.get("ExitCode")))
    return rows


def wait_jobs(state: Path, jobs: list) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
    while time.monotonic() < deadline:
        rows = [r for job in jobs for r in job_states(state, job)]
        if rows and all(r[1] in final for r in rows):
            bad = [r for r in rows if r[1] != "COMPLETED" or r[2] != "0:0"]
            if bad:
                raise SystemExit(f"slurm_local: jobs did not complete cleanly: {bad}")
            return
        time.sleep(0.2)
    raise SystemExit(f"slurm_local: jobs {jobs} still running after {JOB_TIMEOUT_S:.0f} s")


def sweep(state: Path, shards: int, out: Path, capsim: str, sweep_args: list) -> None:
    state, out = state.resolve(), out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = f"ALL,CAPSIM={Path(capsim).resolve()},CAPSIM_SHARDS={shards},CAPSIM_OUT={out}"
    common = [f"--chdir={ROOT}", f"--export={env}"]
    array = submit(state, [*common, f"--array=0-{shards - 1}",
                           f"--output={out}/slurm-%A_%a.out", str(SBATCH_DIR / "sweep.sbatch"),
                           *sweep_args])
    merge = submit(state, [*common, f"--dependency=afterok:{array}",
                           f"--output={out}/slurm-%j-merge.out", str(SBATCH_DIR / "merge.sbatch")])
    print(f"slurm_local: array job {array} ({shards} tasks), merge job {merge}", flush=True)
    wait_jobs(state, [array, merge])
    print(f"slurm_local: done; merged outputs in {out / 'merged'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install")
    for name in ("start", "stop"):
        sub.add_parser(name).add_argument("--dir", type=Path, required=True)
    p = sub.add_parser("sweep")
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--shards", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--capsim", default=str(ROOT / "target" / "release" / "capsim"))
    p.add_argument("sweep_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.command == "install":
        install()
    elif args.command == "start":
        start(args.dir)
    elif args.command == "stop":
        stop(args.dir)
    else:
        sweep_args = args.sweep_args[1:] if args.sweep_args[:1] == ["--"] else args.sweep_args
        if args.shards < 1:
            sys.exit("slurm_local: --shards must be at least 1")
        sweep(args.dir, args.shards, args.out, args.capsim, sweep_args)


if __name__ == "__main__":
    main()
