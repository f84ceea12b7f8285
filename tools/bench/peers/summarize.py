#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tables of guard.sh and nat.sh output.

    summarize.py guard guard.txt
    summarize.py nat nat.txt

Per configuration: received kpps (median over repetitions, [spread %]),
the ratio of medians to the baseline (guard: none, nat: fwd), and the
added ns/packet paired by repetition: 1e9/pps(cfg) - 1e9/pps(baseline)
of the same repetition, median [min..max]. The figures to compare are
the ratios and added costs of one run: on a shared machine the absolute
rates move with everyone else's load.
"""
import collections
import re
import statistics
import sys


def kv(line):
    return dict(re.findall(r'(\w+)=([\w.\-]+)', line))


def med(xs):
    return statistics.median(xs) if xs else float('nan')


def spread(xs):
    return 100 * (max(xs) - min(xs)) / med(xs) if len(xs) > 1 and med(xs) else 0.0


def paired(runs, base):
    """Added ns/packet of runs over base, repetition by repetition."""
    return [1e9 / runs[r] - 1e9 / base[r] for r in runs if r in base and runs[r] > 0 and base[r] > 0]


def table(rx, base, order):
    """rx: cfg -> {rep: pps}. Prints one row per configuration."""
    print(f'  {"cfg":<16} {"kpps":>7} {"[spread%]":>9} {"x " + base:>8} {"+ns/pkt median [min..max]":>28}')
    b = rx.get(base, {})
    for c in order:
        v = list(rx[c].values())
        if not v:
            continue
        ratio = med(v) / med(list(b.values())) if b else float('nan')
        add = paired(rx[c], b) if c != base else []
        addtxt = f'{med(add):.0f} [{min(add):.0f}..{max(add):.0f}]' if add else '-'
        print(f'  {c:<16} {med(v) / 1e3:>7.0f} {spread(v):>8.0f}% {ratio:>8.2f} {addtxt:>28}')


def guard(path):
    rx = collections.defaultdict(lambda: collections.defaultdict(dict))  # N -> cfg -> rep -> pps
    flood = collections.defaultdict(lambda: collections.defaultdict(list))
    checks, mismatch = [], 0.0
    for line in open(path):
        if line.startswith('# check') or line.startswith('# guard') or line.startswith('# load'):
            checks.append(line.strip())
        if not line.startswith('N='):
            continue
        d = kv(line)
        n, c, r = int(d['N']), d['cfg'], int(d['run'])
        if c.endswith('-flood'):
            flood[n][c[:-6]].append(float(d['tx_pps']))
            continue
        rx[n][c][r] = float(d['rx_pps'])
        tx = float(d['tx_pps'])
        if tx:
            mismatch = max(mismatch, abs(tx - rx[n][c][r]) / tx)
    print('Port guard: one sender core through the bridge; received kpps, ratio to the plain bridge, added ns/packet')
    for n in sorted(rx):
        order = ['none'] + [c for c in rx[n] if c != 'none']
        print(f'N={n} ports')
        table(rx[n], 'none', order)
        for c, v in flood[n].items():
            print(f'  {c}-flood: spoofed source MAC, all dropped: {med(v) / 1e3:.0f} kpps dropped by one core [{spread(v):.0f}%]')
    print(f'largest sent/received mismatch of a passing run: {100 * mismatch:.1f}%')
    for l in checks:
        print(l)


def nat(path):
    udp = collections.defaultdict(dict)
    tcp = collections.defaultdict(dict)
    notes = []
    for line in open(path):
        if line.startswith('# check') or line.startswith('# nat') or line.startswith('# load'):
            notes.append(line.strip())
        m = re.match(r'NAT (udp|tcp) cfg=(\S+) run=(\d+) (.*)', line)
        if not m:
            continue
        d = kv(m.group(4))
        try:
            if m.group(1) == 'udp':
                udp[m.group(2)][int(m.group(3))] = float(d['rx_pps'])
            else:
                tcp[m.group(2)][int(m.group(3))] = float(d['gbps'])
        except (KeyError, ValueError):
            pass  # a run that printed NA: left out, visible in the raw file
    print('NAT: UDP from the internet namespace to the VM, one sender core; received kpps, ratio to plain forwarding, added ns/packet')
    order = [c for c in ['fwd', 'nft', 'ipt'] if c in udp] + [c for c in udp if c not in ('fwd', 'nft', 'ipt')]
    table(udp, 'fwd', order)
    if 'nft' in udp:
        for c in order:
            if c.startswith('pivirt'):
                print(f'  {c} / nft: {med(list(udp[c].values())) / med(list(udp["nft"].values())):.2f}')
    routers = [c for c in udp if 'router' in c and c != 'fwd-router']
    if routers and 'fwd-router' in udp:
        print('router mode against forwarding through the same router namespace (fwd-router):')
        table(udp, 'fwd-router', ['fwd-router'] + routers)
    if tcp:
        print('TCP (iperf3) Gbit/s, median [min..max]: ' + ', '.join(
            f'{c} {med(list(v.values())):.2f} [{min(v.values()):.2f}..{max(v.values()):.2f}]' for c, v in tcp.items() if v))
    for l in notes:
        print(l)


if __name__ == '__main__':
    if len(sys.argv) != 3 or sys.argv[1] not in ('guard', 'nat'):
        sys.exit('usage: summarize.py guard|nat FILE')
    {'guard': guard, 'nat': nat}[sys.argv[1]](sys.argv[2])
