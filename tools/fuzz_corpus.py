#!/usr/bin/python3
"""Seed corpora for the libFuzzer harnesses (test/fuzz/), from pcap files.

usage: fuzz_corpus.py OUT_DIR PCAP...

Writes OUT_DIR/frame/ (each distinct RoCEv2 frame: fuzz_frame's input),
OUT_DIR/pcap/ (each capture cut to its first 8 frames: fuzz_pcap's input)
and OUT_DIR/rc_rx/ (runs of 1-3 consecutive frames as fuzz_rc_rx reads them:
[flags][n][4n bytes from the BTH, without the ICRC]), and to rc_rx also the
requests no capture of ours holds: IBA 1.5 ATOMIC WRITE, its empty READ
response, and SEND with Invalidate of fuzz_rc_rx's window. Classic pcap only
(microsecond or nanosecond, either byte order), Ethernet with or without one
802.1Q tag.
"""
import hashlib
import os
import struct
import sys


def frames(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    at, out = 24, []
    while at + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[at:at + 16])
        out.append((data[at:at + 16], data[at + 16:at + 16 + incl]))
        at += 16 + incl
    return data[:24], out


def transport(frame):
    """BTH through the pad (no ICRC) of a RoCEv2 frame, or None."""
    l3 = 14
    ether = struct.unpack(">H", frame[12:14])[0]
    if ether == 0x8100:
        l3, ether = 18, struct.unpack(">H", frame[16:18])[0]
    if ether == 0x0800:
        ihl = (frame[l3] & 0x0F) * 4
        end = l3 + struct.unpack(">H", frame[l3 + 2:l3 + 4])[0]
        udp = l3 + ihl
    elif ether == 0x86DD:
        end = l3 + 40 + struct.unpack(">H", frame[l3 + 4:l3 + 6])[0]
        udp = l3 + 40
    else:
        return None
    if struct.unpack(">H", frame[udp + 2:udp + 4])[0] != 4791:
        return None
    t = frame[udp + 8:end - 4]
    return t if 12 <= len(t) <= 255 * 4 and len(t) % 4 == 0 else None


def write(directory, blob):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, hashlib.sha1(blob).hexdigest()), "wb") as f:
        f.write(blob)


def bth(opcode, psn, ack_req=True):
    """A BTH to fuzz_rc_rx's QP (the harness sets the QP number)."""
    return struct.pack(">BBHII", opcode, 0, 0xFFFF, 0, (0x80000000 if ack_req else 0) | psn)


