"""Run a module (default: the app) under an audit hook that logs every network attempt off this machine.

    python tests/netaudit.py LOGFILE [-m MODULE | -c CODE] [--] ARGS...

LOGFILE gets one JSON line per event: first {"event": "start"}, then every socket connect / bind / sendto /
sendmsg, name lookup or urllib request whose host is not loopback (127.0.0.0/8, ::1, localhost), and every
child process (a child runs without this hook, so it is a hole in the audit the tests must see). Unix and
netlink sockets are local. Sockets opened by C code without Python's socket module are not seen (asyncio's
default loop is pure Python; uvloop would not be, so the start line says whether uvloop is installed).
"""
from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
import runpy
import socket
import sys
import threading
import traceback
from urllib.parse import urlsplit

LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
_busy = threading.local()  # the hook's own file writes must not re-enter it


def is_local_host(host) -> bool:
    if host is None:  # getaddrinfo(None, port): this machine's wildcard, for a server's bind
        return True
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if isinstance(host, int):
        host = str(ipaddress.ip_address(host))
    h = str(host).strip("[]").split("%")[0].lower().rstrip(".")
    if h in LOCAL_NAMES or h.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(h)
    except ValueError:
        return False  # any other name: resolving it is already an outside attempt
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def is_local_address(sock, address) -> bool:
    if getattr(sock, "family", None) not in (socket.AF_INET, socket.AF_INET6):
        return True  # AF_UNIX paths, netlink
    return isinstance(address, tuple) and is_local_host(address[0])


def outside(event: str, args: tuple):
    """The outside host an audit event names, or None when it is local or not a network event."""
    if event in ("socket.connect", "socket.sendto", "socket.sendmsg", "socket.bind"):
        sock, address = args[0], args[1]
        if address is None or is_local_address(sock, address):
            return None
        return address
    if event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"):
        return None if is_local_host(args[0]) else args[0]
    if event == "socket.getnameinfo":
        return None if is_local_host(args[0][0]) else args[0]
    if event == "urllib.Request":
        host = urlsplit(str(args[0])).hostname
        return None if host is None or is_local_host(host) else args[0]
    return None


SPAWNS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty")


def install(log_path: str) -> None:
    out = open(log_path, "a", buffering=1)

    def write(entry: dict) -> None:
        _busy.on = True
        try:
            out.write(json.dumps(entry, default=repr) + "\n")
        finally:
            _busy.on = False

    def hook(event: str, args: tuple) -> None:
        if getattr(_busy, "on", False) or not event.startswith(("socket.", "urllib.", "subprocess.", "os.")):
            return
        try:
            if event in SPAWNS:
                target = args[0] if args else None
            else:
                target = outside(event, args)
                if target is None:
                    return
            stack = [f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_stack()[-9:-1]]
            write({"event": event, "target": target, "thread": threading.current_thread().name, "stack": stack})
        except Exception as e:  # an exception here would surface in the audited call itself
            write({"event": "hook-error", "target": repr(e)})

    # uvicorn picks uvloop when it is installed, and uvloop's sockets bypass this hook
    write({"event": "start", "pid": os.getpid(), "uvloop": importlib.util.find_spec("uvloop") is not None})
    sys.addaudithook(hook)


def main() -> None:
    log_path, rest = sys.argv[1], sys.argv[2:]
    module, code = "app", None
    if rest[:1] == ["-m"]:
        module, rest = rest[1], rest[2:]
    elif rest[:1] == ["-c"]:
        code, rest = rest[1], rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    sys.path[0] = os.getcwd()  # as `python -m` does: the working directory, not tests/
    install(log_path)
    if code is not None:
        sys.argv = ["-c", *rest]
        exec(compile(code, "<netaudit -c>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = [module, *rest]
        runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
