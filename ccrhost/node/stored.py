"""What a check kept on the node, read back: a stored JSON state file
(never raising on a corrupt one) and the boot it belongs to."""

from __future__ import annotations

import json
from pathlib import Path


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


# a stored GPU reading is a few hundred bytes per GPU; a bigger file is no reading of ours
_STATE_MAX_BYTES = 1 << 20


def read_stored(path: Path) -> tuple[object, str | None]:
    """The JSON a check stored at ``path`` (None: none), and why it was
    discarded when it cannot be parsed (too big, not JSON, nested past the
    parser's depth): never raises, so a corrupt file is replaced, not kept."""
    try:
        with open(path, "rb") as f:
            raw = f.read(_STATE_MAX_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read {path} ({exc.strerror or exc})"
    try:
        if len(raw) > _STATE_MAX_BYTES:
            raise ValueError(f"over {_STATE_MAX_BYTES} bytes")
        return json.loads(raw), None
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[...", deeper than json can go
        return None, f"it is not a reading ({str(exc)[:80] or type(exc).__name__})"
