"""``ccrhost calc``: the workload model as a what-if tool (text, JSON,
sweeps, chart, workload files) and its refusals. Reference values are
derived in tests/test_workload.py's docstring and tests.

Model v3 (issue 26) defaults to NCCL's ring and fp32 gradient reduce; the
v2 figures kept here ask for v2's volume with V2 (tree, 2-byte gradients)."""

import json
import struct
import subprocess
import sys

import pytest
import yaml
from click.testing import CliRunner
from conftest import REPO

from ccrhost.cli import main

EXAMPLE = ["calc", "--gpu", "H100 SXM", "--gpus", "8", "--nics", "8", "--nic-gbps", "400"]
V2 = ["--reduction", "tree", "--grad-bytes", "2"]


def calc(*args):
    result = CliRunner().invoke(main, ["calc", *args], catch_exceptions=False)
    return result


def test_worked_example_text():
    out = calc(*EXAMPLE[1:], *V2, "--tokens", "8192", "--dp", "1024")
    assert out.exit_code == 0, out.output
    # CCR = 393216 x 4e11 / (3.96875 x 7.916e15) = 5.00647, exposed 1/6.00647 = 16.6 %, x1.200
    assert "CCR = B / (beta x F) = 5.006\n" in out.output
    assert "beta: 1.009e-05 bytes/FLOP (the node's, from the workload model)" in out.output
    assert "band: compute-underused" in out.output
    assert "exposed communication: 16.6% of the step; step time x1.200" in out.output
    assert "workload model: tree DP over 128 nodes per stage" in out.output
    assert "  - tensor parallelism stays inside the node" in out.output
    assert "0.62" not in out.output  # the old per-GPU answer


def test_json_keys_and_values():
    out = calc(*EXAMPLE[1:], *V2, "--tokens", "8192", "--dp", "1024", "--format", "json")
    data = json.loads(out.output)
    assert data["ccr"] == pytest.approx(5.00647, rel=1e-5)
    assert data["beta"] == pytest.approx(3.96875 / 393216)
    assert data["bandwidth_gbps"] == 3200 and data["tflops"] == 7916
    assert data["band"] == "compute-underused"
    assert data["exposed_comm_fraction"] == pytest.approx(0.166487, rel=1e-5)
    assert data["slowdown"] == pytest.approx(1.199742, rel=1e-6)
    assert data["workload"]["nodes"] == 128 and data["workload"]["assumptions"]


@pytest.mark.parametrize("flags, ccr", [
    (["--compression", "0.125"], 40.0518),  # 2-bit of bf16
    (["--sharded"], 3.33765),  # bare --sharded: ZeRO-3/FSDP, 1.5x the bytes
    (["--sharded", "optimizer"], 5.00647),  # ZeRO-1/2: the all-reduce's volume
    (["--kernel-share", "0.5"], 10.0129),  # half the peak: compute takes twice as long
    (["--grad-bytes", "4"], 2.50324),  # fp32 gradient reduction
    (["--reduction", "ring"], 4.972213),  # ring over 1024 ranks: 2 x 1023/1024 x 2 B = 3.99609375 B
    (["--reduction", "sharp"], 9.934715),  # SHARP: the bytes once, 2 B: 393216 x 4e11 / (2 x 7.916e15)
    (["--reduction", "nvls"], 4.972213 * 1023 / 1024 * 128 / 127),  # NVLS-tree over 128 nodes: 2 x 127/128 x 2 B
    (["--overlap", "0.5"], 5.00647),  # overlap changes exposure, not the CCR
])
def test_workload_flags(flags, ccr):
    out = calc(*EXAMPLE[1:], "--tokens", "8192", "--dp", "1024", "--format", "json", *V2, *flags)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["ccr"] == pytest.approx(ccr, rel=1e-5)


def test_tp_and_a100_and_single_node():
    tp = json.loads(calc(*EXAMPLE[1:], *V2, "--tokens", "8192", "--dp", "16", "--tp", "8", "--format", "json").output)
    assert tp["ccr"] == pytest.approx(5.29851, rel=1e-5)  # 16 nodes: 2 x 15/16 x 2 B
    a100 = json.loads(calc("--gpu", "A100 SXM", *V2, "--nic-gbps", "200", "--tokens", "8192", "--dp", "1024",
                           "--format", "json").output)
    assert a100["ccr"] == pytest.approx(7.93895, rel=1e-5)
    one = calc(*EXAMPLE[1:], "--tokens", "8192", "--dp", "8", "--format", "json")
    data = json.loads(one.output)
    assert data["ccr"] is None and data["band"] == "not-network-bound" and data["exposed_comm_fraction"] == 0
    text = calc(*EXAMPLE[1:], "--tokens", "8192", "--dp", "8").output
    assert "CCR: no inter-node traffic: not network-bound" in text


