#!/usr/bin/env python3
"""tools/roce_ece_check.py against the golden Soft-RoCE capture of rping
(test/data/rxe-pcaps/rping.pcap: 10.99.0.2 the client, 10.99.0.3 the
server, no ECE on either side) and against copies of it with one field
changed: an ECE offer and answer in the REQ and REP, a data packet's opcode
in selective repeat's range. Each case states what the checker must
answer; exits 1 naming the cases that disagree.

usage: roce_ece_check_test.py   (with GTEST_OUTPUT=xml:DIR/ it also writes a
one-case report there, as doc_links.py does, for tools/test.sh's count)
"""
import os
import struct
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from case_report import report_case  # noqa: E402

checker = os.path.join(here, "roce_ece_check.py")
golden = os.path.join(here, "..", "test", "data", "rxe-pcaps", "rping.pcap")
CLIENT, SERVER = "10.99.0.2", "10.99.0.3"


def records(data):
    """(offset of the UDP payload, its length) of each UDP/4791 IPv4 frame
    of a little-endian classic pcap."""
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        pkt = off + 16
        if struct.unpack(">H", data[pkt + 12:pkt + 14])[0] == 0x0800:
            ihl = (data[pkt + 14] & 0x0F) * 4
            udp = pkt + 14 + ihl
            if struct.unpack(">H", data[udp + 2:udp + 4])[0] == 4791:
                yield udp + 8
        off += 16 + incl


def mad_of(data, attr):
    """Offset of the first CM MAD with attribute `attr` (past BTH and DETH)."""
    for bth in records(data):
        mad = bth + 20
        if data[bth] == 0x64 and data[mad + 1] == 0x07 and struct.unpack(">H", data[mad + 16:mad + 18])[0] == attr:
            return mad
    raise AssertionError(f"no CM MAD {attr:#x} in the golden capture")


def with_ece(data, req=None, rep=None):
    """The capture with the REQ's and REP's ECE (vendor id, options) set."""
    b = bytearray(data)
    if req is not None:
        m = mad_of(b, 0x0010)
        b[m + 24 + 5:m + 24 + 8] = req[0].to_bytes(3, "big")
        b[m + 20:m + 24] = req[1].to_bytes(4, "big")
    if rep is not None:
        m = mad_of(b, 0x0013)
        v = rep[0].to_bytes(3, "big")
        b[m + 24 + 15], b[m + 24 + 19], b[m + 24 + 23] = v[0], v[1], v[2]
        b[m + 20:m + 24] = rep[1].to_bytes(4, "big")
    return bytes(b)


def with_sr_opcode(data, src):
    """The capture with the first RC SEND_ONLY from `src` given SR's 0xc4."""
    b = bytearray(data)
    want = bytes(int(x) for x in src.split("."))
    for bth in records(b):
        ip = bth - 8 - 20
        if b[bth] == 0x04 and bytes(b[ip + 12:ip + 16]) == want:
            b[bth] = 0xC4
            return bytes(b)
    raise AssertionError(f"no SEND_ONLY from {src} in the golden capture")


def run(data, *args):
    with tempfile.NamedTemporaryFile(suffix=".pcap") as f:
        f.write(data)
        f.flush()
        p = subprocess.run([sys.executable, checker, f.name, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    with open(golden, "rb") as f:
        g = f.read()
    uroce = 0x020000
    cases = [
        # (name, capture, args, exit code, text the output must hold)
        ("golden, client side", g, ["--ours", CLIENT, "--active"], 0, '"req_ece": "0x000000/0x0"'),
        ("golden, server side", g, ["--ours", SERVER, "--passive"], 0, '"agreed": 0'),
        ("golden, wrong side", g, ["--ours", CLIENT, "--passive"], 1, "came from us"),
        ("golden offers no SR", g, ["--ours", CLIENT, "--active", "--offer-sr"], 1, "not selective repeat"),
        ("SR offered, peer echoes the vendor id without options (rdma-core on rxe)",
         with_ece(g, req=(uroce, 1), rep=(uroce, 0)), ["--ours", CLIENT, "--active", "--offer-sr"], 0,
         '"rep_ece": "0x020000/0x0"'),
        ("SR offered, peer answers no ECE", with_ece(g, req=(uroce, 1), rep=(0, 0)),
         ["--ours", CLIENT, "--active", "--offer-sr"], 0, '"agreed": 0'),
        ("SR agreed", with_ece(g, req=(uroce, 1), rep=(uroce, 1)), ["--ours", CLIENT, "--active"], 1,
         "agreed to selective repeat"),
        ("SR offered by another vendor's id, answered", with_ece(g, req=(0x02c9, 1), rep=(0x02c9, 1)),
         ["--ours", CLIENT, "--active", "--offer-sr"], 1, "not selective repeat under 0x20000"),
        ("no ECE in the REQ, our REP names a vendor", with_ece(g, rep=(uroce, 0)),
         ["--ours", SERVER, "--passive"], 1, "had no ECE, but our REP"),
        ("no ECE in the REQ, our REP sets options", with_ece(g, rep=(0, 1)), ["--ours", SERVER, "--passive"], 1,
         "had no ECE, but our REP"),
        ("an SR opcode from us", with_sr_opcode(g, CLIENT), ["--ours", CLIENT, "--active"], 1,
         "1 of our packets had selective repeat's opcodes"),
        ("an SR opcode from the peer", with_sr_opcode(g, SERVER), ["--ours", CLIENT, "--active"], 1,
         "1 of the peer's packets had selective repeat's opcodes"),
        ("no traffic from us (we are a third address)", g, ["--ours", "10.99.0.9"], 1,
         "no RC packet from our address"),
        ("not a pcap", b"\x0a\x0d\x0d\x0a" + bytes(40), ["--ours", CLIENT], 2, "not a classic pcap"),
    ]
    failures = []
    for name, data, args, rc, text in cases:
        got, out = run(data, *args)
        if got != rc or text not in out:
            failures.append(name)
            print(f"FAIL {name}: exit {got} (expected {rc}), output lacks {text!r}:\n{out}")
        else:
            print(f"ok   {name}")
    print(f"{len(cases) - len(failures)} of {len(cases)} cases as expected")
    report_case("RoceEceCheck", "ReadsEceAndOpcodes", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
