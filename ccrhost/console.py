"""The ``ccrhost`` console entry point, kept free of click.

``ccrhost check`` is a prolog's cost on every node of every job: its node
reads start here, before click and the command's code load (some 30 ms
of a check), and :func:`ccrhost.cli.check` takes them over.
"""

from __future__ import annotations

import os
import sys


def entry(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    check = argv[:1] == ["check"] and not {"-h", "--help"} & set(argv)
    if check:
        from ccrhost.node import gather

        gather.start_early(argv[1:])
    from ccrhost.cli import entry as cli_entry

    try:
        cli_entry(argv)
    except SystemExit as exc:
        if not check or not isinstance(exc.code, int):
            raise
        code = exc.code
    else:
        code = 0
    finally:
        if check:  # the reads started above end with the check, however it ends (os._exit skips atexit)
            from ccrhost.probes import local

            local.end_all()
    # The check has written and closed all it writes: tearing the interpreter
    # down (every module's objects freed one by one) would add some 10 ms to
    # each prolog, for nothing. An output that cannot be flushed exits the
    # usual way, with Python's own message.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        raise SystemExit(code) from None
    os._exit(code)
