#!/usr/bin/env python3
"""What a RoCEv2 capture shows of ECE and of the transport that ran: the CM
REQs and REPs (rdma_cm's connection set-up over QP1) with their ECE vendor
id and options, and the opcodes of the connected traffic. Used by
tools/interop-rxe-verbs.sh to prove that a uroce end that asked for
selective repeat (UROCE_TRANSPORT=sr) fell back to plain RC against a peer
without ECE (Linux Soft-RoCE).

ECE sits where Linux's CM puts it (lib/wire/cm_mad.h): the REQ's vendor id
in bytes 5-7 of the MAD's data, the REP's in bytes 15, 19 and 23, the
options in the MAD header's attribute modifier. The options agreed are the
REQ's and the REP's in common when the REP echoes the REQ's vendor id, else
none. Selective repeat's packets use opcodes 0xc0-0xdf (manufacturer
specific, docs/transport.md); plain RC's are 0x00-0x1f.

usage: roce_ece_check.py PCAP --ours IP [--active|--passive] [--offer-sr]
  Prints one JSON line (per connection: REQ/REP ECE, agreement; opcode
  counts per direction) and exits 0 when every check holds, 1 with the
  failed checks on stderr otherwise:
  - at least one REQ and one REP, each REP answering a REQ of the file;
  - no agreement on selective repeat (ECE options bit 0) in any connection;
  - RC packets (opcodes 0x00-0x1f) from our address and from the peer,
    none of either side's in 0xc0-0xdf;
  --active: every REQ came from our address, --passive: none did;
  --offer-sr: our REQs offered uroce's vendor id 0x020000 with option
    bit 0 (so our side did ask for selective repeat);
  --passive with a peer without ECE: its REQ had vendor id 0, and our REP
    echoed 0 with an attribute modifier of 0 (as if we knew no ECE).
"""
import argparse
import ipaddress
import json
import struct
import sys

ROCE_PORT = 4791
UD_SEND_ONLY = 0x64
CM_CLASS = 0x07
CM_REQ, CM_REP = 0x0010, 0x0013
UROCE_VENDOR_ID = 0x020000
ECE_SELECTIVE_REPEAT = 1 << 0
SR_OPCODES = range(0xC0, 0xE0)


