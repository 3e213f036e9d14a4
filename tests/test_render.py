"""Templates render once per distinct plain values in a run, never stale."""

from ccrhost import render as rendering
from ccrhost.render import render


class Word:
    """A value JSON cannot hold: rendered every time."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


def test_alike_values_render_once_and_other_values_render_anew(monkeypatch):
    monkeypatch.setattr(rendering, "_RENDERED", {})
    calls = []
    real = rendering._environment

    def counting():
        calls.append(1)
        return real()

    monkeypatch.setattr(rendering, "_environment", counting)
    a = render("nccl.conf.j2", begin="B", end="E", env={"NCCL_IB_HCA": "=mlx5_0"})
    assert render("nccl.conf.j2", begin="B", end="E", env={"NCCL_IB_HCA": "=mlx5_0"}) == a and len(calls) == 1
    b = render("nccl.conf.j2", begin="B", end="E", env={"NCCL_IB_HCA": "=mlx5_1"})
    assert "NCCL_IB_HCA==mlx5_1" in b and "NCCL_IB_HCA==mlx5_0" in a and len(calls) == 2
    word = Word("mlx5_0")
    assert "NCCL_IB_HCA=mlx5_0" in render("nccl.conf.j2", begin="B", end="E", env={"NCCL_IB_HCA": word})
    word.text = "mlx5_9"  # not plain data: never kept, so never stale
    assert "NCCL_IB_HCA=mlx5_9" in render("nccl.conf.j2", begin="B", end="E", env={"NCCL_IB_HCA": word})
    assert len(calls) == 4


def test_the_kept_renders_are_bounded(monkeypatch):
    monkeypatch.setattr(rendering, "_RENDERED", {})
    monkeypatch.setattr(rendering, "_RENDERED_MAX", 3)
    for i in range(7):
        assert f"K={i}" in render("nccl.conf.j2", begin="B", end="E", env={"K": i})
    assert 1 <= len(rendering._RENDERED) <= 3
