// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	tunnel = "tunnel" // gb on n2: ga → br-ov → pvx4646 → underlay → pvx4646 → br-ov → gb
	bridge = "bridge" // gb on n1 next to ga: ga → br-ov → gb
)

// sample is one placement's figures in one round.
type sample struct {
	Mode  string
	Round int
	// TCP, one stream.
	TCPbps    float64 // iperf3's receiver
	TCPRetr   int
	TCPBusy   float64 // busy cores (of 2) of the whole machine during the run, /proc/stat
	TCPCPU    float64 // CPU seconds of the bench's tasks (see benchCPU) during the run
	TCPSecs   float64
	TCPDevRxB uint64 // bytes gb's interface received (a check on iperf3)
	// UDP, 64-byte payloads.
	UDPSent    uint64  // iperf3 sender's datagrams
	UDPRecv    uint64  // iperf3 receiver's datagrams
	UDPSecs    float64 // iperf3 run length
	UDPDevRx   uint64  // packets gb's interface received (socket drops included)
	UDPUnderTx uint64  // packets n1's underlay sent (≈ UDPDevRx across the tunnel, ≈ 0 on one bridge)
	UDPBusy    float64 // busy cores of the machine during the run
	UDPCPU     float64 // CPU seconds of the bench's tasks during the run, the sum of:
	UDPClient  float64 //   the iperf3 client's (its rusage)
	UDPServer  float64 //   the iperf3 server's (/proc/PID/stat)
	UDPKsoft   float64 //   the ksoftirqd threads' (/proc/PID/stat)
	// iperf3's own view of its processes' CPU (cpu_utilization_percent
	// times the run length), a check on UDPClient and UDPServer.
	UDPIperfClient, UDPIperfServer float64
	UDPSoftirq                     float64 // softirq CPU seconds of the machine during the run (/proc/stat)
	IdleBusy                       float64 // busy cores in the second before the round: the other tenants
	Load1                          float64 // /proc/loadavg before the round
}

// nsPerPacket is the bench's CPU time per packet that reached gb's
// interface.
func (s sample) nsPerPacket() float64 { return perPkt(s, s.UDPCPU) }

// perPkt is CPU seconds per packet that reached gb's interface, in ns.
func perPkt(s sample, cpu float64) float64 {
	if s.UDPDevRx == 0 {
		return 0
	}
	return cpu * 1e9 / float64(s.UDPDevRx)
}

// place plugs gb into the node mode asks for: a new veth pair (as a VM
// that migrates gets a new tap), its port guarded by that node's pivirtd.
func (b *bench) place(ctx context.Context, mode string) error {
	target, node := b.n2, "n2"
	if mode == bridge {
		target, node = b.n1, "n1"
	}
	port := "pb" + node[1:]
	if b.gbOn == target {
		return nil
	}
	if b.gbOn != "" {
		if err := ip("-n", b.gbOn, "link", "del", b.gbPort); err != nil {
			return err
		}
		b.gbOn = ""
	}
	if err := ipAll(
		[]string{"link", "add", "eth0", "netns", b.gb, "address", macB, "mtu", guestMTU, "type", "veth", "peer", "name", port, "netns", target},
		[]string{"-n", b.gb, "addr", "add", ipB + "/16", "dev", "eth0"},
		[]string{"-n", b.gb, "link", "set", "eth0", "up"},
		[]string{"-n", target, "link", "set", port, "mtu", guestMTU, "master", "br-ov", "up"},
	); err != nil {
		return err
	}
	b.gbOn, b.gbPort = target, port
	if err := b.waitGuarded(ctx, node, "ovb-gb-"+node, target, port); err != nil {
		return err
	}
	// gb speaks first, so n1's bridge learns its MAC where it is now.
	return poll(ctx, 20*time.Second, "gb on "+node+" reaching ga", func() (bool, error) {
		_, err := inNS(ctx, b.gb, "ping", "-c", "1", "-W", "1", ipA)
		if err == nil {
			_, err = inNS(ctx, b.ga, "ping", "-c", "1", "-W", "1", ipB)
		}
		return err == nil, err
	})
}