def frames(path):
    """(ip source, ip destination, UDP payload) of each UDP/4791 frame."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        raise ValueError(f"{path}: not a pcap file (too short)")
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        raise ValueError(f"{path}: not a classic pcap file (pcapng? write it with dumpcap -P)")
    (linktype,) = struct.unpack(end + "I", data[20:24])
    if linktype != 1:
        raise ValueError(f"{path}: link type {linktype}, not Ethernet")
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(pkt) < 14:
            continue
        ether_type = struct.unpack(">H", pkt[12:14])[0]
        l3 = pkt[14:]
        if ether_type == 0x0800 and len(l3) >= 20 and l3[9] == 17:
            ihl = (l3[0] & 0x0F) * 4
            src, dst, udp = ipaddress.ip_address(l3[12:16]), ipaddress.ip_address(l3[16:20]), l3[ihl:]
        elif ether_type == 0x86DD and len(l3) >= 40 and l3[6] == 17:
            src, dst, udp = ipaddress.ip_address(l3[8:24]), ipaddress.ip_address(l3[24:40]), l3[40:]
        else:
            continue
        if len(udp) < 8 or struct.unpack(">H", udp[2:4])[0] != ROCE_PORT:
            continue
        yield src, dst, udp[8:]


def as_ipv4(a):
    """An IPv4-mapped IPv6 address as IPv4, so that either names the host."""
    return a.ipv4_mapped if a.version == 6 and a.ipv4_mapped else a


def read(path):
    cms, opcodes = [], {}
    for src, dst, bth in frames(path):
        if len(bth) < 12:
            continue
        src, dst = as_ipv4(src), as_ipv4(dst)
        opcode, dest_qp = bth[0], int.from_bytes(bth[5:8], "big")
        if opcode == UD_SEND_ONLY and dest_qp == 1 and len(bth) >= 12 + 8 + 24 + 24:
            mad = bth[20:]
            if mad[1] != CM_CLASS:
                continue
            attr = struct.unpack(">H", mad[16:18])[0]
            attr_mod = struct.unpack(">I", mad[20:24])[0]
            body = mad[24:]
            if attr == CM_REQ:
                cms.append({"kind": "REQ", "src": str(src), "comm_id": body[0:4].hex(),
                            "vendor_id": int.from_bytes(body[5:8], "big"), "options": attr_mod})
            elif attr == CM_REP:
                cms.append({"kind": "REP", "src": str(src), "comm_id": body[0:4].hex(),
                            "remote_comm_id": body[4:8].hex(),
                            "vendor_id": body[15] << 16 | body[19] << 8 | body[23], "options": attr_mod})
            continue
        if opcode >> 5 in (0, 6):  # RC, or the manufacturer range selective repeat uses
            opcodes.setdefault(str(src), {}).setdefault(opcode, 0)
            opcodes[str(src)][opcode] += 1
    return cms, opcodes


def check(cms, opcodes, ours, mode, offer_sr):
    failed = []
    reqs = [c for c in cms if c["kind"] == "REQ"]
    reps = [c for c in cms if c["kind"] == "REP"]
    if not reqs or not reps:
        failed.append(f"expected CM REQ and REP, saw {len(reqs)} REQ and {len(reps)} REP")
    conns = []
    for rep in reps:
        req = next((r for r in reqs if r["comm_id"] == rep["remote_comm_id"]), None)
        if req is None:
            failed.append(f"REP {rep['comm_id']} answers no REQ of the capture")
            continue
        agreed = req["options"] & rep["options"] if req["vendor_id"] and rep["vendor_id"] == req["vendor_id"] else 0
        conns.append({"req": req, "rep": rep, "agreed": agreed})
        if agreed & ECE_SELECTIVE_REPEAT:
            failed.append(f"connection {req['comm_id']}: both ends agreed to selective repeat")
        from_us = req["src"] == ours
        if mode == "active" and not from_us:
            failed.append(f"REQ {req['comm_id']} came from {req['src']}, expected ours ({ours})")
        if mode == "passive" and from_us:
            failed.append(f"REQ {req['comm_id']} came from us, expected the peer")
        if offer_sr and from_us and not (req["vendor_id"] == UROCE_VENDOR_ID and req["options"] & ECE_SELECTIVE_REPEAT):
            failed.append(f"our REQ {req['comm_id']} offered vendor {req['vendor_id']:#x} options "
                          f"{req['options']:#x}, not selective repeat under {UROCE_VENDOR_ID:#x}")
        if mode == "passive" and req["vendor_id"] == 0 and (rep["vendor_id"] != 0 or rep["options"] != 0):
            failed.append(f"REQ {req['comm_id']} had no ECE, but our REP carried vendor {rep['vendor_id']:#x} "
                          f"options {rep['options']:#x}")
    mine = opcodes.get(ours, {})
    theirs = {op: n for src, ops in opcodes.items() if src != ours for op, n in ops.items()}
    if not any(op < 0x20 for op in mine):
        failed.append("no RC packet from our address")
    if not any(op < 0x20 for op in theirs):
        failed.append("no RC packet from the peer")
    for who, ops in (("our", mine), ("the peer's", theirs)):
        sr = sum(n for op, n in ops.items() if op in SR_OPCODES)
        if sr:
            failed.append(f"{sr} of {who} packets had selective repeat's opcodes (0xc0-0xdf)")
    return conns, mine, theirs, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pcap")
    ap.add_argument("--ours", required=True, help="our RoCE address (IPv4)")
    side = ap.add_mutually_exclusive_group()
    side.add_argument("--active", action="store_const", const="active", dest="mode")
    side.add_argument("--passive", action="store_const", const="passive", dest="mode")
    ap.add_argument("--offer-sr", action="store_true")
    a = ap.parse_args()
    try:
        cms, opcodes = read(a.pcap)
    except (OSError, ValueError) as e:
        print(f"roce_ece_check: {e}", file=sys.stderr)
        return 2
    ours = str(as_ipv4(ipaddress.ip_address(a.ours)))
    conns, mine, theirs, failed = check(cms, opcodes, ours, a.mode, a.offer_sr)
    summary = {
        "connections": [{"req_from": c["req"]["src"],
                         "req_ece": f"{c['req']['vendor_id']:#08x}/{c['req']['options']:#x}",
                         "rep_ece": f"{c['rep']['vendor_id']:#08x}/{c['rep']['options']:#x}",
                         "agreed": c["agreed"]} for c in conns],
        "our_opcodes": {f"{op:#04x}": n for op, n in sorted(mine.items())},
        "peer_opcodes": {f"{op:#04x}": n for op, n in sorted(theirs.items())},
        "ok": not failed,
    }
    print(json.dumps(summary))
    for f in failed:
        print(f"roce_ece_check: {f}", file=sys.stderr)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