def test_without_a_workload_the_bands_are_not_applied():
    data = json.loads(calc(*EXAMPLE[1:], "--format", "json").output)
    assert data["beta"] == 4 and data["band"] is None and data["exposed_comm_fraction"] is None
    assert data["ccr"] == pytest.approx(4e11 / (4 * 7.916e15))


def table_rows(text, columns):
    """Data rows of a sweep table, split on white space, keyed by the first `columns` cells."""
    rows = {}
    for line in text.splitlines()[1:]:
        cells = line.split()
        if cells and not line.startswith(("CCR", "nic-gbps=", "chart:")) and ":" not in line:
            rows[tuple(cells[:columns])] = cells[columns:]
    return rows


def test_sweep_over_dp_prints_a_table_and_the_crossings():
    out = calc(*EXAMPLE[1:], *V2, "--tokens", "8192", "--sweep", "dp=8,16,1024")
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0].split() == ["dp", "nodes", "B", "Gb/s", "F", "TFLOPS", "beta", "CCR",
                                                  "band", "exposed", "slowdown", "MFU"]
    rows = table_rows(out.output, 1)
    # dp 8: one node, no NIC traffic; dp 16: 2 nodes, 2 x 1/2 x 2 B = 2 B, CCR 393216 x 4e11 / (2 x 7.916e15)
    # = 9.9347; dp 1024: 5.006.
    assert rows[("8",)][:2] == ["1", "3200"] and rows[("8",)][4:6] == ["none", "not-network-bound"]
    assert rows[("16",)][0] == "2" and rows[("16",)][4:6] == ["9.935", "compute-underused"]
    assert rows[("1024",)][0] == "128" and rows[("1024",)][4:6] == ["5.006", "compute-underused"]
    # the end-to-end MFU at peak kernels: 1 / slowdown = 5.00647 / 6.00647 = 83.35 %; one node 100 %: a ceiling,
    # not a prediction (issue 45), so marked "<="
    assert rows[("1024",)][-1] == "<=83.4%" and rows[("8",)][-1] == "<=100.0%"
    assert "MFU: the end-to-end MFU (model FLOPs / step time / peak F), attention counted causal" in out.output
    assert "'<=' marks a ceiling (kernels at peak), not a prediction" in out.output
    assert "CCR crosses neither 0.5 nor 2 over the sweep (compute-underused, not-network-bound)" in out.output


def test_sweep_over_nic_speed_and_gpu_models():
    out = calc(*V2, "--tokens", "2048", "--dp", "1024", "--sweep", "nic-gbps=100,200,400",
               "--sweep", "gpu=A100 SXM,H100 SXM")
    assert out.exit_code == 0, out.output
    rows = table_rows(out.output, 3)  # "100", "A100", "SXM"
    # H100, 2048 tokens: CCR = 5.00647 / 4 x (rate / 400): 0.31290, 0.62581, 1.25162
    assert rows[("100", "H100", "SXM")][4:6] == ["0.3129", "bandwidth-bound"]
    assert rows[("200", "H100", "SXM")][4:6] == ["0.6258", "balanced"]
    assert rows[("400", "H100", "SXM")][4:6] == ["1.252", "balanced"]
    # A100: 7.93895 / 4 x (rate / 200): 0.99237, 1.98474, 3.96947
    assert rows[("400", "A100", "SXM")][4:6] == ["3.969", "compute-underused"]
    # CCR is proportional to the rate, so the log-log crossing is exact:
    # H100 meets 0.5 at 400 x 0.5 / 1.25162 = 159.79 Gb/s; A100 meets 2 at 200 x 2 / 1.98474 = 201.5 Gb/s.
    assert "gpu=H100 SXM: CCR crosses 0.5 at nic-gbps ~ 159.8 (between 100 and 200)" in out.output
    assert "gpu=A100 SXM: CCR crosses 2 at nic-gbps ~ 201.5 (between 200 and 400)" in out.output


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_chart_is_a_png(tmp_path):
    chart = tmp_path / "sweep.png"
    out = calc("--gpu", "H100 SXM", "--tokens", "2048", "--sweep", "dp=8,16,64,1024",
               "--sweep", "nic-gbps=100,400", "--chart", str(chart))
    assert out.exit_code == 0, out.output
    assert out.output.endswith(f"chart: {chart}\n")
    assert png_size(chart) == (800, 500)  # 8 x 5 inches at 100 dpi
    categorical = tmp_path / "gpus.png"
    out = calc("--tokens", "2048", "--dp", "1024", "--sweep", "gpu=A100 SXM,H100 SXM,B200", "--chart",
               str(categorical), "--format", "json")
    assert json.loads(out.output)["chart"] == str(categorical) and png_size(categorical) == (800, 500)