// throughput runs the A/B rounds and prints medians and spreads.
func (b *bench) throughput(ctx context.Context) error {
	var all []sample
	rows, err := os.Create(filepath.Join(b.c.out, "rounds.json"))
	if err != nil {
		return err
	}
	defer rows.Close()
	enc := json.NewEncoder(rows)
	for r := range b.c.rounds {
		order := []string{tunnel, bridge}
		if r%2 == 1 {
			order = []string{bridge, tunnel}
		}
		for _, mode := range order {
			if err := b.place(ctx, mode); err != nil {
				return fmt.Errorf("round %d, %s: %w", r, mode, err)
			}
			s, err := b.measure(ctx, mode, r)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r, mode, err)
			}
			if err := enc.Encode(s); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "round %d %-6s TCP %.2f Gbit/s (retr %d, bench %.2f cores)  UDP64 recv %.0f pps dev %.0f pps under %d  bench %.2f cores, %.0f ns/pkt  (machine %.2f cores, others before %.2f, load %.2f)\n",
				r, mode, s.TCPbps/1e9, s.TCPRetr, s.TCPCPU/s.TCPSecs, float64(s.UDPRecv)/s.UDPSecs, float64(s.UDPDevRx)/s.UDPSecs, s.UDPUnderTx,
				s.UDPCPU/s.UDPSecs, s.nsPerPacket(), s.UDPBusy, s.IdleBusy, s.Load1)
			all = append(all, s)
		}
	}
	b.report(all)
	// The guard was on the ports all along: how it is attached, and what
	// it counted on ga's port (its status, as of the last sync).
	b.sayf("guard attach: %v", b.attach)
	st, err := b.portStatus(ctx, "n1", "ovb-ga")
	if err != nil {
		return err
	}
	b.sayf("guard counters of ovb-ga (ga's port): %v", st.Counters)
	return nil
}

func (b *bench) measure(ctx context.Context, mode string, round int) (sample, error) {
	s := sample{Mode: mode, Round: round}
	var err error
	if s.Load1, err = load1(); err != nil {
		return s, err
	}
	// The other tenants' share: one quiet second before the round.
	c0, err := readCPU()
	if err != nil {
		return s, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return s, ctx.Err()
	case <-time.After(time.Second):
	}
	c1, err := readCPU()
	if err != nil {
		return s, err
	}
	s.IdleBusy = c1.busySince(c0) / time.Since(t0).Seconds()
	secs := fmt.Sprint(int(b.c.dur.Seconds()))
	tag := fmt.Sprintf("r%d-%s", round, mode)

	// TCP.
	rx0, err := readSys(ctx, b.gb, "eth0", "statistics/rx_bytes")
	if err != nil {
		return s, err
	}
	var tcp iperfResult
	tcpRun, err := b.iperf(ctx, tag+"-tcp", &tcp, "-t", secs)
	if err != nil {
		return s, err
	}
	rx1, err := readSys(ctx, b.gb, "eth0", "statistics/rx_bytes")
	if err != nil {
		return s, err
	}
	s.TCPbps, s.TCPRetr, s.TCPDevRxB = tcp.End.SumReceived.BitsPerSecond, tcp.End.SumSent.Retransmits, rx1-rx0
	s.TCPBusy, s.TCPCPU, s.TCPSecs = tcpRun.busy/tcpRun.wall, tcpRun.cpu, tcpRun.wall

	// UDP, 64-byte payloads.
	counters := func() (dev, under uint64, err error) {
		if dev, err = readSys(ctx, b.gb, "eth0", "statistics/rx_packets"); err != nil {
			return 0, 0, err
		}
		under, err = readSys(ctx, b.n1, "eth-u", "statistics/tx_packets")
		return dev, under, err
	}
	dev0, under0, err := counters()
	if err != nil {
		return s, err
	}
	var udp iperfResult
	udpRun, err := b.iperf(ctx, tag+"-udp", &udp, "-u", "-l", "64", "-b", b.c.udpRate, "-t", secs)
	if err != nil {
		return s, err
	}
	dev1, under1, err := counters()
	if err != nil {
		return s, err
	}
	s.UDPSent = udp.End.SumSent.Packets
	s.UDPRecv = udp.End.SumReceived.Bytes / 64
	s.UDPSecs = udp.End.SumReceived.Seconds
	s.UDPDevRx, s.UDPUnderTx = dev1-dev0, under1-under0
	// Over the iperf3 process's wall time, which is the run plus its
	// start and end (a few ms).
	s.UDPBusy, s.UDPCPU, s.UDPSoftirq = udpRun.busy/udpRun.wall, udpRun.cpu, udpRun.softirq
	s.UDPClient, s.UDPServer, s.UDPKsoft = udpRun.client, udpRun.server, udpRun.ksoftirqd
	s.UDPIperfClient = udp.End.CPU.HostTotal / 100 * s.UDPSecs
	s.UDPIperfServer = udp.End.CPU.RemoteTotal / 100 * s.UDPSecs
	return s, nil
}

