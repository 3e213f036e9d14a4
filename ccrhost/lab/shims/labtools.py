"""The node's served shims: the Python shims of the tools a check or a
deploy calls many times (``ethtool`` once per netdev and mode, ``nvidia-smi``,
the kernel log), run by the node's labsysfsd instead of a new interpreter
each. A real ethtool starts in about a millisecond; a Python shim in ten,
which made the lab, not ccrhost, most of a check's time. A shim that never
waits runs in the server itself; one that can (nvidia-smi's ``gpu_hang``)
runs in a fork, so a hung tool stalls only its own caller.

The tool on the node's PATH is ``labtool-client`` (bash): it connects to
``127.0.0.1:PORT`` in the node's network namespace, sends its argument
count, name and arguments (NUL-terminated), and reads back
``<exit code> <stderr bytes> <stdout bytes>\\n``, the stderr text, then
stdout. The same shim code runs either way: the client runs the
Python shim itself when nothing listens (the daemon not yet started).
"""

import io
import os
import signal
import socket
import sys
import traceback

PORT = 7319  # the client has it too (labtool-client)
# Shims that never wait: answered in the server, a fork spared per call.
INLINE = frozenset({"ethtool", "setpci", "mlnx_qos", "dcb", "journalctl", "dmesg"})


class ToolServer:
    def __init__(self, shim_dir: str):
        # Served: each X.py installed beside its client X (ccrhost.lab.fleet
        # SERVED_SHIMS); compiled once, run per request here or in a fork.
        self.code = {}
        for name in os.listdir(shim_dir):
            tool = name[:-3]
            if name.endswith(".py") and os.path.exists(os.path.join(shim_dir, tool)):
                path = os.path.join(shim_dir, name)
                with open(path) as f:
                    self.code[tool] = (path, compile(f.read(), path, "exec"))
        # imported once, for every run here and in a fork (each run empties labkernel's node cache)
        import labkernel  # noqa: F401
        import labpci  # noqa: F401

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", PORT))
        self.sock.listen(128)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks reap themselves

    def fileno(self) -> int:
        return self.sock.fileno()

    def accept(self) -> None:
        """Take one connection and answer it: here, or in a fork for a tool
        that can hang."""
        conn, _ = self.sock.accept()
        try:
            conn.settimeout(2)  # a client writes its request at once; a dead one must not hold the node's tools
            request = self._request(conn)
        except OSError:
            request = None
        if request is None:
            conn.close()
            return
        if request[0] in INLINE:
            try:
                self._answer(conn, *request)
            except OSError:
                pass
            conn.close()
            return
        if os.fork() == 0:
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                self.sock.close()
                self._answer(conn, *request)
            finally:
                os._exit(0)
        conn.close()

    @staticmethod
    def _request(conn: socket.socket) -> tuple[str, list[str]] | None:
        data = b""
        while True:
            fields = data.split(b"\0")
            if len(fields) > 1 and fields[0].isdigit() and len(fields) >= int(fields[0]) + 3:
                break
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        count = int(fields[0])
        return fields[1].decode(), [f.decode(errors="surrogateescape") for f in fields[2:2 + count]]

    def _answer(self, conn: socket.socket, tool: str, args: list[str]) -> None:
        out, err = io.StringIO(), io.StringIO()
        code = 0
        if tool not in self.code:
            err.write(f"labtools: {tool} is not served here\n")
            code = 127
        else:
            path, compiled = self.code[tool]
            saved_argv, saved_path = sys.argv, list(sys.path)
            sys.argv = [path, *args]
            sys.stdout, sys.stderr = out, err
            # every run reads the node record afresh, as a new process would
            # (a fault or a change may have come since the last)
            sys.modules["labkernel"]._node = None
            try:
                exec(compiled, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})
            except SystemExit as exc:
                if isinstance(exc.code, int) or exc.code is None:
                    code = exc.code or 0
                else:
                    err.write(f"{exc.code}\n")
                    code = 1
            except BaseException:  # a shim bug shows as the tool failing, with its traceback
                traceback.print_exc(file=err)
                code = 1
            finally:
                sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
                sys.argv, sys.path[:] = saved_argv, saved_path
        errors = err.getvalue().encode(errors="surrogateescape")
        output = out.getvalue().encode(errors="surrogateescape")
        conn.sendall(f"{code} {len(errors)} {len(output)}\n".encode() + errors + output)
