"""The notice reaches a program *under* the job's shell (no daemons: the generated batch
script runs under plain bash, as slurmstepd runs it).

A real job is ``run.sh`` in bash with e.g. ``python train.py`` under it. The wrapper
forwards USR1 to the workload's whole process group, and the Slurm backend's ``run.sh``
preamble (``trap : USR1``) keeps the shell alive, so the trainer hears the notice once
and the job's exit status is the trainer's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from suanli.backends.slurm.backend import RUN_PREAMBLE
from suanli.backends.slurm.sbatch import SbatchSpec, render_script


def test_usr1_reaches_a_python_workload_under_the_shell_once(tmp_path: Path) -> None:
    log = tmp_path / "log"
    trainer = (
        "import signal, sys, time\n"
        f"def notice(*_):\n    open({str(log)!r}, 'a').write('py-usr1\\n'); sys.exit(5)\n"
        "signal.signal(signal.SIGUSR1, notice)\n"
        f"open({str(log)!r}, 'a').write('up\\n')\n"
        "time.sleep(30)\n"
    )
    (tmp_path / "train.py").write_text(trainer)
    run = RUN_PREAMBLE + f'{sys.executable} {tmp_path / "train.py"}\necho "after rc=$?" >> {log}\n'
    (tmp_path / "run.sh").write_text(run)
    spec = SbatchSpec(
        name="py",
        command=f"exec bash {tmp_path / 'run.sh'}",
        node="node1",
        notice_s=60,
        env={"SUANLI_PREEMPT_DEADLINE_FILE": str(tmp_path / "deadline")},
    )
    (tmp_path / "job.sh").write_text(render_script(spec))
    proc = subprocess.Popen(
        ["bash", str(tmp_path / "job.sh")], env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while not (log.exists() and "up" in log.read_text()):
            assert time.monotonic() < deadline, "trainer did not start"
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)  # what `scancel --signal=USR1 --batch` does
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
    assert log.read_text().splitlines() == ["up", "py-usr1", "after rc=5"]
    assert int((tmp_path / "deadline").read_text()) >= int(time.time()) + 50
