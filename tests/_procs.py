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


def run_groups(cmds, timeout, **popen_kwargs):
    """Run the commands side by side, each in a new process group (stdout and stderr together, text);
    ``[(returncode, output), ...]`` in their order.  On timeout every group is killed (forked workers too) and
    ``subprocess.TimeoutExpired`` re-raised with what each command printed as its ``output``; a failed start
    kills the ones already started."""
    import time

    procs = []
    try:
        for cmd in cmds:
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True, **popen_kwargs))
        deadline = time.monotonic() + timeout
        outs = [proc.communicate(timeout=max(deadline - time.monotonic(), 0.0))[0] for proc in procs]
        return [(proc.returncode, out) for proc, out in zip(procs, outs)]
    except subprocess.TimeoutExpired as exc:  # every group killed; what each printed goes with the error
        texts = []
        for i, proc in enumerate(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            texts.append(f"--- command {i} (return code {proc.wait()}):\n{proc.communicate()[0] or ''}")
        exc.output = "\n".join(texts)
        raise
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
