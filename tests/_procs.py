"""One home for tests that start a process: its own process group, killed as a group on timeout."""

from __future__ import annotations

import os
import signal
import subprocess


def run_group(cmd, timeout, **popen_kwargs):
    """Run ``cmd`` in a new process group (stdout and stderr together, text); ``(returncode, output)``.  On
    timeout the whole group is killed (forked workers too) and ``subprocess.TimeoutExpired`` re-raised."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **popen_kwargs)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc.returncode, out