def test_workload_file_has_the_inventory_keys(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"tokens_per_gpu_step": 8192, "dp_size": 1024, "precision": "bf16",
                                    "sharding": "full", "overlap": 0.5, "reduction": "tree",
                                    "grad_bytes_per_param": 2}))
    data = json.loads(calc(*EXAMPLE[1:], "--workload", str(path), "--format", "json").output)
    assert data["ccr"] == pytest.approx(3.33765, rel=1e-5)  # FSDP, as the flag gives it
    assert data["workload"]["inputs"]["overlap"] == 0.5
    # flags override the file
    data = json.loads(calc(*EXAMPLE[1:], "--workload", str(path), "--sharded", "none", "--format", "json").output)
    assert data["ccr"] == pytest.approx(5.00647, rel=1e-5)
    path.write_text(yaml.safe_dump({"tokens_per_gpu_step": 8192, "dp_size": 1024, "compresion": 0.5}))
    out = calc(*EXAMPLE[1:], "--workload", str(path))
    assert out.exit_code != 0
    assert "calc: verify_workload[compresion] = 0.5: unknown key; allowed: preset, tokens_per_gpu_step" in out.output
    path.write_text("- a list\n")
    out = calc(*EXAMPLE[1:], "--workload", str(path))
    assert out.exit_code == 1 and f"--workload {path}: expected a mapping of verify_workload keys" in out.output


@pytest.mark.parametrize("nested", ["[" * 5000 + "]" * 5000, "{a: " * 5000 + "}" * 5000,
                                    "".join(f"\n{' ' * i}- " for i in range(0, 2 * 5000, 2)) + "1"])
def test_a_workload_nested_5000_deep_is_refused_without_a_traceback(tmp_path, nested):
    # issue 45: the YAML loader recursed once per level and raised RecursionError from calc
    path = tmp_path / "job.yaml"
    path.write_text(f"preset: deepseek-v3\nx: {nested}\n")
    out = calc(*EXAMPLE[1:], "--workload", str(path))
    assert out.exit_code == 1 and not isinstance(out.exception, RecursionError), out.exception
    assert out.output.strip().endswith(f"--workload {path}: nested more than 64 levels deep; allowed: a mapping of "
                                       "verify_workload keys, at most 64 levels")
    # 64 levels still load, and the schema names the unknown key
    path.write_text("preset: deepseek-v3\nx: " + "[" * 63 + "]" * 63 + "\n")
    assert "calc: verify_workload[x] = " in calc(*EXAMPLE[1:], "--workload", str(path)).output


def test_calc_refuses_what_the_model_does_not_allow_and_keeps_a_presets_share(tmp_path):
    # issue 45: each of these was accepted
    out = calc(*EXAMPLE[1:], "--preset", "deepseek-v3", "--moe-max-nodes", "100")
    assert out.exit_code == 2 and ("calc: verify_workload[moe_max_nodes] = 100: allowed: 1 to top_k (8): a token "
                                   "reaches at most one node per expert it is routed to") in out.output
    out = calc(*EXAMPLE[1:], "--tokens", "8192", "--dp", "8", "--pp", "4096", "--params", "1e9",
               "--hidden-size", "1024")
    assert out.exit_code == 2 and ("calc: verify_workload[pp_size] = 4096: pipeline stages hold layers and send "
                                   "activations: give layers, hidden_size and params with pp_size > 1") in out.output
    path = tmp_path / "job.yaml"
    path.write_text("preset: deepseek-v3\nkernel_share: null\n")
    out = calc(*EXAMPLE[1:], "--workload", str(path))
    assert out.exit_code == 2 and ("calc: verify_workload[kernel_share] = None: null beside preset deepseek-v3 would "
                                   "drop its kernel_share (0.425) and fall back to the default; allowed: a value, or "
                                   "leave kernel_share out to keep the preset's") in out.output
    # a null beside the mfu that replaces it is no reset: solved from the mfu
    path.write_text("preset: deepseek-v3\nkernel_share: null\nmfu: 0.3\nmfu_attention: causal\n")
    data = json.loads(calc(*EXAMPLE[1:], "--workload", str(path), "--format", "json").output)
    assert data["workload"]["kernel_share_source"] == "solved from mfu"


