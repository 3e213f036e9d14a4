"""The one writer (ccrhost/output.py): regular files are replaced atomically,
anything else is written through and never destroyed, `-` is stdout.

Never the machine's own /dev/stdout: every special file here is made in
tmp_path (a FIFO, a socket, links to /dev/null)."""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from ccrhost.output import write_atomic, write_output


class FifoReader:
    """Reads a FIFO to its end in a thread (a writer blocks until a reader opens it)."""

    def __init__(self, path: Path):
        self.data = b""
        self._thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self._thread.start()

    def _read(self, path):
        with open(path, "rb") as f:
            self.data = f.read()

    def result(self) -> bytes:
        self._thread.join(10)
        assert not self._thread.is_alive(), "the FIFO was never written and closed"
        return self.data


def _siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_fifo_is_written_through_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    write_atomic(fifo, "ccr 1.0\n")
    assert reader.result() == b"ccr 1.0\n"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _siblings(tmp_path) == ["out"]  # no temporary file left behind


def test_a_link_to_a_fifo_keeps_link_and_fifo(tmp_path):
    """What /dev/stdout is when stdout is a pipe: a link to a non-regular file."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "stdout"
    link.symlink_to(fifo)
    reader = FifoReader(fifo)
    write_atomic(link, "text\n")
    assert reader.result() == b"text\n"
    assert os.path.islink(link) and os.readlink(link) == str(fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _siblings(tmp_path) == ["pipe", "stdout"]


def test_a_link_to_dev_null_is_written_through_and_kept(tmp_path):
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    before = os.stat("/dev/null")
    write_atomic(link, "discarded\n")
    assert os.readlink(link) == "/dev/null"
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert _siblings(tmp_path) == ["null"]


def test_a_chain_of_links_to_a_fifo_is_followed_to_its_end(tmp_path):
    fifo = tmp_path / "d" / "pipe"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    (tmp_path / "b").symlink_to("d/pipe")  # relative, as /dev/stdout's own link is
    (tmp_path / "a").symlink_to(tmp_path / "b")
    reader = FifoReader(fifo)
    write_atomic(tmp_path / "a", "x\n")
    assert reader.result() == b"x\n"
    assert os.path.islink(tmp_path / "a") and os.path.islink(tmp_path / "b")


def test_a_unix_socket_is_written_through(tmp_path):
    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    got = []

    def serve():
        conn, _ = server.accept()
        with conn:
            chunks = []
            while chunk := conn.recv(4096):
                chunks.append(chunk)
            got.append(b"".join(chunks))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    write_atomic(path, "metric 1\n")
    thread.join(10)
    server.close()
    assert got == [b"metric 1\n"]
    assert stat.S_ISSOCK(os.lstat(path).st_mode)


def test_a_link_to_a_regular_file_keeps_the_link_and_replaces_its_target(tmp_path):
    """The link is the operator's (e.g. the textfile collector's folder
    linking to a shared disk): the file it names is replaced, atomically,
    in its own folder."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "ccr.prom"
    target.write_text("old\n")
    old_inode = os.stat(target).st_ino
    link = tmp_path / "ccr.prom"
    link.symlink_to(target)
    write_atomic(link, "new\n")
    assert os.path.islink(link) and os.readlink(link) == str(target)
    assert target.read_text() == "new\n"
    assert os.stat(target).st_ino != old_inode  # replaced, not rewritten in place
    assert _siblings(tmp_path / "real") == ["ccr.prom"]
    assert _siblings(tmp_path) == ["ccr.prom", "real"]


def test_a_dangling_link_creates_its_target(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "sub" / "real.json")
    write_atomic(link, "{}\n")
    assert os.path.islink(link)
    assert (tmp_path / "sub" / "real.json").read_text() == "{}\n"


def test_a_regular_file_is_still_replaced_atomically(tmp_path):
    path = tmp_path / "r" / "report.txt"
    write_atomic(path, "one\n")
    first = os.stat(path).st_ino
    write_atomic(path, "two\n")
    assert path.read_text() == "two\n" and os.stat(path).st_ino != first
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert _siblings(path.parent) == ["report.txt"]


def test_a_directory_is_refused_and_left_alone(tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "keep").write_text("k")
    with pytest.raises(IsADirectoryError, match=r"reports is a directory, not a file$"):
        write_atomic(folder, "x")
    assert _siblings(folder) == ["keep"]


def test_a_link_loop_is_refused(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OSError, match=r"too many levels of symbolic links$"):
        write_atomic(tmp_path / "a", "x")
    assert os.path.islink(tmp_path / "a") and os.path.islink(tmp_path / "b")


