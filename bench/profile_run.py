"""pyinfra under cProfile with a CPU-time clock, so the profile counts the
controller's CPU and not gevent's waits on the network.

    python -m bench.profile_run OUT.prof PYINFRA-ARGS...
"""

import cProfile
import runpy
import sys
import time

out, sys.argv = sys.argv[1], ["pyinfra", *sys.argv[2:]]
profiler = cProfile.Profile(time.process_time)
code = 0
try:
    profiler.runcall(runpy.run_module, "pyinfra", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
finally:
    profiler.dump_stats(out)
sys.exit(code)
