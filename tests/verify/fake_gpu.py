"""A FAKE GPU for the verification-job tests: no physical GPU is here, so a job that should
measure one runs this instead of ``suanli verify --json`` (the server's ``--verify-command``,
``SUANLI_VERIFY_COMMAND``) and prints the report a node of recorded GPUs gives
(``verify_helpers.cuda_report``: real GPUs' NVML recordings with published figures, not a
measurement). Usage: ``python fake_gpu.py RECORDING GPUS``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.verify.verify_helpers import cuda_report  # noqa: E402  (after the path above)

if __name__ == "__main__":
    report = cuda_report(sys.argv[1], int(sys.argv[2]))
    report["fake_gpu"] = "tests/verify/fake_gpu.py: recorded NVML identity and published figures, not a measurement"
    print(json.dumps(report))
