#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tables of guard.sh, nat.sh, masq.sh and acl.sh output.

    summarize.py guard guard.txt
    summarize.py nat nat.txt
    summarize.py masq masq.txt
    summarize.py acl acl.txt
    summarize.py dhcp results.tsv     (dhcp.sh's)

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
    flood = collections.defaultdict(lambda: collections.defaultdict(dict))  # N -> cfg -> rep -> pps
    checks, mismatch = [], 0.0
    for line in open(path):
        if line.startswith('# check') or line.startswith('# guard') or line.startswith('# load'):
            checks.append(line.strip())
        if not line.startswith('N='):
            continue
        d = kv(line)
        n, c, r = int(d['N']), d['cfg'], int(d['run'])
        if c.endswith('-flood'):
            flood[n][c[:-6]][r] = float(d['tx_pps'])
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
        nft = flood[n].get('nft', {})
        for c, reps in flood[n].items():
            v = list(reps.values())
            # Ratios of the same repetition: the configurations alternate in each.
            vs = [reps[r] / nft[r] for r in reps if nft.get(r)] if c != 'nft' else []
            x = f', x{med(vs):.2f} nft [{min(vs):.2f}..{max(vs):.2f}]' if vs else ''
            print(f'  {c}-flood: spoofed source MAC, all dropped: {med(v) / 1e3:.0f} kpps dropped by one core [{spread(v):.0f}%]{x}')
    print(f'largest sent/received mismatch of a passing run: {100 * mismatch:.1f}%')
    for l in checks:
        print(l)


def runs(path, tag):
    """UDP kpps and TCP Gbit/s by cfg and repetition, and the notes, of
    nat.sh (tag NAT) or masq.sh (tag MASQ) output."""
    udp = collections.defaultdict(dict)
    tcp = collections.defaultdict(dict)
    notes = []
    for line in open(path):
        if line.startswith('# check') or line.startswith('# ' + tag.lower()) or line.startswith('# load'):
            notes.append(line.strip())
        m = re.match(tag + r' (udp|tcp) cfg=(\S+) (?:flows=\d+ )?run=(\d+) (.*)', line)
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
    return udp, tcp, notes


def nat(path):
    udp, tcp, notes = runs(path, 'NAT')
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


def masq(path):
    udp, tcp, notes = runs(path, 'MASQ')
    print('Masquerade: UDP from the guest to the internet namespace over many flows, one sender core; '
          'received kpps, ratio to plain forwarding, added ns/packet')
    order = [c for c in ['fwd', 'nft', 'pivirt', 'prog'] if c in udp] + [c for c in udp if c not in ('fwd', 'nft', 'pivirt', 'prog')]
    table(udp, 'fwd', order)
    if 'nft' in udp and 'pivirt' in udp and 'fwd' in udp:
        pv, nf = med(list(udp['pivirt'].values())), med(list(udp['nft'].values()))
        add_pv, add_nf = med(paired(udp['pivirt'], udp['fwd'])), med(paired(udp['nft'], udp['fwd']))
        print(f'  pivirt / nft packets/s: {pv / nf:.2f}; added ns/packet pivirt / nft: {add_pv / add_nf:.2f}')
    if 'prog' in udp and 'pivirt' in udp and 'nft' in udp:
        # The programs attached but translating nothing: the floor of the
        # masquerade's own cost, if their presence changes the path.
        add = med(paired(udp['pivirt'], udp['prog']))
        print(f'  pivirt over prog (the masquerade itself): {add:.0f} ns/packet; nft over fwd: {med(paired(udp["nft"], udp["fwd"])):.0f} ns/packet')
    if tcp:
        print('TCP (iperf3, one flow) Gbit/s, median [min..max]: ' + ', '.join(
            f'{c} {med(list(v.values())):.2f} [{min(v.values()):.2f}..{max(v.values()):.2f}]' for c, v in tcp.items() if v))
    for l in notes:
        print(l)


def acl(path):
    rx = collections.defaultdict(lambda: collections.defaultdict(dict))  # (N, case) -> cfg -> rep -> pps
    notes, mismatch = [], 0.0
    for line in open(path):
        if line.startswith(('# check', '# acl', '# load', '# topology')):
            notes.append(line.strip())
        if not line.startswith('N='):
            continue
        d = kv(line)
        key, c, r = (int(d['N']), d['case']), d['cfg'], int(d['run'])
        rx[key][c][r] = float(d['rx_pps'])
        tx = float(d.get('tx_pps') or 0)
        if tx:
            mismatch = max(mismatch, abs(tx - rx[key][c][r]) / tx)

    def mmm(xs, f='{:.0f}'):
        return f'{f.format(med(xs))} [{f.format(min(xs))}..{f.format(max(xs))}]' if xs else '-'

    print('Port ACL, N rules, the matching one last: one sender core through the bridge; received kpps and')
    print('added ns/packet against the plain bridge of the same repetition, median [min..max] over repetitions')
    cases = {'est': 'packets of an established flow', 'new': 'each packet a new flow (rules walked, tables full)'}
    for key in sorted(rx, key=lambda k: (k[1], k[0])):
        n, case = key
        runs = rx[key]
        print(f'N={n} rules, {cases.get(case, case)}:')
        print(f'  {"cfg":<14} {"kpps median [min..max]":>24} {"x none":>7} {"+ns/pkt median [min..max]":>28}')
        base = runs.get('none', {})
        for c in ['none'] + [c for c in runs if c != 'none']:
            v = [x / 1e3 for x in runs[c].values()]
            if not v:
                continue
            ratio = med(v) * 1e3 / med(list(base.values())) if base else float('nan')
            add = paired(runs[c], base) if c != 'none' else []
            print(f'  {c:<14} {mmm(v):>24} {ratio:>7.2f} {mmm(add):>28}')
        if 'nft' in runs and 'pivirtd' in runs:
            r = [runs['pivirtd'][k] / runs['nft'][k] for k in runs['pivirtd'] if k in runs['nft'] and runs['nft'][k] > 0]
            a_pv, a_nft = paired(runs['pivirtd'], base), paired(runs['nft'], base)
            line = f'  pivirtd / nft, pps of the same repetition: {mmm(r, "{:.2f}")}'
            if a_pv and a_nft and med(a_nft) > 0:
                line += f'; added ns pivirtd / nft (medians): {med(a_pv) / med(a_nft):.2f}'
            print(line)
        if 'pivirtd-guard' in runs and 'pivirtd' in runs:
            own = paired(runs['pivirtd'], runs['pivirtd-guard'])
            print(f'  the ACL alone (pivirtd - pivirtd-guard, same repetition): {mmm(own)} ns/pkt')
    print(f'largest sent/received mismatch of a run: {100 * mismatch:.1f}%')
    for l in notes:
        print(l)


def dhcp(path):
    runs = collections.defaultdict(lambda: collections.defaultdict(list))  # server -> phase -> [kv]
    order = []
    for line in open(path):
        server, phase, rest = line.rstrip('\n').split('\t', 2)
        if server not in order:
            order.append(server)
        runs[server][phase].append(kv(rest))

    def col(server, phase, key):
        out = []
        for d in runs[server][phase]:
            try:
                out.append(float(d[key]))
            except (KeyError, ValueError):
                pass
        return out

    def rng(xs, f='{:.0f}'):
        return (f.format(min(xs)) + '-' + f.format(max(xs))) if xs else '-'

    print('DHCP under perfdhcp (relay, 800 clients, re-DORAs of known clients); medians over rounds, ranges in brackets')
    print(f'{"server":<14} {"max DORA/s per round":<24} {"at max":>7} {"lost %":>11} {"srv CPU%":>8} '
          f'{"CPU%/1k":>7} {"perfdhcp core%":>14} {"DO p50/p99 ms":>15} {"RA p50/p99 ms":>15}')
    for s in order:
        maxes = col(s, 'max', 'rate')
        dora, cpu = col(s, 'atmax', 'dora_s'), col(s, 'atmax', 'srv_cpu_pct')
        per1k = [c / d * 1000 for c, d in zip(cpu, dora) if d]
        lat = [med(col(s, 'fixed', k)) for k in ('do_p50_ms', 'do_p99_ms', 'ra_p50_ms', 'ra_p99_ms')]
        print(f'{s:<14} {" ".join(f"{m:.0f}" for m in maxes):<24} {med(dora):>7.0f} '
              f'{"[" + rng(col(s, "atmax", "drop_pct"), "{:.2f}") + "]":>11} {med(cpu):>8.0f} {med(per1k):>7.1f} '
              f'{med(col(s, "atmax", "gen_core_busy")):>14.0f} {lat[0]:>7.2f}/{lat[1]:<7.2f} {lat[2]:>7.2f}/{lat[3]:<7.2f}')
    fixed = runs[order[0]]['fixed'][0] if order and runs[order[0]]['fixed'] else {}
    print(f'latency at a fixed {fixed.get("rate", "?")} DORA/s (perfdhcp -x t); CPU%/1k = server CPU per 1,000 DORA/s at max')
    if 'pivirtd' in runs:
        mine = {d['round']: float(d['rate']) for d in runs['pivirtd']['max']}
        for s in order:
            if s == 'pivirtd':
                continue
            theirs = {d['round']: float(d['rate']) for d in runs[s]['max']}
            ratios = [mine[r] / theirs[r] for r in mine if r in theirs and theirs[r] > 0]
            if ratios:
                print(f'pivirtd / {s}, highest passing rate of the same round: median {med(ratios):.2f} '
                      f'[{min(ratios):.2f}..{max(ratios):.2f}], {len(ratios)} rounds')
    loads = [float(d['load']) for s in order for d in runs[s]['max'] if 'load' in d]
    if loads:
        print(f'load average (1 min) after each search: {min(loads):.2f}..{max(loads):.2f}')


if __name__ == '__main__':
    parts = {'guard': guard, 'nat': nat, 'masq': masq, 'acl': acl, 'dhcp': dhcp}
    if len(sys.argv) != 3 or sys.argv[1] not in parts:
        sys.exit('usage: summarize.py guard|nat|acl|dhcp FILE')
    parts[sys.argv[1]](sys.argv[2])
