"""Files that ccrhost writes: whole files it owns, and blocks inside site files."""

from __future__ import annotations

import time

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand

from ccrhost.model.managed import MANAGED_HEADER  # noqa: F401  (the stages import it from here)
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import fail, operation, upload_text


def converge(path: str, wanted: str, state: dict | None, mode: str = "644", owned: bool = True,
             site: str = ""):
    """Commands that bring ``path`` to ``wanted`` from its ``FileStates`` entry.

    The file is copied to ``<path>.ccrhost-bak.<unix time>`` before its
    content is replaced whenever it holds someone else's lines: ``owned``
    (the whole file is ccrhost's) and it lacks ccrhost's header, or it is a
    shared file whose ``site`` lines (outside ccrhost's block) are not empty.
    A file that cannot be read or decoded fails the host, untouched.
    """
    if state is not None and state.error:
        yield from fail(f"{path} left untouched: {state.error}")
        return
    if state is None or state.content != wanted:
        # ours if the header is on its first lines (a script keeps its shebang first)
        foreign = MANAGED_HEADER not in state.content[:512] if owned and state is not None else bool(site.strip())
        if state is not None and foreign:
            yield StringCommand("cp -p", QuoteString(path), QuoteString(f"{path}.ccrhost-bak.{int(time.time())}"))
        yield from upload_text(wanted, path, mode)
    elif state.mode != mode.lstrip("0") or (state.uid, state.gid) != (0, 0):
        yield StringCommand("chown 0:0", QuoteString(path), "&& chmod", mode, QuoteString(path))


@operation
def managed(path: str, content: str, mode: str = "644"):
    """
    Own a whole file: content, root ownership and mode.

    + path: absolute path of the file
    + content: the text it must hold (``MANAGED_HEADER`` is prepended)
    + mode: octal mode, ``644`` for config, ``755`` for scripts

    A file that exists but was not written by ccrhost is copied to
    ``<path>.ccrhost-bak.<unix time>`` before it is replaced.

    **Example:**

    .. code:: python

        files.managed(
            name="Persist RDMA modules",
            path="/etc/modules-load.d/ccrhost-rdma.conf",
            content="ib_uverbs\\nmlx5_ib\\n",
        )
    """
    state = fact_cache.files(host, [path]).get(path)
    yield from converge(path, MANAGED_HEADER + content, state, mode)
