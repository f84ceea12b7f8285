#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""cpuwindows.py CPUSTAT DHCP_LOG: per-core busy % during each measured run.

CPUSTAT is what `tools/bench/run.sh` samples once a second while
dhcp-peers.sh runs ("<unix time> cpu0 ... cpu1 ..." lines of /proc/stat);
DHCP_LOG is the harness's log. For every "@max" and "@fixed" run the log
reports (it logs the end; runs last PERIOD seconds) this prints how busy the
server's core (cpu0) and perfdhcp's core (cpu1) were: a load generator near
100% means the rate measured is the generator's limit, not the server's.
"""
import datetime
import re
import sys

PERIOD = 10


def load(path):
    rows = []
    for line in open(path):
        p = line.split()
        if len(p) < 23:
            continue
        rows.append((int(p[0]), list(map(int, p[2:12])), list(map(int, p[13:23]))))
    return rows


def busy(a, b):
    d = [y - x for x, y in zip(a, b)]
    tot = sum(d)
    return 100.0 * (tot - d[3] - d[4]) / tot if tot else float("nan")


def main():
    rows = load(sys.argv[1])
    day = datetime.datetime.fromtimestamp(rows[0][0], datetime.timezone.utc).date() if rows else None
    pat = re.compile(r"^\[(\d\d:\d\d:\d\d)\] (\S+) @(max|fixed): rate=(\d+) .*?dora_s=(\d+) .*?cpu_pct=(\d+)")
    print(f"{'server':<10} {'run':<6} {'rate':>6} {'dora/s':>7} {'srv cpu%':>9} {'cpu0 busy%':>11} {'cpu1 (perfdhcp) busy%':>22}")
    for line in open(sys.argv[2]):
        m = pat.match(line)
        if not m or day is None:
            continue
        # The log has times of day only: take the day that falls within
        # the samples (a run may cross midnight UTC).
        tod = datetime.time.fromisoformat(m.group(1))
        ends = [datetime.datetime.combine(day + datetime.timedelta(days=k), tod, datetime.timezone.utc).timestamp() for k in (0, 1)]
        end = next((e for e in ends if rows[0][0] <= e <= rows[-1][0]), ends[0])
        sel = [r for r in rows if end - PERIOD + 1 <= r[0] <= end - 1]
        if len(sel) < 2:
            continue
        print(f"{m.group(2):<10} {m.group(3):<6} {m.group(4):>6} {m.group(5):>7} {m.group(6):>9} "
              f"{busy(sel[0][1], sel[-1][1]):>11.0f} {busy(sel[0][2], sel[-1][2]):>22.0f}")


if __name__ == "__main__":
    main()
