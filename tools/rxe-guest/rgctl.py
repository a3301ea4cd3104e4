#!/usr/bin/env python3
"""Command channel between the host and a Soft-RoCE guest of tools/rxe-guest.

  rgctl.py serve --addr A --port P      in the guest (started by pid1.sh)
  rgctl.py call --port P [--limit S] [--wait S] [--input FILE] 'CMD'
                                        on the host, inside the guests' netns

The guest's second NIC is qemu user-mode networking with one forwarded TCP
port, so this traffic never shows on the RoCE segment. One connection runs one
command (bash -c, its own process group).

Wire format, our own:
  request   a JSON line {"sh": CMD, "limit": SECONDS or null, "input": N}
            followed by N bytes for the command's stdin
  reply     the line "rg-ok" as soon as the request is read (the caller only
            retries a connection that never got this far: qemu accepts on the
            forwarded port before the guest listens), then chunks
            "<hex length>\\n<bytes>" of combined stdout and stderr, an empty
            chunk "0\\n", and the line "rc <N>".
The command's exit code is N; 124 when the limit ran out. A caller that
disconnects takes the command's process group down with it.
"""
import argparse
import json
import os
import selectors
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time

TIMED_OUT = 124
BROKEN = 255
# Output a background child keeps writing after the command returned is
# forwarded for this long, so `run 'server &'` returns promptly.
LINGER_S = 0.5
HOME = "/root" if os.path.isdir("/root") else "/"


def kill_tree(proc):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=2)
            return
        except subprocess.TimeoutExpired:
            pass


class OneCommand(socketserver.StreamRequestHandler):
    def handle(self):
        try:
            req = json.loads(self.rfile.readline(1 << 20))
            data = self.rfile.read(int(req.get("input", 0))) if req.get("input") else None
            cmd, limit = req["sh"], req.get("limit")
        except (ValueError, KeyError, TypeError) as e:
            self.wfile.write(b"rg-ok\n" + chunk(("rgctl: bad request: %s\n" % e).encode()) + b"0\nrc 255\n")
            return
        self.wfile.write(b"rg-ok\n")
        self.wfile.flush()
        proc = subprocess.Popen(["/bin/bash", "-c", cmd], cwd=HOME, start_new_session=True,
                                stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if data is not None:
            threading.Thread(target=feed, args=(proc.stdin, data), daemon=True).start()
        rc = self.pump(proc, limit)
        if rc is not None:
            self.wfile.write(b"0\nrc %d\n" % rc)

    def pump(self, proc, limit):
        """Forwards output until the command is done; its rc, or None when
        the caller went away."""
        sock = self.connection
        sel = selectors.DefaultSelector()
        out = proc.stdout.fileno()
        os.set_blocking(out, False)
        sel.register(out, selectors.EVENT_READ, "out")
        sel.register(sock, selectors.EVENT_READ, "caller")
        deadline = time.monotonic() + float(limit) if limit else None
        done_at, rc = None, None
        while True:
            now = time.monotonic()
            if done_at is None:
                rc = proc.poll()
                if rc is not None:
                    done_at = now
                elif deadline is not None and now >= deadline:
                    kill_tree(proc)
                    rc, done_at = TIMED_OUT, now
            if done_at is not None and (out not in sel.get_map() or now - done_at >= LINGER_S):
                return rc
            for key, _ in sel.select(0.1):
                if key.data == "caller":
                    if not sock.recv(4096):
                        kill_tree(proc)
                        return None
                    continue
                try:
                    got = os.read(out, 1 << 16)
                except BlockingIOError:
                    continue
                if not got:
                    sel.unregister(out)
                    continue
                try:
                    self.wfile.write(chunk(got))
                    self.wfile.flush()
                except OSError:
                    kill_tree(proc)
                    return None


def chunk(data):
    return b"%x\n" % len(data) + data


def feed(pipe, data):
    try:
        pipe.write(data)
        pipe.close()
    except OSError:
        pass


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def serve(a):
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    with Server((a.addr, a.port), OneCommand) as srv:
        srv.serve_forever()


def call(a):
    body = b""
    if a.input:
        with open(a.input, "rb") as f:
            body = f.read()
    head = json.dumps({"sh": a.cmd, "limit": a.limit, "input": len(body) if a.input else 0})
    give_up = time.monotonic() + a.wait
    out = sys.stdout.buffer
    while True:
        try:
            with socket.create_connection(("127.0.0.1", a.port), timeout=5) as s:
                s.sendall(head.encode() + b"\n" + body)
                s.settimeout(None)
                r = s.makefile("rb")
                if r.readline() == b"rg-ok\n":
                    while True:
                        size = r.readline()
                        if not size:
                            sys.stderr.write("rgctl: the guest closed the channel mid-command\n")
                            return BROKEN
                        n = int(size, 16)
                        if n == 0:
                            return int(r.readline().split()[1])
                        out.write(r.read(n))
                        out.flush()
        except OSError:
            pass
        if time.monotonic() >= give_up:
            sys.stderr.write("rgctl: nothing answers on port %d\n" % a.port)
            return BROKEN
        time.sleep(0.5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--addr", default="0.0.0.0")
    s.add_argument("--port", type=int, required=True)
    c = sub.add_parser("call")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--limit", type=float, help="seconds before the command is killed (rc 124)")
    c.add_argument("--wait", type=float, default=20, help="seconds to wait for the guest to answer")
    c.add_argument("--input", help="file fed to the command's stdin")
    c.add_argument("cmd")
    a = ap.parse_args()
    if a.mode == "serve":
        serve(a)
        return 0
    try:
        return call(a)
    except KeyboardInterrupt:
        return 130  # the closed socket stops the command in the guest


if __name__ == "__main__":
    sys.exit(main())
