"""Validating a host's inventory data: every problem of every host, each
naming the host, the key, the value and what is allowed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ccrhost.settings.host import HostSettings
from ccrhost.settings.keys import OWNED_PREFIXES, REMOVED_KEYS, bounds
from ccrhost.settings.workload import Workload


@dataclass(frozen=True)
class DataError:
    where: str  # host name (or "inventory")
    key: str
    value: Any
    allowed: str

    def __str__(self) -> str:
        return f"{self.where}: {self.key} = {self.value!r}: {self.allowed}"


class InventoryDataError(Exception):
    def __init__(self, errors: list[DataError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def _describe(key: str, error: dict) -> str:
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "literal_error":
        return f"allowed: {ctx.get('expected')}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        if key == "verify_link_thresholds":
            return "allowed: integers 0 to 65535"
        return bounds(key, HostSettings) or error["msg"]
    if kind == "extra_forbidden" and key == "verify_workload":
        return f"unknown key; allowed: {', '.join(Workload.model_fields)}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}"
    return error["msg"].removeprefix("Value error, ")


def owned_keys(data: dict) -> dict:
    return {k: v for k, v in data.items() if k.startswith(OWNED_PREFIXES)}


def _platform(name: str, mine: dict, given: dict) -> list[DataError]:
    """verify_profile resolved into verify_platform (on the controller; a node's check.yaml has it already),
    and the platform's settings defaults under the host's own keys (``given``: each key it set, and the
    file that says so): the problems, naming the file."""
    from ccrhost.model.platform import PlatformError, from_resolved, resolve

    ref = mine.get("verify_profile")
    if mine.get("verify_platform") is not None:
        try:
            platform = from_resolved(mine["verify_platform"])
        except PlatformError:
            return []  # the model's validator names it
    elif ref is None:
        return []
    elif not isinstance(ref, str):
        return []  # the model says what a verify_profile is
    else:
        try:
            platform = resolve(ref)
        except PlatformError as exc:
            mine.pop("verify_profile")
            return [DataError(name, "verify_profile" if exc.key == "verify_profile" else f"verify_profile[{exc.key}]",
                              exc.value, exc.allowed if exc.where == "verify_profile" else f"{exc.where}: {exc.allowed}")]
        mine["verify_platform"] = platform.to_data()
    errors = []
    known = set(HostSettings.model_fields)
    for key, entry in platform.settings.items():
        if key not in known or key in ("verify_profile", "verify_platform"):
            errors.append(DataError(name, f"verify_profile[settings.{key}]", entry["value"],
                                    f"{platform.origin[-1] if platform.origin else platform.name}: "
                                    "unknown settings key"))
        elif key not in mine:  # the host's own value wins
            mine[key] = entry["value"]
            given[key] = platform.origin[-1] if platform.origin else platform.name
    return errors


def validate_host(name: str, data: dict) -> HostSettings:
    """Validate one host's data; raise InventoryDataError with every problem."""
    mine = owned_keys(data)
    known = set(HostSettings.model_fields)
    errors = []
    for key in sorted(set(mine) - known):
        import difflib  # only for a key that is not known

        close = difflib.get_close_matches(key, known, n=1)
        hint = f"unknown key; did you mean {close[0]!r}?" if close else "unknown key"
        hint = REMOVED_KEYS.get(key, hint)
        errors.append(DataError(name, key, mine.pop(key), hint))
    from_platform: dict[str, str] = {}
    errors += _platform(name, mine, from_platform)
    for key, value in mine.items():  # YAML and Python data give lists; the model holds tuples
        if isinstance(value, list):
            mine[key] = tuple(value)
    try:
        settings = HostSettings(**mine)
    except ValidationError as exc:
        for err in exc.errors():
            if not err["loc"]:  # a rule across keys (model_post_init)
                # cross-key rules raise "[key] message"
                keys, _, msg = err["msg"].removeprefix("Value error, [").partition("] ")

                def given(k):  # the value in force: the host's, else the default
                    field = HostSettings.model_fields.get(k)
                    return mine[k] if k in mine else field.default if field else None
                value = {k: given(k) for k in keys.split("/")} if "/" in keys else given(keys)
                errors.append(DataError(name, keys, value, msg))
                continue
            key = str(err["loc"][0])
            value = mine.get(key)
            inner, sep, msg = err["msg"].removeprefix("Value error, [").partition("] ")
            if len(err["loc"]) == 1 and sep and err["msg"].startswith("Value error, ["):
                # a rule of the nested mapping naming its own key (presets.expand): "[key] message"
                value = value.get(inner) if isinstance(value, dict) else None
                errors.append(DataError(name, f"{key}[{inner}]", value, msg))
                continue
            if len(err["loc"]) > 1:
                key = f"{key}[{err['loc'][1]}]"
                value = err.get("input")
            allowed = _describe(str(err['loc'][0]), err)
            if str(err["loc"][0]) in from_platform:
                allowed += f" (the default of platform {from_platform[str(err['loc'][0])]}'s settings)"
            errors.append(DataError(name, key, value, allowed))
        settings = None
    for problem in settings.workload_problems() if settings else ():
        allowed = problem.allowed
        if problem.key in ("tp_size", "dp_size"):
            allowed += " (GPUs per node from verify_gpu_count / verify_profile)"
        errors.append(DataError(name, f"verify_workload[{problem.key}]", problem.value, allowed))
    if errors:
        raise InventoryDataError(errors)
    return settings


def validate_all(hosts: dict[str, dict]) -> dict[str, HostSettings]:
    """Validate every host; report all problems of all hosts at once."""
    if not hosts:
        raise InventoryDataError([DataError("inventory", "hosts", [], "at least one host is required")])
    settings, errors = {}, []
    for name, data in hosts.items():
        try:
            settings[name] = validate_host(name, data)
        except InventoryDataError as exc:
            errors.extend(exc.errors)
    if errors:
        raise InventoryDataError(errors)
    return settings
