"""Every inventory key keeps its name, default, type, rules and description
across restructurings of ccrhost/settings (issue 44): the live models against
a snapshot taken from the code before the split.

tests/fixtures/settings-keys.json is the snapshot. A key added or changed on
purpose is recorded by rewriting it: ``python tests/test_settings_split.py``.
"""

import json
import re
import sys
from pathlib import Path

from ccrhost.settings import HostSettings, Workload

FIXTURE = Path(__file__).parent / "fixtures" / "settings-keys.json"


def _validators(model) -> dict[str, list[str]]:
    """Each field's field validators: function name and mode."""
    out: dict[str, list[str]] = {}
    for name, dec in model.__pydantic_decorators__.field_validators.items():
        for field in dec.info.fields:
            out.setdefault(field, []).append(f"{name}:{dec.info.mode}")
    return {k: sorted(v) for k, v in out.items()}


def _type(annotation) -> str:
    """The annotation as written, a class of ccrhost.settings named by the package
    (``ccrhost.settings.Workload``), not by the module that defines it."""
    return re.sub(r"\bccrhost\.settings\.[a-z_]+\.([A-Z])", r"ccrhost.settings.\1", repr(annotation))


def _fields(model) -> dict[str, dict]:
    schema = model.model_json_schema()["properties"]
    validators = _validators(model)
    return {name: {"default": json.loads(json.dumps(field.default, default=repr)),
                   "required": field.is_required(),
                   "annotation": _type(field.annotation),
                   "metadata": repr(field.metadata),
                   "description": field.description,
                   "json_schema_extra": field.json_schema_extra,
                   "schema": schema[name],
                   "validators": validators.get(name, [])}
            for name, field in model.model_fields.items()}


def snapshot() -> dict:
    return {"HostSettings": _fields(HostSettings), "Workload": _fields(Workload),
            "node_keys": sorted(HostSettings.node_keys()),
            "defs": HostSettings.model_json_schema().get("$defs", {})}


def test_the_same_keys():
    old, new = json.loads(FIXTURE.read_text()), snapshot()
    for model in ("HostSettings", "Workload"):
        assert sorted(new[model]) == sorted(old[model]), f"{model}: a key was added, removed or renamed"


def test_each_key_keeps_its_default_type_rules_and_text():
    old, new = json.loads(FIXTURE.read_text()), snapshot()
    for model in ("HostSettings", "Workload"):
        for key, was in old[model].items():
            now = new[model].get(key)
            assert now is not None, f"{model}.{key} is gone"
            for what in was:
                assert now[what] == was[what], f"{model}.{key}: its {what} changed"


def test_the_same_node_keys_and_nested_models():
    old, new = json.loads(FIXTURE.read_text()), snapshot()
    assert new["node_keys"] == old["node_keys"]
    assert new["defs"] == old["defs"]


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(snapshot(), indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"wrote {FIXTURE}", file=sys.stderr)
