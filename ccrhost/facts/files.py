"""Content, mode and owner of files ccrhost manages, several files per command."""

from __future__ import annotations

import base64
import shlex

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError


class FileStates(FactBase):
    """
    Returns, for each path asked for, ``None`` when it does not exist, else:

    .. code:: python

        {"mode": "644", "uid": 0, "gid": 0, "content": "..."}

    pyinfra's ``files.put`` spends three fact commands per file; this reads
    any number of files in one.
    """

    default = dict

    def command(self, paths) -> str:
        quoted = " ".join(shlex.quote(p) for p in paths)
        return (
            f"for f in {quoted}; do if [ -f \"$f\" ]; then "
            "printf '%s\\t%s\\t' \"$f\" \"$(stat -c '%a %u %g' \"$f\")\"; base64 -w0 \"$f\"; echo; "
            "else printf '%s\\t-\\n' \"$f\"; fi; done"
        )

    def process(self, output):
        states = {}
        for line in output:
            fields = line.split("\t")
            if len(fields) < 2:
                continue
            path = fields[0]
            if fields[1] == "-":
                states[path] = None
                continue
            try:
                mode, uid, gid = fields[1].split()
                content = base64.b64decode(fields[2] if len(fields) > 2 else "").decode()
            except (ValueError, UnicodeDecodeError) as exc:
                raise FactProcessError(f"cannot read state of {path}: {exc}") from exc
            states[path] = {"mode": mode, "uid": int(uid), "gid": int(gid), "content": content}
        return states
