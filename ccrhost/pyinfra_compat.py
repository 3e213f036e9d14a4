"""A workaround for pyinfra 3.10 that a fleet run needs.

When a host's sshd dies mid-run, paramiko raises EOFError while opening
the next channel. pyinfra handles TimeoutError, OSError and SSHException
per host, but not EOFError: the greenlet dies and the whole run aborts
with "An internal exception occurred", so the healthy hosts stop too.
Turning EOFError into OSError makes pyinfra fail only the lost host. A lost
connection is recorded (ccrhost.failures) so the reports can say the host
was unreachable, not that it failed a check.
"""

from __future__ import annotations

import functools

from paramiko import SSHException
from pyinfra.connectors.ssh import SSHConnector

from ccrhost import failures


def _lost_connection_is_an_oserror(method):
    if getattr(method, "_ccrhost_wrapped", False):
        return method

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except EOFError as exc:
            failures.record(self.host.name, "SSH connection lost", failures.UNREACHABLE)
            raise OSError(f"SSH connection to {self.host.name} lost") from exc
        except (OSError, SSHException) as exc:  # pyinfra fails the host; the report says why
            failures.record(self.host.name, f"SSH: {exc or type(exc).__name__}", failures.UNREACHABLE)
            raise

    wrapper._ccrhost_wrapped = True
    return wrapper


for _name in ("run_shell_command", "put_file", "get_file"):
    setattr(SSHConnector, _name, _lost_connection_is_an_oserror(getattr(SSHConnector, _name)))
