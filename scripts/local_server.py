"""What the scripts that start a real server on 127.0.0.1 share (scripts/triton.py,
scripts/llama_server.py): a free port, and stopping a server by the PID its start wrote."""
import os
import signal
import socket
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_pid(pid: int) -> None:
    """Stops the process group `pid` leads (the server was started in a session of its own):
    SIGTERM, then SIGKILL after 5 s."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it exited between the last look and now


def stop_dir(folder: str) -> None:
    """Stops the server whose start wrote FOLDER/pid, and forgets it."""
    pid_file = Path(folder) / "pid"
    if pid_file.exists():
        stop_pid(int(pid_file.read_text()))
        pid_file.unlink()
