#!/usr/bin/python3
"""Seed corpora for the libFuzzer harnesses (test/fuzz/), from pcap files.

usage: fuzz_corpus.py OUT_DIR PCAP...

Writes OUT_DIR/frame/ (each distinct RoCEv2 frame: fuzz_frame's input),
OUT_DIR/pcap/ (each capture cut to its first 8 frames: fuzz_pcap's input)
and OUT_DIR/rc_rx/ (runs of 1-3 consecutive frames as fuzz_rc_rx reads them:
[flags][n][4n bytes from the BTH, without the ICRC]). Classic pcap only
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


def main():
    out = sys.argv[1]
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
