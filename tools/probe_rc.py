#!/usr/bin/env python3
"""A differential prober of RC responders: one case of hand-made request
packets against a stock ibv_rc_pingpong-style server (Linux Soft-RoCE in the
rxe-peer guest, or uroce-pingpong on its DPDK port), printing the server's
answers as one JSON line. tools/probe-rxe.sh runs every case against both
and compares the answers.

Run inside the link's netns (--iface: the bridge there). It connects to the
server's TCP exchange on port 18515 as ibv_rc_pingpong's client would
(LID:QPN:PSN:GID), sends the case's packets from the bridge's address (raw
frames, ICRC computed here), and collects the RoCEv2 frames the server sends
back for a second.

usage: probe_rc.py --case NAME --tcp HOST --ip SERVER_IP [--mac SERVER_MAC] [--mtu 1024]
"""
import argparse
import fcntl
import json
import socket
import struct
import sys
import time
import zlib

ETH_P_ALL = 0x0003
ROCE_PORT = 4791
OUR_QPN = 0x000ABC
OUR_PSN = 0x100000

# Opcodes (IBTA table 38, RC).
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY = 0x00, 0x01, 0x02, 0x04
ACK = 0x11
# What a responder sends: READ responses, ACK, atomic ACK.
RESPONSES = (0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12)

# Each case: (opcode, payload bytes) per packet, PSNs in turn from the PSN
# we announced (the one the server's responder expects), AckReq on every
# packet so that every answer shows.
def cases(mtu):
    return {
        "only_within_mtu": [(SEND_ONLY, mtu - 24)],
        "only_over_mtu": [(SEND_ONLY, mtu + 4)],
        "first_short": [(SEND_FIRST, mtu - 24)],
        "first_over": [(SEND_FIRST, mtu + 4)],
        "middle_short": [(SEND_FIRST, mtu), (SEND_MIDDLE, mtu - 24)],
        "last_within_mtu": [(SEND_FIRST, mtu), (SEND_LAST, mtu - 24)],
        "last_empty": [(SEND_FIRST, mtu), (SEND_LAST, 0)],
        "last_over_mtu": [(SEND_FIRST, mtu), (SEND_LAST, mtu + 4)],
    }


def if_mac(sock, iface):
    info = fcntl.ioctl(sock.fileno(), 0x8927, struct.pack("256s", iface.encode()[:15]))  # SIOCGIFHWADDR
    return info[18:24]


def if_ipv4(iface):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    info = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", iface.encode()[:15]))  # SIOCGIFADDR
    return info[20:24]


def checksum16(data):
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def icrc(ip_udp_bth_rest):
    """RoCEv2 ICRC (IBTA A17.3.3): CRC-32 over 8 bytes of ones, then the IPv4
    header with TOS, TTL and checksum as ones, UDP with its checksum as ones,
    the BTH with byte 4 as ones, then the rest."""
    b = bytearray(ip_udp_bth_rest)
    for off in (1, 8, 10, 11, 26, 27, 32):
        b[off] = 0xFF
    return zlib.crc32(bytes(b), zlib.crc32(b"\xff" * 8)) & 0xFFFFFFFF


def frame(src_mac, dst_mac, src_ip, dst_ip, opcode, psn, dest_qp, payload):
    pad = (4 - len(payload) % 4) % 4
    bth = struct.pack("!BBHB3sB3s", opcode, pad << 4, 0xFFFF, 0, dest_qp.to_bytes(3, "big"), 0x80,
                      psn.to_bytes(3, "big"))
    body = bth + payload + b"\x00" * pad
    udp_len = 8 + len(body) + 4
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0, src_ip, dst_ip))
    ip[10:12] = struct.pack("!H", checksum16(bytes(ip)))
    udp = struct.pack("!HHHH", 0xC000 | (OUR_QPN & 0x3FFF), ROCE_PORT, udp_len, 0)
    packet = bytes(ip) + udp + body
    return dst_mac + src_mac + b"\x08\x00" + packet + struct.pack("<I", icrc(packet))