def test_dash_is_standard_output(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_output("-", "to stdout\n")
    assert capsys.readouterr().out == "to stdout\n"
    assert _siblings(tmp_path) == []  # no file named "-"


# --- every --output option -------------------------------------------------------

def _capture_readings():
    """The reference's sysfs samples, as test_capture reads them."""
    from ccrhost.lab.capture import Readings
    from ccrhost.model.gpus import GpuReading
    from ccrhost.probes import pci
    from ccrhost.probes.gpu import GpuProbe
    from ccrhost.probes.node import NodeSnapshot
    from ccrhost.probes.rdma import parse_rdma_dump

    fixtures = Path(__file__).parent / "fixtures"
    rdma = parse_rdma_dump((fixtures / "rdma_dump_roce.txt").read_text().splitlines())
    tree = pci.parse_pci_dump((fixtures / "gdr/pci_dump_lab_hgx.txt").read_text().splitlines())
    gpus = GpuProbe([GpuReading(i, "NVIDIA H100 80GB HBM3", f"GPU-4a9f1c2e-0000-1111-2222-33334444555{i}", 1980,
                                1980, 5, 5, 16, 16, 0) for i in range(8)])
    return Readings(NodeSnapshot(rdma=rdma), tree, gpus, {}, "gpu-017")


def _lab_capture(monkeypatch, *args):
    from ccrhost.lab import capture
    from ccrhost.lab.cli import lab

    monkeypatch.setattr(capture, "read_local", _capture_readings)
    return CliRunner().invoke(lab, ["capture", *args], catch_exceptions=False)


def test_lab_capture_output_through_a_link_to_a_fifo(tmp_path, monkeypatch):
    """The reproduction: `ccrhost lab capture --output /dev/stdout` as root
    replaced the machine's /dev/stdout link with a regular file."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "stdout"
    link.symlink_to(fifo)
    reader = FifoReader(fifo)
    result = _lab_capture(monkeypatch, "--output", str(link))
    assert result.exit_code == 0, result.output
    text = reader.result().decode()
    assert text.startswith("name: capture-gpu-017\n") or "name: capture-gpu-017" in text
    assert os.readlink(link) == str(fifo) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _siblings(tmp_path) == ["pipe", "stdout"]


def test_lab_capture_output_dash_is_stdout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _lab_capture(monkeypatch, "--output", "-")
    assert result.exit_code == 0, result.output
    assert "name: capture-gpu-017" in result.stdout and "wrote" not in result.output
    assert _siblings(tmp_path) == []


@pytest.mark.parametrize("command", ["check", "monitor"])
def test_every_output_option_takes_dash(command):
    """`-` is accepted by the option itself (click.Path(allow_dash=True)),
    for each --output of the CLI."""
    from ccrhost.cli import main

    params = {p.name: p for p in main.get_command(None, command).params}
    assert params["output"].type.allow_dash is True


def _check(tmp_path, *args):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(repo)}
    return subprocess.run([sys.executable, "-m", "ccrhost", "check", "--format", "json", *args],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def test_check_output_dash_and_a_link_to_a_fifo(tmp_path):
    """`ccrhost check` on this machine (no RDMA: FAIL) with --output - and
    with --output naming a link to a FIFO: the JSON arrives, nothing is replaced."""
    import json

    out = _check(tmp_path, "--output", "-")
    assert out.returncode == 2 and json.loads(out.stdout)["status"] == "FAIL"
    assert _siblings(tmp_path) == []
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "stdout").symlink_to("pipe")
    reader = FifoReader(fifo)
    out = _check(tmp_path, "--output", "stdout")
    assert out.returncode == 2 and out.stdout == ""
    assert json.loads(reader.result())["status"] == "FAIL"
    assert os.readlink(tmp_path / "stdout") == "pipe" and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _siblings(tmp_path) == ["pipe", "stdout"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the link another owner")
def test_someone_elses_link_in_a_sticky_world_writable_folder_is_not_followed(tmp_path):
    """As the kernel's fs.protected_symlinks: a link planted in /tmp by
    another user must not make a root run replace the file it names."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "shadow"
    victim.write_text("secret\n")
    link = shared / "report.txt"
    link.symlink_to(victim)
    os.lchown(link, 4242, 4242)
    with pytest.raises(PermissionError, match=r"a link of uid 4242 in a sticky world-writable folder; not followed$"):
        write_atomic(link, "x\n")
    assert victim.read_text() == "secret\n" and os.path.islink(link)
    os.lchown(link, 0, 0)  # our own link is followed
    write_atomic(link, "x\n")
    assert victim.read_text() == "x\n"
