// SPDX-License-Identifier: Apache-2.0

package nat_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"

	"pivirt.hu/pivirt/dataplane/nat"
)

// TestPrivilegedMasqueradeRandom drives the masquerade with seeded random
// packets (BPF_PROG_RUN): guests open TCP, UDP and ICMP echo flows to a
// few remote ends from random ports, remote ends answer random open
// flows, flows expire, ports run short and the table fills. It checks the
// promises at every step:
//   - a packet of an open flow leaves from the uplink's address and the
//     flow's one public port, every time;
//   - two open flows to the same remote end never share a public port
//     (per protocol);
//   - a reply to an open flow reaches the guest and port that opened it,
//     and nothing else is translated inbound;
//   - a refused new flow (table full, no free port) is dropped and
//     counted, and every open flow still works.
//
// PIVIRT_MASQ_SEED=N replays one seed (PIVIRT_MASQ_STEPS steps).
func TestPrivilegedMasqueradeRandom(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6}
	steps := 1500
	if v := os.Getenv("PIVIRT_MASQ_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("PIVIRT_MASQ_SEED=%q: %v", v, err)
		}
		seeds = []uint64{s}
	}
	if v := os.Getenv("PIVIRT_MASQ_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("PIVIRT_MASQ_STEPS=%q: %v", v, err)
		}
		steps = n
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			w := newMasqWorld(t, seed)
			for i := range steps {
				w.step()
				if t.Failed() {
					t.Fatalf("seed %d failed at step %d; last steps:\n%s", seed, i, strings.Join(w.trail, "\n"))
				}
			}
			if w.refused == 0 || w.replies == 0 || w.expired == 0 {
				t.Errorf("seed %d: %d refused, %d replies, %d expiries: the checks ran on too little", seed, w.refused, w.replies, w.expired)
			}
		})
	}
}

// flow is an open masqueraded flow as the model knows it.
type flow struct {
	proto  layers.IPProtocol
	guest  netip.Addr
	gport  uint16 // the guest's port, or echo id
	remote netip.Addr
	rport  uint16
	public uint16 // the public port (or echo id) it left from
}

func (f flow) x(out bool) l4 {
	switch f.proto {
	case layers.IPProtocolICMPv4:
		if out {
			return echo(f.gport)
		}
		return reply(f.public)
	case layers.IPProtocolTCP:
		if out {
			return tcp(f.gport, f.rport)
		}
		return tcp(f.rport, f.public)
	}
	if out {
		return udp(f.gport, f.rport)
	}
	return udp(f.rport, f.public)
}

type masqWorld struct {
	t       *testing.T
	rnd     *rand.Rand
	o       *nat.Objects
	min     uint16
	max     uint16
	open    []flow
	trail   []string
	refused int
	replies int
	expired int
}

func newMasqWorld(t *testing.T, seed uint64) *masqWorld {
	rnd := rand.New(rand.NewPCG(seed, 0x6d617371))
	// A narrow port range and a small table, so both run out.
	min := uint16(3000 + rnd.IntN(1000))
	max := min + uint16(2+rnd.IntN(6))
	return &masqWorld{t: t, rnd: rnd, o: loadMasq(t, min, max, uint32(24+2*rnd.IntN(8))), min: min, max: max}
}

var (
	guests  = []netip.Addr{netip.MustParseAddr("10.90.0.10"), netip.MustParseAddr("10.90.0.11"), netip.MustParseAddr("10.90.0.12")}
	remotes = []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8")}
	protos  = []layers.IPProtocol{layers.IPProtocolTCP, layers.IPProtocolUDP, layers.IPProtocolICMPv4}
)

func (w *masqWorld) log(format string, args ...any) {
	w.trail = append(w.trail, fmt.Sprintf(format, args...))
	if len(w.trail) > 12 {
		w.trail = w.trail[1:]
	}
}

func (w *masqWorld) step() {
	switch r := w.rnd.IntN(10); {
	case r < 4:
		w.newFlow()
	case r < 6 && len(w.open) > 0:
		w.again(w.open[w.rnd.IntN(len(w.open))])
	case r < 9 && len(w.open) > 0:
		w.reply(w.open[w.rnd.IntN(len(w.open))])
	case r < 10 && len(w.open) > 0:
		w.expire()
	default:
		w.stray()
	}
}