def arp_resolve(sock, our_mac, our_ip, ip, timeout=2.0):
    req = (b"\xff" * 6 + our_mac + b"\x08\x06" +
           struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, our_mac, our_ip, b"\x00" * 6, ip))
    end = time.time() + timeout
    while time.time() < end:
        sock.send(req)
        sock.settimeout(0.2)
        try:
            while True:
                f = sock.recv(2048)
                if f[12:14] == b"\x08\x06" and struct.unpack("!H", f[20:22])[0] == 2 and f[28:32] == ip:
                    return f[22:28]
        except socket.timeout:
            continue
    return None


def exchange(host, mtu, iface):
    """ibv_rc_pingpong's client side of the exchange; returns (qpn, psn)."""
    s = socket.create_connection((host, 18515), timeout=20)
    gid = "00000000000000000000ffff" + "".join("%02x" % b for b in if_ipv4(iface))
    s.sendall(("0000:%06x:%06x:%s" % (OUR_QPN, OUR_PSN, gid)).encode() + b"\x00")
    msg = b""
    while len(msg) < 52:
        chunk = s.recv(52 - len(msg))
        if not chunk:
            raise RuntimeError("the server closed the exchange")
        msg += chunk
    lid, qpn, psn = msg[:18].decode().split(":")
    s.sendall(b"done\x00")
    return s, int(qpn, 16), int(psn, 16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    ap.add_argument("--tcp", required=True, help="where the server's exchange listens")
    ap.add_argument("--ip", required=True, help="the server's RoCE address")
    ap.add_argument("--mac", help="the server's MAC (default: ARP)")
    ap.add_argument("--mtu", type=int, default=1024)
    ap.add_argument("--iface", default="rxebr0")
    a = ap.parse_args()
    packets = cases(a.mtu).get(a.case)
    if packets is None:
        sys.exit("probe_rc: unknown case %s (one of %s)" % (a.case, ", ".join(cases(a.mtu))))

    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    raw.bind((a.iface, 0))
    our_mac, our_ip = if_mac(raw, a.iface), if_ipv4(a.iface)
    server_ip = socket.inet_aton(a.ip)
    tcp, server_qpn, _ = exchange(a.tcp, a.mtu, a.iface)
    mac = bytes.fromhex(a.mac.replace(":", "")) if a.mac else arp_resolve(raw, our_mac, our_ip, server_ip)
    if mac is None:
        sys.exit("probe_rc: no ARP answer for %s" % a.ip)
    time.sleep(0.3)  # the server moves its QP to RTR right after its message
    for k, (opcode, length) in enumerate(packets):
        payload = bytes((i * 7 + k) & 0xFF for i in range(length))
        raw.send(frame(our_mac, mac, our_ip, server_ip, opcode, (OUR_PSN + k) & 0xFFFFFF, server_qpn, payload))
    answers = []
    end = time.time() + 1.5
    raw.settimeout(0.1)
    while time.time() < end:
        try:
            f = raw.recv(16384)
        except socket.timeout:
            continue
        if f[12:14] != b"\x08\x00" or f[23] != 17 or f[26:30] != server_ip:
            continue
        ihl = (f[14] & 0x0F) * 4
        udp = 14 + ihl
        if struct.unpack("!H", f[udp + 2:udp + 4])[0] != ROCE_PORT:
            continue
        bth = udp + 8
        opcode = f[bth]
        if opcode not in RESPONSES:
            continue  # the server's own requests (a pingpong server answers a SEND with one)
        psn = int.from_bytes(f[bth + 9:bth + 12], "big")
        ans = {"opcode": opcode, "psn_offset": (psn - OUR_PSN) & 0xFFFFFF}
        if opcode in (ACK, 0x12, 0x0D, 0x0F, 0x10):  # AETH-bearing
            ans["syndrome"] = f[bth + 12]
            ans["msn"] = int.from_bytes(f[bth + 13:bth + 16], "big")
        answers.append(ans)
    tcp.close()
    print(json.dumps({"case": a.case, "answers": answers}))


if __name__ == "__main__":
    main()
