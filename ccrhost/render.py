"""Jinja2 templates shipped inside the package (``ccrhost/templates``), so an
installed wheel renders them as a checkout does."""

from __future__ import annotations

import functools
import json
import shlex
from pathlib import Path

from jinja2 import Environment, FileSystemBytecodeCache, FileSystemLoader, StrictUndefined

TEMPLATES = Path(__file__).resolve().parent / "templates"


class _Compiled(FileSystemBytecodeCache):
    """Jinja's own cache of compiled templates (a private folder of this
    user's under the temp dir, checked against each template's source):
    compiling them cost every deploy run some 15 ms of controller CPU. A
    cache that cannot be written is no cache, never an error."""

    def dump_bytecode(self, bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _bytecode_cache():
    try:
        return _Compiled()
    except (OSError, RuntimeError):  # no safe private folder: compile every run
        return None


@functools.lru_cache(maxsize=None)
def _environment() -> Environment:
    # one per run, and each template compiled once in it, not once per host:
    # at fleet scale compiling was a measurable share of the controller's time
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined,
                      keep_trailing_newline=True, autoescape=False, bytecode_cache=_bytecode_cache(),
                      auto_reload=False)  # package files: no stat per render to see if they changed
    # `| sh`: one shell word, whatever the value (a name read from a node included)
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    return env


# (template, its values as JSON) -> text: a fleet's hosts mostly render the
# same boot script and NCCL files, each render some 0.3 ms of the controller
_RENDERED: dict[tuple[str, str], str] = {}
_RENDERED_MAX = 512


def render(name: str, **values) -> str:
    """Render ``templates/<name>``; an undefined value is an error, not blank.
    Values that are plain data (what JSON holds) render once per run."""
    try:
        key = (name, json.dumps(values, sort_keys=True))
    except (TypeError, ValueError):  # not plain data: no key that says it all
        return _environment().get_template(name).render(**values)
    text = _RENDERED.get(key)
    if text is None:
        if len(_RENDERED) >= _RENDERED_MAX:
            _RENDERED.clear()
        text = _RENDERED[key] = _environment().get_template(name).render(**values)
    return text
