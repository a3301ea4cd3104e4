#!/usr/bin/env python3
"""The fast half of tools/rxe-guest's checks, run with the suite (meson test
rxe_guest_tool); `guest.sh smoke` is the slow half, with real guests.

It runs rgctl.py's channel on this machine's loopback, as a guest would
(serve) and as guest.sh does (call): output and exit codes come back
unchanged, stdin arrives byte for byte, a limit ends the command with 124, a
caller that goes away takes the command with it, a background child does not
hold `run` up, and a guest that does not answer gives 255. It also checks
that the shell scripts of the tool and of the tools that use it parse.

usage: selftest.py   (with GTEST_OUTPUT=xml:DIR/ it also writes a one-case
report there, as doc_links.py does, for tools/test.sh's count)
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.dirname(HERE)
sys.path.insert(0, TOOLS)
from case_report import report_case  # noqa: E402

RGCTL = os.path.join(HERE, "rgctl.py")
SCRIPTS = [os.path.join(HERE, n) for n in ("guest.sh", "pid1.sh", "attach.sh")] + \
    [os.path.join(TOOLS, n) for n in ("interop-rxe.sh", "interop-rxe-verbs.sh", "interop-rxe-ucx.sh", "probe-rxe.sh")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port, cmd, *extra, timeout=30):
    return subprocess.run([sys.executable, RGCTL, "call", "--port", str(port), *extra, cmd],
                          capture_output=True, timeout=timeout)


def check_channel(tmp):
    failures = []
    port = free_port()
    server = subprocess.Popen([sys.executable, RGCTL, "serve", "--addr", "127.0.0.1", "--port", str(port)])
    try:
        r = call(port, "true", "--wait", "10")
        if r.returncode != 0:
            return ["the channel did not come up: %r" % r.stderr]

        r = call(port, "echo out; echo err >&2; exit 3")
        if r.returncode != 3 or r.stdout != b"out\nerr\n":
            failures.append("output/exit code: rc %d, %r" % (r.returncode, r.stdout))

        data = bytes(range(256)) * 4096  # 1 MiB, every byte value
        path = os.path.join(tmp, "input")
        with open(path, "wb") as f:
            f.write(data)
        r = call(port, "cat", "--input", path)
        if r.returncode != 0 or r.stdout != data:
            failures.append("stdin: rc %d, %d bytes back of %d" % (r.returncode, len(r.stdout), len(data)))

        t0 = time.monotonic()
        r = call(port, "sleep 30", "--limit", "1")
        if r.returncode != 124 or time.monotonic() - t0 > 10:
            failures.append("limit: rc %d after %.1f s" % (r.returncode, time.monotonic() - t0))

        t0 = time.monotonic()
        r = call(port, "sleep 30 & echo started")
        if r.returncode != 0 or r.stdout != b"started\n" or time.monotonic() - t0 > 10:
            failures.append("background child: rc %d after %.1f s" % (r.returncode, time.monotonic() - t0))

        pidfile = os.path.join(tmp, "pid")
        caller = subprocess.Popen([sys.executable, RGCTL, "call", "--port", str(port),
                                   "echo $$ > %s; exec sleep 30" % pidfile])
        pid = wait_for_pid(pidfile)
        caller.send_signal(signal.SIGTERM)
        caller.wait(10)
        if pid is None:
            failures.append("caller gone: the command never started")
        elif not gone(pid, 10):
            failures.append("caller gone: the command (pid %d) still runs" % pid)
            os.kill(pid, signal.SIGKILL)
    finally:
        server.terminate()
        server.wait(10)

    r = call(free_port(), "true", "--wait", "1")
    if r.returncode != 255:
        failures.append("nothing listening: rc %d, expected 255" % r.returncode)
    return failures


def wait_for_pid(path):
    for _ in range(100):
        try:
            with open(path) as f:
                return int(f.read())
        except (OSError, ValueError):
            time.sleep(0.1)
    return None


def gone(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def check_scripts():
    failures = []
    for path in SCRIPTS:
        r = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
        if r.returncode != 0:
            failures.append("%s does not parse: %s" % (os.path.basename(path), r.stderr.strip()))
    return failures


def main():
    with tempfile.TemporaryDirectory(prefix="uroce-rxe-guest-test.") as tmp:
        failures = check_channel(tmp) + check_scripts()
    for f in failures:
        print(f)
    print("rxe_guest_tool: %s" % ("FAILED" if failures else "ok"))
    report_case("RxeGuestTool", "ChannelAndScripts", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
