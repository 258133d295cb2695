"""scripts/long_runs/cpu_ledger.py: a worker's CPU time goes to the run whose folder it holds open."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "long_runs" / "cpu_ledger.py"


def _ledger_module():
    spec = importlib.util.spec_from_file_location("cpu_ledger", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_time_is_attributed_to_the_run_a_worker_holds_open(tmp_path):
    ledger_module = _ledger_module()
    run = tmp_path / "mpsp-2l2h" / "r=0.9" / "seed_0"
    run.mkdir(parents=True)
    (run / ".lock").touch()
    busy = "import sys, time\nf = open(sys.argv[1])\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\nprint('done', flush=True)\ntime.sleep(30)\n"  # noqa: E501
    worker = subprocess.Popen([sys.executable, "-c", busy, run / ".lock"], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "done"
        ledger, last = {}, {}
        ledger_module.sample(tmp_path, ledger, last)
        first = ledger["mpsp-2l2h/r=0.9/seed_0"]
        assert first >= 0.5  # everything the worker used so far, on first sight
        ledger_module.sample(tmp_path, ledger, last)  # idle since: nothing more, nothing twice
        assert ledger["mpsp-2l2h/r=0.9/seed_0"] - first < 0.05
        assert last[worker.pid] == first
    finally:
        worker.kill()
        worker.wait()