def synthetic():
    """rc_rx inputs for the opcodes the captures lack, flags 6 (our keys,
    PSNs relative to the QP's): ATOMIC WRITE (0x1d: BTH, RETH of 8 bytes,
    the 8 bytes), then again (a duplicate); the READ response Only with no
    payload that answers ours (0x10, AETH); SEND Only with Invalidate
    (0x17, IETH) of the window, then a WRITE through it; with first flags
    0x96, XRC requests into fuzz_rc_rx's XRC target and an XRC ACK for its
    initiator; with first flags 0xb6, selective repeat's (sr())."""
    reth = struct.pack(">QII", 0, 0, 8)
    atomic_write = bth(0x1D, 0) + reth + struct.pack(">Q", 0x0102030405060708)
    read_only = bth(0x10, 4, False) + struct.pack(">I", 0x1F000001)
    send_inv = bth(0x17, 0) + struct.pack(">I", 0) + b"inv!"
    write = bth(0x0A, 1) + struct.pack(">QII", 0, 0, 8) + b"windowed"
    chunk = lambda t: bytes([6, len(t) // 4]) + t
    # XRC (first flags 0x96: the XRC target and initiator, our SRQ named):
    # a SEND Only (0xa4), a WRITE Only (0xaa) and a FetchAdd (0xb4) into
    # the target, then an ACK (0xb1) for the initiator's first request.
    xrceth = struct.pack(">I", 0)
    xrc_send = bth(0xA4, 0) + xrceth + b"xrc!"
    xrc_write = bth(0xAA, 1) + xrceth + struct.pack(">QII", 0, 0, 8) + b"xrcwrite"
    xrc_fadd = bth(0xB4, 2) + xrceth + struct.pack(">QIQQ", 0, 0, 1, 0)
    xrc_ack = bth(0xB1, 0, False) + struct.pack(">I", 0x1F000001)
    xchunk = lambda t, first=False: bytes([0x96 if first else 6, len(t) // 4]) + t
    return [
        chunk(atomic_write),
        chunk(atomic_write) + chunk(atomic_write),
        chunk(read_only),
        chunk(send_inv) + chunk(write),
        xchunk(xrc_send, True) + xchunk(xrc_write) + xchunk(xrc_fadd),
        xchunk(xrc_ack, True),
    ] + sr()


def sr():
    """rc_rx inputs for selective repeat (first flags 0xb6: the mode, our
    keys, PSNs relative; a RETH's address 0x800 is our region's first byte,
    path MTU 256). Ours: a SEND at PSN 0, a WRITE at 1-8, a READ at 9-14,
    an atomic at 15, an ATOMIC WRITE at 16. The peer's requests: a WRITE of
    three packets arriving last first, SENDs out of order and one naming a
    receive never posted, a WRITE ahead running past the region, a READ and
    a FetchAdd, PSNs at the window's edge. Its answers: SACKs (one naming
    PSNs never sent), a READ response, an atomic ACK."""
    def sreth(offset, length, recv, last, first_psn):
        return struct.pack(">IIII", offset, length, (recv << 8) | (1 if last else 0), first_psn)

    def reth(va, length):
        return struct.pack(">QII", va, 0, length)

    def sacketh(expected, bits):
        return struct.pack(">I", expected) + bits.to_bytes(16, "big")

    aeth = struct.pack(">I", 0x1F000000)
    chunk = lambda t, first=False: bytes([0xB6 if first else 6, len(t) // 4]) + t
    write_only = lambda psn, va=0x800, n=8: bth(0xCA, psn) + sreth(0, n, 0, True, psn) + reth(va, n) + b"w" * n
    write3 = [
        bth(0xC8, 2) + sreth(512, 520, 0, True, 0) + reth(0x800, 520) + b"L" * 8,
        bth(0xC7, 1, False) + sreth(256, 520, 0, False, 0) + reth(0x800, 520) + b"M" * 256,
        bth(0xC6, 0, False) + sreth(0, 520, 0, False, 0) + reth(0x800, 520) + b"F" * 256,
    ]
    send_only = lambda psn, recv: bth(0xC4, psn) + sreth(0, 8, recv, True, psn) + b"sendonly"
    send2 = [
        bth(0xC0, 0, False) + sreth(0, 300, 0, False, 0) + b"f" * 256,
        bth(0xC2, 1) + sreth(256, 300, 0, True, 0) + b"l" * 44,
    ]
    read = bth(0xCC, 0) + sreth(0, 8, 0, True, 0) + reth(0x800, 8)
    fetch_add = bth(0xD4, 1) + sreth(0, 8, 0, True, 1) + struct.pack(">QIQQ", 0x800, 0, 1, 0)
    sack = lambda expected, bits: bth(0xD1, expected, False) + aeth + sacketh(expected, bits)
    read_first = bth(0xCD, 9, False) + aeth + b"r" * 256
    atomic_ack = bth(0xD2, 15, False) + aeth + struct.pack(">Q", 7)
    return [
        chunk(write_only(0), True),
        b"".join(chunk(t, i == 0) for i, t in enumerate(write3)),
        chunk(send_only(1, 1), True) + chunk(send_only(0, 0)),
        chunk(send2[0], True) + chunk(send2[1]),
        chunk(send_only(1, 0x123456), True) + chunk(send_only(0, 0)),
        chunk(write_only(1, 0x800 + 4096 - 8, 64), True) + chunk(write_only(0)),
        chunk(read, True) + chunk(fetch_add),
        chunk(write_only(128), True) + chunk(write_only(129)),
        chunk(sack(1, 1 << 127), True) + chunk(sack(9, 0)),
        chunk(sack(0, (1 << 128) - 1), True) + chunk(sack(40, 0)),
        chunk(sack(9, 0), True) + chunk(read_first) + chunk(atomic_ack),
    ]


def main():
    out = sys.argv[1]
    for blob in synthetic():
        write(os.path.join(out, "rc_rx"), blob)
    for path in sys.argv[2:]:
        header, records = frames(path)
        write(os.path.join(out, "pcap"), header + b"".join(h + d for h, d in records[:8]))
        seen = set()
        chunks = []
        for _, frame in records:
            t = transport(frame)
            if t is None:
                continue
            write(os.path.join(out, "frame"), frame)
            # flags 6: our region's rkey, PSN relative to the QP's.
            chunks.append(bytes([6, len(t) // 4]) + t)
        for i in range(len(chunks)):
            for n in (1, 3):
                blob = b"".join(chunks[i:i + n])
                key = hashlib.sha1(blob).digest()
                if key not in seen:
                    seen.add(key)
                    write(os.path.join(out, "rc_rx"), blob)


if __name__ == "__main__":
    main()