@pytest.mark.parametrize("args, message", [
    (["--tokens", "8192", "--dp", "1024", "--compression", "1.5"],
     "calc: verify_workload[compression] = 1.5: allowed: a ratio in (0, 1]"),
    (["--tokens", "8192", "--dp", "1024", "--compression", "0"], "verify_workload[compression] = 0.0: allowed"),
    (["--tokens", "8192", "--dp", "1024", "--overlap", "-0.5"],
     "verify_workload[overlap] = -0.5: allowed: a fraction in [0, 1]"),
    (["--tokens", "8192", "--dp", "1024", "--tp", "16"],
     "the workload does not fit 8 GPUs per node: tp_size = 16: allowed: a divisor of the 8 GPUs per node"),
    (["--tokens", "8192", "--dp", "100"], "dp_size = 100: allowed: dp_size x cp_size a multiple of 8"),
    (["--tokens", "8192", "--dp", "64", "--reduction", "flat"],
     "calc: verify_workload[reduction] = 'flat': removed in model v3"),
    (["--preset", "gpt4"], "calc: verify_workload[preset] = 'gpt4': allowed: 'llama3-8b', 'llama3-70b', "
                           "'llama3-405b', 'llama3-405b-128k', 'gpt3-175b', 'mixtral-8x7b' or 'deepseek-v3'"),
    (["--preset", "mixtral-8x7b", "--ep", "16"], "calc: verify_workload[ep_size] = 16: allowed: at most experts (8)"),
    (["--preset", "llama3-8b", "--cp", "16", "--seq-len", "8"],
     "calc: verify_workload[seq_len] = 8: allowed: at least cp_size (16) tokens"),
    (["--preset", "deepseek-v3", "--sweep", "ep=64,512"], "ep=512: calc: verify_workload[ep_size] = 512: allowed: "
                                                          "at most experts (256)"),
    (["--tokens", "8192", "--dp", "64", "--pp", "2"],
     "calc: verify_workload[pp_size] = 2: pipeline stages hold layers and send activations"),
    (["--tokens", "8192", "--sweep", "dp=8,100"], "dp=100: the workload does not fit 8 GPUs per node"),
    (["--tokens", "8192", "--dp", "8", "--sweep", "colour=1,2"], "unknown key 'colour'; allowed: gpu, gpus"),
    (["--tokens", "8192", "--sweep", "dp=8,x"], "--sweep dp: 'x' is not an integer"),
    (["--sweep", "dp=8,16"], "a sweep compares a workload's CCR"),
    (["--grad-bytes", "2"], "a workload needs --tokens and --dp (or --preset NAME"),
])
def test_refusals_name_the_value_and_write_nothing(args, message, tmp_path):
    chart = tmp_path / "c.png"  # a refused sweep draws no chart
    out = calc("--gpu", "H100 SXM", *args, *(["--chart", str(chart)] if "--sweep" in args else []))
    assert out.exit_code == 2, out.output
    assert message in out.output, out.output
    assert not chart.exists()


def test_chart_needs_a_sweep(tmp_path):
    out = calc(*EXAMPLE[1:], "--tokens", "8192", "--dp", "1024", "--chart", str(tmp_path / "c.png"))
    assert out.exit_code == 2 and "--chart draws a sweep" in out.output
    assert not (tmp_path / "c.png").exists()


def test_chart_without_matplotlib_says_which_extra_to_install(tmp_path, monkeypatch):
    # matplotlib is the optional `chart` extra: an install without it (the
    # image, a compute node) is told what to install, and draws nothing
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    chart = tmp_path / "sweep.png"
    out = calc("--gpu", "H100 SXM", "--tokens", "2048", "--sweep", "dp=8,16", "--chart", str(chart))
    assert (out.exit_code, out.output) == (1, "Error: --chart draws with matplotlib, which is not installed "
                                              "here: pip install 'ccrhost[chart]'\n")
    assert not chart.exists()
    # the extra that message names is the one pyproject.toml declares, and nothing else needs it
    project = __import__("tomllib" if sys.version_info >= (3, 11) else "tomli").loads(
        (REPO / "pyproject.toml").read_text())["project"]
    assert [r for r in project["optional-dependencies"]["chart"] if r.startswith("matplotlib")]
    assert not [r for r in project["dependencies"] if r.startswith(("matplotlib", "numpy"))]
    # without --chart the same sweep still prints its table
    out = calc("--gpu", "H100 SXM", "--tokens", "2048", "--sweep", "dp=8,16")
    assert out.exit_code == 0 and "dp" in out.output


