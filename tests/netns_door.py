"""TEST HELPER (standard library only): a tiny "sshd" and "ssh" for the hosts tests/netns_hosts.py makes.

Each test host is a network namespace with its own UTS (host name), PID and mount namespaces. Its first process
(PID 1 there) is ``door``: it listens on a UNIX socket in a folder every host sees and starts the commands it is
asked to, the way sshd does -- as its own children, in a new session, on that host -- with the caller's stdin,
stdout and stderr (passed over the socket), and sends back the exit status. So, as with ssh:

* a command started on another host is not a descendant of the caller: killing the caller's process group does
  not reach it, and the caller cannot see it in its /proc (each host has its own PID namespace);
* it starts with a login environment (PATH, HOME, LANG and the host's own extra variables), not the caller's,
  unless the caller asks to send its environment (``exec --send-env``: the tests' own way to start compat there);
* the remote command goes on when the client dies (ssh without a terminal does not kill it either).

When door ends (the test tears the host down), the kernel kills every process of that PID namespace.

``rsh`` is what an MPI launcher is given as its remote shell: ``rsh DIR [ssh options] HOST COMMAND...`` runs
``sh -c "COMMAND..."`` on HOST, exactly how hydra (``-bootstrap-exec``) and Open MPI (``plm_rsh_agent``) call ssh.
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import sys
import threading
import time

LOGIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SSH_OPTIONS_WITH_ARGUMENT = set("bcDEeFIiJLlmOopQRSWw")


def _send(sock: socket.socket, request: dict, fds: list) -> None:
    data = json.dumps(request).encode()
    sock.sendmsg([struct.pack("!I", len(data)) + data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def _receive(sock: socket.socket) -> tuple:
    fds = array.array("i")
    message, ancillary, _flags, _addr = sock.recvmsg(1 << 20, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    (size,) = struct.unpack("!I", message[:4])
    body = message[4:]
    while len(body) < size:
        more = sock.recv(size - len(body))
        if not more:
            raise ConnectionError("the request was cut short")
        body += more
    return json.loads(body.decode()), list(fds)


class Door:
    """PID 1 of a test host: starts commands, reaps every process that ends on the host."""

    def __init__(self, path: str, extra_env: dict) -> None:
        self.path = path
        self.extra_env = extra_env
        self.lock = threading.Lock()
        self.waiting: dict = {}  # pid -> [event, status]
        self.ended: dict = {}  # pid -> status, for a child that ended before its connection registered it

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                time.sleep(0.05)
                continue
            code = os.waitstatus_to_exitcode(status)
            code = code if code >= 0 else 128 - code
            with self.lock:
                slot = self.waiting.pop(pid, None)
                if slot is None:
                    self.ended[pid] = code
                else:
                    slot[1] = code
                    slot[0].set()

    def serve(self, conn: socket.socket) -> None:
        try:
            request, fds = _receive(conn)
            for fd in fds:
                os.set_inheritable(fd, False)  # no other connection's descriptors leak into a command
            env = request.get("env")
            if env is None:  # a login environment, as sshd gives: not the caller's variables
                env = {"PATH": LOGIN_PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/sh", "LANG": "C.UTF-8"}
                env.update(self.extra_env)
            cwd = request.get("cwd") or "/root"
            argv = ["/bin/sh", "-c", 'cd "$0" 2>/dev/null || cd /; exec "$@"', cwd, *request["argv"]]
            actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds[:3])]
            event = threading.Event()
            slot = [event, None]
            with self.lock:
                pid = os.posix_spawn("/bin/sh", argv, env, file_actions=actions, setsid=True)
                if pid in self.ended:
                    slot[1] = self.ended.pop(pid)
                    event.set()
                else:
                    self.waiting[pid] = slot
            for fd in fds:
                os.close(fd)
            conn.sendall(struct.pack("!i", pid))
            event.wait()
            conn.sendall(struct.pack("!i", slot[1]))
        except OSError:
            pass  # the client went away: like sshd without a terminal, the command goes on
        finally:
            conn.close()

    def run(self) -> None:
        threading.Thread(target=self.reap, daemon=True).start()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(self.path):
            os.unlink(self.path)
        server.bind(self.path + ".tmp")
        os.replace(self.path + ".tmp", self.path)  # the socket appears only once it listens
        server.listen(64)
        while True:
            conn, _ = server.accept()
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()


def call(path: str, argv: list, env, cwd: str) -> int:
    """Run argv on the host behind ``path`` with this process's stdin/stdout/stderr; its exit status."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        sys.stderr.write("rsh: cannot reach the host at %s: %s\n" % (path, exc))
        return 255
    _send(sock, {"argv": argv, "env": env, "cwd": cwd}, [0, 1, 2])
    data = b""
    while len(data) < 8:
        more = sock.recv(8 - len(data))
        if not more:
            sys.stderr.write("rsh: the connection to the host closed\n")
            return 255
        data += more
    return struct.unpack("!ii", data)[1]


def rsh(arguments: list) -> int:
    """DIR [ssh options] [--] HOST COMMAND...: how hydra and Open MPI call ssh (compat doctor --hostfile passes --)."""
    folder, rest = arguments[0], list(arguments[1:])
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option == "--":  # the end of the options, as ssh's getopt takes it: the host follows
            break
        if len(option) == 2 and option[1] in SSH_OPTIONS_WITH_ARGUMENT and rest:
            rest.pop(0)
    if not rest:
        sys.stderr.write("usage: rsh [options] HOST COMMAND...\n")
        return 255
    host, command = rest[0], rest[1:]
    path = os.path.join(folder, host + ".sock")
    if not os.path.exists(path):
        sys.stderr.write("ssh: Could not resolve hostname %s: no such test host\n" % host)
        return 255
    return call(path, ["/bin/sh", "-c", " ".join(command)] if command else ["/bin/sh"], None, "")


def main(argv: list) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if argv[:1] == ["door"]:
        extra = dict(item.split("=", 1) for item in argv[2:])
        Door(argv[1], extra).run()
        return 0
    if argv[:1] == ["rsh"]:
        return rsh(argv[1:])
    if argv[:1] == ["exec"]:  # exec [--send-env] [--cwd DIR] SOCKET -- ARGV...: the tests' own remote start
        rest = argv[1:]
        send_env, cwd = False, ""
        while rest and rest[0].startswith("--") and rest[0] != "--":
            option = rest.pop(0)
            if option == "--send-env":
                send_env = True
            elif option == "--cwd":
                cwd = rest.pop(0)
        path = rest.pop(0)
        if rest[:1] == ["--"]:
            rest.pop(0)
        return call(path, rest, dict(os.environ) if send_env else None, cwd)
    sys.stderr.write("usage: netns_door.py door SOCKET [K=V...] | rsh DIR [opts] HOST CMD... | exec [--send-env] [--cwd DIR] SOCKET -- ARGV...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