// newFlow sends the first packet of a flow the model does not have.
func (w *masqWorld) newFlow() {
	f := flow{proto: protos[w.rnd.IntN(len(protos))], guest: guests[w.rnd.IntN(len(guests))],
		gport: uint16(40000 + w.rnd.IntN(50)), remote: remotes[w.rnd.IntN(len(remotes))], rport: uint16(80 + w.rnd.IntN(3))}
	if f.proto == layers.IPProtocolICMPv4 {
		f.rport = 0
	}
	for _, o := range w.open {
		if o.proto == f.proto && o.guest == f.guest && o.gport == f.gport && o.remote == f.remote && o.rport == f.rport {
			w.again(o)
			return
		}
	}
	before := sumReasons(w.t, w.o)
	ret, got := run(w.t, w.o.Out, frame(w.t, false, f.guest, f.remote, f.x(true)))
	after := sumReasons(w.t, w.o)
	if ret == actShot {
		refusedNow := after[nat.ReasonMasqFull] + after[nat.ReasonMasqPorts] - before[nat.ReasonMasqFull] - before[nat.ReasonMasqPorts]
		if refusedNow != 1 {
			w.t.Errorf("new flow %+v dropped without a refusal counted (%v)", f, after)
		}
		w.refused++
		w.log("new %+v: refused", f)
		return
	}
	if ret != actNext {
		w.t.Errorf("new flow %+v: verdict %d", f, ret)
		return
	}
	sp, _ := l4Ports(got)
	f.public = sp
	if f.proto != layers.IPProtocolICMPv4 && (sp < w.min || sp > w.max) {
		w.t.Errorf("new flow %+v left from port %d, outside %d-%d", f, sp, w.min, w.max)
	}
	if got[14+12] != 203 || got[14+15] != 2 {
		w.t.Errorf("new flow %+v left from %v, not the uplink", f, got[14+12:14+16])
	}
	for _, o := range w.open {
		if o.proto == f.proto && o.remote == f.remote && o.rport == f.rport && o.public == f.public {
			w.t.Errorf("new flow %+v took public port %d of open flow %+v to the same remote end", f, f.public, o)
		}
	}
	w.open = append(w.open, f)
	w.log("new %+v", f)
}

// again sends another packet of an open flow: the same public port.
func (w *masqWorld) again(f flow) {
	ret, got := run(w.t, w.o.Out, frame(w.t, false, f.guest, f.remote, f.x(true)))
	sp, _ := l4Ports(got)
	if ret != actNext || sp != f.public {
		w.t.Errorf("open flow %+v: verdict %d, left from port %d", f, ret, sp)
	}
	w.log("again %+v", f)
}

// reply sends the remote end's answer: it reaches the flow's guest.
func (w *masqWorld) reply(f flow) {
	ret, got := run(w.t, w.o.In, frame(w.t, true, f.remote, uplink, f.x(false)))
	var want []byte
	switch f.proto {
	case layers.IPProtocolICMPv4:
		want = frame(w.t, true, f.remote, f.guest, reply(f.gport))
	case layers.IPProtocolTCP:
		want = frame(w.t, true, f.remote, f.guest, tcp(f.rport, f.gport))
	default:
		want = frame(w.t, true, f.remote, f.guest, udp(f.rport, f.gport))
	}
	if ret != actNext || string(got[:len(want)]) != string(want) {
		w.t.Errorf("reply to %+v: verdict %d, not translated back to %v:%d", f, ret, f.guest, f.gport)
	}
	w.replies++
	w.log("reply %+v", f)
}

// expire ages one open flow past any timeout and has pivirtd's expiry
// delete it: its port is free again.
func (w *masqWorld) expire() {
	i := w.rnd.IntN(len(w.open))
	f := w.open[i]
	var k nat.MasqKey
	var v nat.MasqVal
	var keys []nat.MasqKey
	for it := w.o.MasqCT.Iterate(); it.Next(&k, &v); {
		out := k.Dir == nat.MasqOut && nat.Addr4(k.Saddr) == f.guest && nat.Port16(k.Sport) == f.gport && nat.Addr4(k.Daddr) == f.remote
		in := k.Dir == nat.MasqIn && nat.Addr4(k.Saddr) == f.remote && nat.Port16(k.Dport) == f.public
		if uint8(f.proto) == k.Proto && (out || in) && (f.proto == layers.IPProtocolICMPv4 || nat.Port16(k.Sport) == f.rport || nat.Port16(k.Dport) == f.rport) {
			keys = append(keys, k)
		}
	}
	if len(keys) != 2 {
		w.t.Errorf("open flow %+v has %d entries, want 2", f, len(keys))
		return
	}
	for _, k := range keys {
		if err := w.o.MasqCT.Lookup(&k, &v); err != nil {
			w.t.Fatal(err)
		}
		v.SeenNs -= uint64(3 * 3600 * 1e9)
		if err := w.o.MasqCT.Put(&k, &v); err != nil {
			w.t.Fatal(err)
		}
	}
	if n, err := w.o.ExpireFlows(); err != nil || n != 1 {
		w.t.Errorf("expiring %+v: %d flows, %v; want 1", f, n, err)
	}
	w.open = append(w.open[:i], w.open[i+1:]...)
	w.expired++
	w.log("expire %+v", f)
}

// stray sends an inbound packet to the uplink that answers no open flow:
// it passes untranslated.
func (w *masqWorld) stray() {
	f := frame(w.t, true, remotes[w.rnd.IntN(len(remotes))], uplink, udp(uint16(80+w.rnd.IntN(3)), uint16(10+w.rnd.IntN(100))))
	if ret, got := run(w.t, w.o.In, f); ret != actNext || string(got[:len(f)]) != string(f) {
		w.t.Errorf("a stray inbound packet was changed or dropped (verdict %d)", ret)
	}
	w.log("stray")
}
