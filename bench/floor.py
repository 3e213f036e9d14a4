"""pyinfra's own floor for a ccrhost no-op: the same two operations per
host (tune, verify) and the same one remote command, doing nothing else.

    pyinfra -y INVENTORY bench/floor.py

The bench runs it on the same lab as deploys/rdma.py; its controller CPU
per host is what pyinfra and paramiko cost whatever the deploy does.
"""

from pyinfra import host
from pyinfra.api import operation
from pyinfra.facts.server import Command


@operation()
def read():
    """One remote command (``true``), as the no-op's one snapshot read."""
    host.get_fact(Command, "true")
    return
    yield


@operation()
def nothing():
    """A second operation that yields no command, as the verification."""
    return
    yield


read(name="read")
nothing(name="nothing")