// iperfResult is the part of iperf3 -J the bench reads.
type iperfResult struct {
	End struct {
		SumSent struct {
			Packets     uint64 `json:"packets"`
			Retransmits int    `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			Seconds       float64 `json:"seconds"`
			Bytes         uint64  `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		CPU struct {
			HostTotal   float64 `json:"host_total"`
			RemoteTotal float64 `json:"remote_total"`
		} `json:"cpu_utilization_percent"`
	} `json:"end"`
	Error string `json:"error"`
}

// cost is what one iperf3 run cost.
type cost struct {
	wall                      float64 // seconds
	busy                      float64 // the machine's busy CPU seconds
	softirq                   float64 // of which softirq
	cpu                       float64 // the bench's CPU seconds: client + server + ksoftirqd
	client, server, ksoftirqd float64
}

// iperf runs the iperf3 client in ga on core 0 (the server in gb is on
// core 1) and keeps its JSON.
func (b *bench) iperf(ctx context.Context, tag string, res *iperfResult, args ...string) (cost, error) {
	var r cost
	m0, err := readCPU()
	if err != nil {
		return r, err
	}
	srv0, ks0, err := b.benchCPU()
	if err != nil {
		return r, err
	}
	w0 := time.Now()
	rctx, cancel := context.WithTimeout(ctx, b.c.dur+30*time.Second)
	defer cancel()
	// ip netns exec and taskset exec iperf3 in their own process, so the
	// command's rusage is iperf3's.
	cmd := exec.CommandContext(rctx, "ip", append([]string{"netns", "exec", b.ga, "taskset", "-c", "0", "iperf3", "-c", ipB, "-p", iperfPort, "-J"}, args...)...)
	out, err := cmd.CombinedOutput()
	r.wall = time.Since(w0).Seconds()
	m1, merr := readCPU()
	srv1, ks1, terr := b.benchCPU()
	if werr := os.WriteFile(filepath.Join(b.c.out, "iperf3-"+tag+".json"), out, 0o644); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return r, fmt.Errorf("iperf3 %s: %w: %s", tag, err, lastLines(out, 5))
	}
	if err := errors.Join(merr, terr); err != nil {
		return r, err
	}
	if err := json.Unmarshal(out, res); err != nil {
		return r, fmt.Errorf("iperf3 %s: decoding its JSON: %w", tag, err)
	}
	if res.Error != "" {
		return r, fmt.Errorf("iperf3 %s: %s", tag, res.Error)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return r, fmt.Errorf("iperf3 %s: no rusage", tag)
	}
	client := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	r.busy, r.softirq = float64(m1.busy-m0.busy)/userHZ, float64(m1.softirq-m0.softirq)/userHZ
	r.client, r.server, r.ksoftirqd = client.Seconds(), float64(srv1-srv0)/userHZ, float64(ks1-ks0)/userHZ
	r.cpu = r.client + r.server + r.ksoftirqd
	return r, nil
}

