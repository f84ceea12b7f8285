#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""NAT table of nat.sh output with every configuration: summarize.py nat-pivirt.txt

UDP kpps (median, [spread %]), added ns/packet vs fwd paired by run
(1e9/pps(cfg) - 1e9/pps(fwd) of the same repetition, median), the ratio
to nft and to fwd of the medians, TCP Gbit/s (median), and the sender
core's kernel time per packet: (sys+softirq share of cpu0) * 1e9 / pps,
which discounts time other processes took from cpu0 on a shared machine
(the sender's own user time is ~0), with its paired difference to fwd.
Router-mode configurations (*router*) are also compared with their own
floor, fwd-router (forwarding through the same router namespace), in a
second table; TCP spreads are printed there and in a third table."""
import re, statistics, sys
from collections import defaultdict

udp, tcp, kns = defaultdict(dict), defaultdict(dict), defaultdict(dict)
for l in open(sys.argv[1]):
    m = re.match(r'NAT (udp|tcp) cfg=(\S+) run=(\d+) (.*)', l)
    if not m:
        continue
    kv = dict(x.split('=', 1) for x in m.group(4).split() if '=' in x)
    try:
        if m.group(1) == 'udp':
            udp[m.group(2)][int(m.group(3))] = float(kv['rx_pps'])
            c0 = re.search(r'cpu0 usr(\d+) sys(\d+) sirq(\d+)', l)
            if c0:
                kns[m.group(2)][int(m.group(3))] = (int(c0.group(2)) + int(c0.group(3))) / 100 * 1e9 / float(kv['rx_pps'])
        else:
            tcp[m.group(2)][int(m.group(3))] = float(kv['gbps'])
    except (KeyError, ValueError):
        pass
med = lambda xs: statistics.median(xs) if xs else float('nan')
cfgs = [c for c in ['fwd', 'nft', 'ipt', 'ebpf'] if c in udp] + [c for c in udp if c not in ('fwd', 'nft', 'ipt', 'ebpf')]
print(f'{"cfg":<10} {"kpps":>7} {"spread%":>8} {"+ns/pkt":>8} {"x nft":>6} {"x fwd":>6} {"tcp Gb/s":>9} {"k-ns/pkt":>9} {"+k-ns":>6}')
for c in cfgs:
    v = list(udp[c].values())
    spread = 100 * (max(v) - min(v)) / med(v) if v else 0
    added = [1e9 / udp[c][r] - 1e9 / udp['fwd'][r] for r in udp[c] if r in udp.get('fwd', {})]
    xn = med(v) / med(list(udp['nft'].values())) if 'nft' in udp else float('nan')
    xf = med(v) / med(list(udp['fwd'].values())) if 'fwd' in udp else float('nan')
    kadd = [kns[c][r] - kns['fwd'][r] for r in kns[c] if r in kns.get('fwd', {})]
    print(f'{c:<10} {med(v)/1e3:>7.0f} {spread:>8.0f} {med(added):>8.0f} {xn:>6.2f} {xf:>6.2f} {med(list(tcp[c].values())):>9.2f} {med(list(kns[c].values())):>9.0f} {med(kadd):>6.0f}')

def pair(c, base):
    v = list(udp[c].values())
    b = list(udp[base].values())
    added = [1e9 / udp[c][r] - 1e9 / udp[base][r] for r in udp[c] if r in udp[base]]
    return med(v), med(b), med(added), (min(added) if added else float('nan')), (max(added) if added else float('nan'))

routers = [c for c in udp if 'router' in c and c != 'fwd-router']
if routers and 'fwd-router' in udp:
    print(f'router mode vs fwd-router: {"cfg":<16} {"kpps":>7} {"floor":>7} {"x floor":>7} {"+ns/pkt med [min..max]":>24} {"tcp":>6} {"floor tcp":>9}')
    for c in routers:
        m, b, a, lo, hi = pair(c, 'fwd-router')
        print(f'{"":<27}{c:<16} {m/1e3:>7.0f} {b/1e3:>7.0f} {m/b:>7.2f} {a:>8.0f} [{lo:.0f}..{hi:.0f}] {med(list(tcp[c].values())):>6.2f} {med(list(tcp["fwd-router"].values())):>9.2f}')
if tcp:
    print('tcp Gbit/s median [min..max]: ' + ', '.join(
        f'{c} {med(list(tcp[c].values())):.2f} [{min(tcp[c].values()):.2f}..{max(tcp[c].values()):.2f}]' for c in cfgs if tcp.get(c)))
