"""Jinja2 templates shipped inside the package (``ccrhost/templates``), so an
installed wheel renders them as a checkout does."""

from __future__ import annotations

import functools
import shlex
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

TEMPLATES = Path(__file__).resolve().parent / "templates"


@functools.lru_cache(maxsize=None)
def _template(name: str):
    # compiled once per run, not once per host: at fleet scale compiling was
    # a measurable share of the controller's time
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined,
                      keep_trailing_newline=True, autoescape=False)
    # `| sh`: one shell word, whatever the value (a name read from a node included)
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    return env.get_template(name)


def render(name: str, **values) -> str:
    """Render ``templates/<name>``; an undefined value is an error, not blank."""
    return _template(name).render(**values)