def test_console_script_runs_the_example():
    # the installed entry point, as a user runs it
    out = subprocess.run([sys.executable, "-m", "ccrhost", *EXAMPLE, *V2, "--tokens", "8192",
                          "--dp", "1024"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and "CCR = B / (beta x F) = 5.006" in out.stdout, out.stderr


@pytest.mark.parametrize("flags, ccr", [
    # docs/ccr-model.md's figures under v3's ring, 2-byte gradients, dp 1024:
    # ring 2 x 1023/1024 x 2 = 3.99609375 B; CCR 393216 x 4e11 / (3.99609375 x 7.916e15) = 4.972213
    ([], 4.972213),
    (["--compression", "0.125"], 8 * 4.972213),  # 0.49951 B: 39.7777
    (["--sharded"], 4.972213 * 2 / 3),  # reduce-scatter + 2 gathers: 1023/1024 x 6 = 5.994 B: 3.314809
    (["--tp", "8", "--dp", "128"], 5.006473),  # ring over 128 ranks: 2 x 127/128 x 2 = 3.96875 B
])
def test_readme_ring_figures(flags, ccr):
    out = calc(*EXAMPLE[1:], "--grad-bytes", "2", "--tokens", "8192", "--dp", "1024", "--format", "json", *flags)
    assert json.loads(out.output)["ccr"] == pytest.approx(ccr, rel=1e-6)


def test_readme_a100_and_sweep_crossings():
    # A100: 393216 x 2e11 / (3.99609375 x 2.496e15) = 7.884628
    a100 = calc("--gpu", "A100 SXM", "--nic-gbps", "200", "--grad-bytes", "2", "--tokens", "8192", "--dp", "1024",
                "--format", "json")
    assert json.loads(a100.output)["ccr"] == pytest.approx(7.884628, rel=1e-6)
    # 2048 tokens, fp32 ring: H100 CCR at 400 Gb/s = 2.486106 / 4 = 0.621527, proportional to the rate:
    # 0.5 is crossed at 400 x 0.5 / 0.621527 = 321.78 Gb/s; B200 (8 x 2250 TFLOPS): 0.621527 x 7916 / 18000
    # = 0.273337 at 400 Gb/s, crossing at 400 x 0.5 / 0.273337 = 731.7 Gb/s
    out = calc("--tokens", "2048", "--dp", "1024", "--sweep", "nic-gbps=100,200,400,800",
               "--sweep", "gpu=A100 SXM,H100 SXM,B200")
    assert "gpu=H100 SXM: CCR crosses 0.5 at nic-gbps ~ 321.8 (between 200 and 400)" in out.output
    assert "gpu=B200: CCR crosses 0.5 at nic-gbps ~ 731.7 (between 400 and 800)" in out.output


@pytest.mark.parametrize("args, message", [
    (["--tflops", "nan"], "Invalid value for '--tflops': nan is not a finite number"),
    (["--nic-gbps", "inf"], "Invalid value for '--nic-gbps': inf is not a finite number"),
    (["--beta", "nan"], "Invalid value for '--beta': nan is not a finite number"),
    (["--gpus", "0"], "Invalid value for '--gpus': 0 is out of range: allowed from 1 to 1024"),
    (["--nics", "-1"], "Invalid value for '--nics': -1 is out of range: allowed from 1 to 1024"),
    (["--tokens", "nan", "--dp", "8"], "verify_workload[tokens_per_gpu_step] = nan: Input should be a finite number"),
    (["--tokens", "10", "--dp", "8", "--sweep", "gpus=8,0"], "--sweep gpus: 0 is out of range: allowed from 1 to 1024"),
    (["--tokens", "10", "--dp", "8", "--sweep", "nic-gbps=-5"],
     "--sweep nic-gbps: -5.0 is out of range: allowed above 0 to 1e+06"),
    (["--tokens", "10", "--dp", "8", "--sweep", "nic-gbps=400,nan"], "--sweep nic-gbps: nan is not a finite number"),
    (["--dp", "8", "--sweep", "tokens=10,inf"], "verify_workload[tokens_per_gpu_step] = inf: Input should be a finite "
                                                "number"),
])
def test_numbers_that_are_not_finite_or_out_of_range_are_refused_naming_their_source(args, message):
    out = CliRunner().invoke(main, ["calc", "--gpu", "H100 SXM", *args])
    assert out.exit_code == 2 and message in out.output, out.output
    assert "Traceback" not in out.output and "NaN" not in out.output
