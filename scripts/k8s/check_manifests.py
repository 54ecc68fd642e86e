#!/usr/bin/env python3
"""Checks scripts/k8s/{sweep,merge}-job.yaml as far as it can be done without a cluster: each is
a valid batch/v1 Job (strict: no unknown field) against Kubernetes' own schema (the
kubernetes-validate package ships it), and the sweep's index is wired as in the Slurm array
(scripts/slurm/sweep.sbatch): pod I runs `--shard ${JOB_COMPLETION_INDEX}/N` with N equal to the
Job's completions, writes to a folder named by the same index, and the merge reads every such
folder. Exits 1 with the reason on the first failure. Usage: check_manifests.py [K8S_DIR]
"""
import re
import sys
from pathlib import Path

import kubernetes_validate
import yaml

INDEX = "${JOB_COMPLETION_INDEX}"


def fail(message: str) -> None:
    sys.exit(f"check_manifests: {message}")


def load(path: Path) -> dict:
    manifest = yaml.safe_load(path.read_text())
    try:
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as e:
        fail(f"{path}: not a valid Job: {e.message} at {'.'.join(map(str, e.path))}")
    if manifest.get("kind") != "Job":
        fail(f"{path}: kind {manifest.get('kind')!r}, expected Job")
    return manifest


def command(job: dict) -> str:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return " ".join(container.get("command", []) + container.get("args", []))


def check_sweep(job: dict) -> str:
    """The sweep's shard folder pattern (`/data/out/shard-`), once its wiring is checked."""
    spec = job["spec"]
    if spec.get("completionMode") != "Indexed":
        fail("the sweep Job must be Indexed (completionMode: Indexed)")
    line = command(job)
    shard = re.search(r"--shard\s+(\S+)/(\d+)", line)
    if not shard or shard.group(1) != INDEX:
        fail(f"the sweep must run --shard {INDEX}/N: {line}")
    if int(shard.group(2)) != spec["completions"]:
        fail(f"--shard .../{shard.group(2)} but completions is {spec['completions']}")
    out = re.search(r"-o\s+(\S+)", line)
    if not out or not out.group(1).endswith(INDEX) or "--no-report" not in line:
        fail(f"each pod must write its own folder (-o ...{INDEX}) with --no-report: {line}")
    return out.group(1)[: -len(INDEX)]


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    prefix = check_sweep(load(folder / "sweep-job.yaml"))
    merge = command(load(folder / "merge-job.yaml"))
    if f"capsim merge {prefix}*" not in merge:
        fail(f"the merge must read every shard ({prefix}*): {merge}")
    print(f"check_manifests: both Jobs valid (Kubernetes {kubernetes_validate.latest_version()}); "
          f"the index is wired as in the Slurm array")


if __name__ == "__main__":
    main()
