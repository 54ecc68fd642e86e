#!/usr/bin/env python3
"""Runs every notebook in notebooks/ top to bottom and checks they are committed without outputs.

    .venv/bin/python notebooks/run_all.py            # check stripped, then execute all
    .venv/bin/python notebooks/run_all.py NAME.ipynb # execute some
    .venv/bin/python notebooks/run_all.py --check-stripped
    .venv/bin/python notebooks/run_all.py --strip    # clear outputs in place (before committing)

Each notebook runs with nbclient in a temporary copy of notebooks/ (so nothing is written into the
checkout), with CAPSIM_ROOT set to the checkout and CAPSIM_BIN to the binary (default
target/release/capsim). A cell error fails the run with the cell's traceback; the exit status is 1.
The wall time of each notebook is printed.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

NOTEBOOKS = Path(__file__).resolve().parent
ROOT = NOTEBOOKS.parent
# A hang guard, not a speed check: the notebooks take seconds.
CELL_TIMEOUT_S = 300
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def notebook_paths(names):
    if not names:
        return sorted(NOTEBOOKS.glob("*.ipynb"))
    paths = []
    for name in names:
        path = NOTEBOOKS / Path(name).name
        if not path.is_file():
            sys.exit(f"run_all: no notebook {path}; the notebooks are {[p.name for p in notebook_paths([])]}")
        paths.append(path)
    return paths


def unstripped_cells(nb):
    """Indices of code cells that carry outputs or an execution count."""
    return [i for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]


def strip(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nbformat.write(nb, path)


def check_stripped(paths):
    bad = []
    for path in paths:
        cells = unstripped_cells(nbformat.read(path, as_version=4))
        if cells:
            bad.append(f"{path.name}: code cells {cells} have outputs or execution counts")
    if bad:
        print("notebooks must be committed without outputs; run "
              "`.venv/bin/python notebooks/run_all.py --strip`:\n  " + "\n  ".join(bad), file=sys.stderr)
        return False
    print(f"stripped: {len(paths)} notebooks have no outputs")
    return True


def execute(path, work):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(work)}})
    started = time.monotonic()
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as err:
        print(f"FAILED {path.name} after {time.monotonic() - started:.1f} s:\n{ANSI.sub('', str(err))}",
              file=sys.stderr)
        return False
    print(f"ok {path.name}: {time.monotonic() - started:.1f} s")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="notebook names (default: all in notebooks/)")
    parser.add_argument("--check-stripped", action="store_true", help="only check that outputs are stripped")
    parser.add_argument("--strip", action="store_true", help="clear outputs and execution counts in place")
    args = parser.parse_args()
    paths = notebook_paths(args.notebooks)
    if args.strip:
        for path in paths:
            strip(path)
        print(f"stripped {len(paths)} notebooks")
        return 0
    if not check_stripped(paths):
        return 1
    if args.check_stripped:
        return 0

    binary = Path(os.environ.get("CAPSIM_BIN", ROOT / "target" / "release" / "capsim")).resolve()
    if not binary.is_file():
        print(f"run_all: no capsim binary at {binary}: run `cargo build --release` or set CAPSIM_BIN",
              file=sys.stderr)
        return 1
    os.environ["CAPSIM_BIN"] = str(binary)
    os.environ["CAPSIM_ROOT"] = str(ROOT)
    os.environ.setdefault("MPLBACKEND", "Agg")
    ok = True
    with tempfile.TemporaryDirectory(prefix="capsim-notebooks-") as tmp:
        work = Path(tmp) / "notebooks"
        shutil.copytree(NOTEBOOKS, work, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        for path in paths:
            ok &= execute(work / path.name, work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
