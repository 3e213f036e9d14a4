"""Inventory data: defaults, and errors that name host, key, value and what is allowed."""

import pytest

from ccrhost.settings import (
    DEFAULT_MODULES,
    InventoryDataError,
    validate_all,
    validate_host,
)


def test_defaults():
    s = validate_host("n1", {"ssh_user": "root", "site_rack": "r12"})
    assert s.rdma_modules == DEFAULT_MODULES
    assert s.roce_mode == "RoCE v2"
    assert s.roce_tos == 106  # DSCP 26 << 2 | ECT(0)


def test_tos_from_dscp_and_ecn():
    assert validate_host("n1", {"roce_dscp": 40, "roce_ecn_bits": 2}).roce_tos == 162
    assert validate_host("n1", {"roce_dscp": 26, "roce_ecn_bits": 0}).roce_tos == 104


def errors_of(data, host="n1"):
    with pytest.raises(InventoryDataError) as info:
        validate_host(host, data)
    return [str(e) for e in info.value.errors]


def test_typo_is_an_error_with_a_suggestion():
    assert errors_of({"roce_dcsp": 26}) == ["n1: roce_dcsp = 26: unknown key; did you mean 'roce_dscp'?"]


def test_out_of_range_names_the_bound():
    assert errors_of({"roce_dscp": 64}) == ["n1: roce_dscp = 64: allowed: integers 0 to 63"]


def test_wrong_type_is_not_coerced():
    assert errors_of({"roce_dscp": "26"}) == ["n1: roce_dscp = '26': Input should be a valid integer"]


def test_module_name_with_shell_metacharacters():
    assert errors_of({"rdma_modules": ["mlx5_ib", "x;reboot"]}) == [
        "n1: rdma_modules[1] = 'x;reboot': must match ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
    ]


def test_roce_version_allowed_values():
    assert errors_of({"roce_version": 3}) == ["n1: roce_version = 3: allowed: 1 or 2"]


def test_all_hosts_reported_together():
    with pytest.raises(InventoryDataError) as info:
        validate_all({"a": {}, "b": {"roce_dscp": -1}, "c": {"roce_version": "2"}})
    assert [e.where for e in info.value.errors] == ["b", "c"]


def test_empty_inventory():
    with pytest.raises(InventoryDataError, match="at least one host"):
        validate_all({})
