"""The report side of mlacheck imports neither torch nor a kernel library: `mlacheck report`, `mlacheck manifest`
and the pytest plugin's end-of-session analysis run where those are missing, and an observed process pays
nothing for them until its program imports them."""

import subprocess
import sys


def test_report_analysis_and_program_runs_import_no_torch_or_kernel_library():
    code = (
        "import sys\n"
        "import mlacheck.report.model, mlacheck.report.formats, mlacheck.report.terminal, mlacheck.program.saved\n"
        "import mlacheck.analysis, mlacheck.report.manifest, mlacheck.commands.rules_table, mlacheck.rulefiles, mlacheck.trace\n"
        "import mlacheck.capture, mlacheck.events, mlacheck.program.agent, mlacheck.program.observation, mlacheck.config\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'tokenspeed_mla', 'cutlass', 'flash_attn', 'numpy'))\n"
        "print(heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
