#!/usr/bin/env python3
"""A delay line for `sim/testbed.sh inject` (delay faults without netem).

    delayline.py DEV:DELAY_US [DEV:DELAY_US ...]

Every frame that arrives on DEV is sent back out of DEV DELAY_US
microseconds later, in order. `inject` steers a faulted node's or link's
frames (tc mirred) into one end of a veth pair whose other end is DEV and is
a bridge port on the way out, so the frames reach the bridge again, late.
Frames keep their segmentation-offload metadata (PACKET_VNET_HDR), so a
64 KiB TSO frame leaves as it came. Runs in the switch namespace; prints
"ready" once every device is bound, then runs until killed.
"""
import heapq
import select
import socket
import sys
import time

ETH_P_ALL = 3
SOL_PACKET = 263
PACKET_VNET_HDR = 15
PACKET_IGNORE_OUTGOING = 23
FRAME_MAX = 65536 + 64  # a 64 KiB GSO frame, its virtio-net header and Ethernet header


def parse(arg):
    dev, sep, us = arg.partition(":")
    if not sep or not dev or len(dev) > 15 or not us.isdigit() or not 1 <= int(us) <= 10_000_000:
        sys.exit(f"delayline: '{arg}' is not DEV:DELAY_US (a device name, 1 to 10000000 us)")
    return dev, int(us) * 1000


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    lines = {}
    for dev, delay_ns in map(parse, sys.argv[1:]):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        s.bind((dev, ETH_P_ALL))
        s.setblocking(False)
        lines[s.fileno()] = (s, delay_ns)
    socks = [s for s, _ in lines.values()]
    print("ready", flush=True)
    due = []  # (departure ns, arrival order, socket, frame)
    order = 0
    dropped = 0
    while True:
        now = time.monotonic_ns()
        while due and due[0][0] <= now:
            _, _, s, frame = heapq.heappop(due)
            try:
                s.send(frame)
            except OSError as e:
                dropped += 1
                if dropped in (1, 10, 100, 1000) or dropped % 10000 == 0:
                    print(f"delayline: {dropped} frame(s) not sent: {e}", file=sys.stderr, flush=True)
        timeout = None if not due else max(0.0, (due[0][0] - time.monotonic_ns()) / 1e9)
        ready, _, _ = select.select(socks, [], [], timeout)
        for s in ready:
            _, delay_ns = lines[s.fileno()]
            while True:
                try:
                    frame = s.recv(FRAME_MAX)
                except BlockingIOError:
                    break
                order += 1
                heapq.heappush(due, (time.monotonic_ns() + delay_ns, order, s, frame))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