// benchCPU is the CPU time, in ticks, the iperf3 server and the softirq
// threads have used so far. With tick accounting (no
// CONFIG_IRQ_TIME_ACCOUNTING) softirq work done on the back of a task's
// system call, as veth and bridge forwarding of a sender's packet is, is
// that task's time, and softirq work deferred to ksoftirqd is its; so the
// client's, the server's and ksoftirqd's time hold nearly all the path's
// cost, and little of the other tenants'.
func (b *bench) benchCPU() (server, ksoftirqd uint64, err error) {
	if server, err = taskTicks(b.serverPID); err != nil {
		return 0, 0, err
	}
	for _, pid := range b.ksoftirqd {
		v, err := taskTicks(pid)
		if err != nil {
			return 0, 0, err
		}
		ksoftirqd += v
	}
	return server, ksoftirqd, nil
}

// taskTicks is utime+stime of a process from /proc/PID/stat.
func taskTicks(pid int) (uint64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	v, err := parseTaskTicks(string(raw))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return v, nil
}

// parseTaskTicks reads utime+stime from a /proc/PID/stat line: "pid
// (comm) state ppid ...", utime and stime its fields 14 and 15, the 12th
// and 13th after the comm (which may hold ") " itself: the last one ends it).
func parseTaskTicks(line string) (uint64, error) {
	i := strings.LastIndex(line, ") ")
	if i < 0 {
		return 0, fmt.Errorf("no comm in %q", line)
	}
	f := strings.Fields(line[i+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the comm in %q, want 13 or more", len(f), line)
	}
	ut, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	st, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return ut + st, nil
}

// findKsoftirqd returns the PIDs of the ksoftirqd threads.
func findKsoftirqd() ([]int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		if err == nil && strings.HasPrefix(string(comm), "ksoftirqd/") {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return nil, errors.New("no ksoftirqd thread in /proc")
	}
	return pids, nil
}

// cpuTimes is the machine's line of /proc/stat, in USER_HZ ticks.
type cpuTimes struct{ busy, softirq uint64 }

const userHZ = 100 // sysconf(_SC_CLK_TCK) on Linux

func readCPU() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	c, err := parseCPU(string(b))
	if err != nil {
		return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
	}
	return c, nil
}

// parseCPU reads the machine's line, the first, of /proc/stat: busy is
// user, nice, system, irq, softirq and steal; idle and iowait are not.
func parseCPU(stat string) (cpuTimes, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("first line %q, want cpu and 8 or more counters", line)
	}
	var v [8]uint64 // user nice system idle iowait irq softirq steal
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("field %d: %w", i+1, err)
		}
		v[i] = n
	}
	busy := v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return cpuTimes{busy: busy, softirq: v[6]}, nil
}

// busySince is the busy CPU seconds since c0.
func (c cpuTimes) busySince(c0 cpuTimes) float64 { return float64(c.busy-c0.busy) / userHZ }

func load1() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	var l float64
	_, err = fmt.Sscan(string(b), &l)
	return l, err
}

// stat is a median with its spread over the rounds.
type stat struct{ med, lo, hi float64 }

func statOf(v []float64) stat {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v) == 0 {
		return stat{}
	}
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return stat{med: m, lo: v[0], hi: v[len(v)-1]}
}

func (s stat) String() string { return fmt.Sprintf("%s [%s–%s]", num(s.med), num(s.lo), num(s.hi)) }

