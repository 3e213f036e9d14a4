"""pyinfra with paramiko's idle transports waking every 5 s instead of
every 0.1 s: a measurement of what that polling costs, never shipped.

    python -m bench.quiet_transport PYINFRA-ARGS...

paramiko's Transport thread reads its socket with a 0.1 s timeout
(``Transport._active_check_timeout``) to notice a close; under pyinfra's
gevent every connected host's transport wakes ten times a second for the
whole run, so that cost grows with hosts times wall time.
"""

import sys

import paramiko

paramiko.Transport._active_check_timeout = 5.0
sys.argv = ["pyinfra", *sys.argv[1:]]

from pyinfra_cli.main import main  # noqa: E402

sys.exit(main())
