#!/usr/bin/env python3
"""Metadata figures of a Sluice cluster, with raw CreateTopics requests (no client library).

    cluster_admin.py create HOST:PORT COUNT PARTITIONS PREFIX
        creates COUNT topics of PARTITIONS partitions one request at a time through HOST:PORT
        and prints: count, seconds, topics/s, p50 and p99 ms per request.
    cluster_admin.py until-created HOST:PORT NAME TIMEOUT_S
        retries CreateTopics of NAME (1 partition) until it succeeds; prints the seconds taken
        (after a controller is killed: the time to the next committed metadata change).
"""
import socket
import struct
import sys
import time


def string(text):
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


class Conn:
    def __init__(self, addr, timeout=15):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def read(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return buf

    def create_topic(self, name, partitions):
        """CreateTopics v2 of one topic; returns its error code."""
        self.correlation += 1
        body = struct.pack(">hhi", 19, 2, self.correlation) + string("cluster_admin.py")
        body += struct.pack(">i", 1) + string(name) + struct.pack(">ihii", partitions, 1, 0, 0)
        body += struct.pack(">i?", 15000, False)
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", self.read(4))
        resp = self.read(size)
        # correlation id, throttle_time_ms, topic count, name, error code
        (name_len,) = struct.unpack(">h", resp[12:14])
        (code,) = struct.unpack(">h", resp[14 + name_len:16 + name_len])
        return code


def create(addr, count, partitions, prefix):
    conn = Conn(addr)
    times = []
    start = time.monotonic()
    for i in range(count):
        t = time.monotonic()
        code = conn.create_topic(f"{prefix}-{i}", partitions)
        if code != 0:
            sys.exit(f"topic {prefix}-{i}: error {code}")
        times.append((time.monotonic() - t) * 1000)
    total = time.monotonic() - start
    times.sort()
    print(f"{count}\t{total:.2f}\t{count / total:.1f}\t{times[len(times) // 2]:.2f}\t{times[int(len(times) * 0.99)]:.2f}")


def until_created(addr, name, timeout):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if Conn(addr, timeout=timeout).create_topic(name, 1) in (0, 36):
                print(f"{time.monotonic() - start:.3f}")
                return
        except OSError:
            pass
        time.sleep(0.02)
    sys.exit(f"{name} not created within {timeout} s")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "create":
        create(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) == 5 and sys.argv[1] == "until-created":
        until_created(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        sys.exit(__doc__)