// num prints three significant digits without an exponent below 10^7.
func num(v float64) string {
	if math.Abs(v) >= 1000 && math.Abs(v) < 1e7 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func (b *bench) report(all []sample) {
	pick := func(mode string, f func(sample) float64) []float64 {
		var v []float64
		for _, s := range all {
			if s.Mode == mode {
				v = append(v, f(s))
			}
		}
		return v
	}
	// ratio pairs tunnel with bridge of the same round.
	ratio := func(f func(sample) float64) stat {
		var v []float64
		for r := range b.c.rounds {
			var t, br float64
			for _, s := range all {
				if s.Round == r && s.Mode == tunnel {
					t = f(s)
				} else if s.Round == r {
					br = f(s)
				}
			}
			if br != 0 {
				v = append(v, t/br)
			}
		}
		return statOf(v)
	}
	figures := []struct {
		name    string
		f       func(sample) float64
		noRatio bool // the bridge's is about 0
	}{
		{"TCP Gbit/s (iperf3 receiver)", func(s sample) float64 { return s.TCPbps / 1e9 }, false},
		{"TCP Gbit/s (gb's rx_bytes)", func(s sample) float64 { return float64(s.TCPDevRxB) * 8 / b.c.dur.Seconds() / 1e9 }, false},
		{"TCP bench cores", func(s sample) float64 { return s.TCPCPU / s.TCPSecs }, false},
		{"TCP bench CPU ms per GB", func(s sample) float64 { return s.TCPCPU * 1e3 / (float64(s.TCPDevRxB) / 1e9) }, false},
		{"TCP machine busy cores", func(s sample) float64 { return s.TCPBusy }, false},
		{"UDP64 kpps received (iperf3)", func(s sample) float64 { return float64(s.UDPRecv) / s.UDPSecs / 1e3 }, false},
		{"UDP64 kpps at gb's interface", func(s sample) float64 { return float64(s.UDPDevRx) / s.UDPSecs / 1e3 }, false},
		{"UDP64 kpps sent (iperf3)", func(s sample) float64 { return float64(s.UDPSent) / s.UDPSecs / 1e3 }, false},
		{"UDP64 kpps on the underlay", func(s sample) float64 { return float64(s.UDPUnderTx) / s.UDPSecs / 1e3 }, true},
		{"UDP64 bench cores", func(s sample) float64 { return s.UDPCPU / s.UDPSecs }, false},
		{"UDP64 bench ns CPU/packet", func(s sample) float64 { return s.nsPerPacket() }, false},
		{"  of which client ns/packet", func(s sample) float64 { return perPkt(s, s.UDPClient) }, false},
		{"  of which server ns/packet", func(s sample) float64 { return perPkt(s, s.UDPServer) }, false},
		{"  of which ksoftirqd ns/packet", func(s sample) float64 { return perPkt(s, s.UDPKsoft) }, false},
		{"  iperf3's own: client ns/packet", func(s sample) float64 { return perPkt(s, s.UDPIperfClient) }, false},
		{"  iperf3's own: server ns/packet", func(s sample) float64 { return perPkt(s, s.UDPIperfServer) }, false},
		{"UDP64 machine busy cores", func(s sample) float64 { return s.UDPBusy }, false},
		{"UDP64 machine softirq cores", func(s sample) float64 { return s.UDPSoftirq / s.UDPSecs }, false},
		{"others' busy cores before", func(s sample) float64 { return s.IdleBusy }, false},
		{"load average (1 min)", func(s sample) float64 { return s.Load1 }, false},
	}
	b.sayf("overlay: %d rounds ABBA, iperf3 %s per run, sender core 0, receiver core 1; median [min–max]", b.c.rounds, b.c.dur)
	b.sayf("%-36s %-26s %-26s %s", "", "tunnel (gb on n2)", "bridge (gb on n1)", "tunnel/bridge (per round)")
	for _, fg := range figures {
		r := ratio(fg.f).String()
		if fg.noRatio {
			r = "-"
		}
		b.sayf("%-36s %-26s %-26s %s", fg.name, statOf(pick(tunnel, fg.f)), statOf(pick(bridge, fg.f)), r)
	}
}
