"""Managed files' state as a pyinfra fact (see :mod:`ccrhost.probes.files`)."""

from __future__ import annotations

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError

from ccrhost import failures
from ccrhost.probes import files


class FileStates(FactBase):
    """
    Returns ``{path: FileState | None}`` for the paths asked for:

    .. code:: python

        states["/etc/nccl.conf"].content   # None when the file does not exist
    """

    default = dict

    def command(self, paths) -> str:
        return files.command(paths)

    def process(self, output):
        try:
            return files.parse_states(output)
        except files.FileFormatError as exc:
            failures.record_current(str(exc))
            raise FactProcessError(str(exc)) from exc
