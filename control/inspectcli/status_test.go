// SPDX-License-Identifier: Apache-2.0

package inspectcli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
)

func TestWriteStatus(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	bolt := &inspectv1.StatusResponse{
		Version: "0.1.0", Revision: "abc1234", GoVersion: "go1.26.8", Node: "hv1",
		StartedUnix: now.Add(-90 * time.Second).Unix(), Ready: true, Bpffs: "/sys/fs/bpf/pivirt",
		Store: &inspectv1.StoreStatus{Backend: "bbolt", Path: "/var/lib/pivirt/state.db", Revision: 42},
		Controllers: []*inspectv1.ControllerStatus{
			{Name: "segments", Ready: true, Passes: 3, LastPassUnixMs: now.Add(-2 * time.Second).UnixMilli()},
			{Name: "guard", Ready: true, Passes: 7, LastPassUnixMs: now.Add(-250 * time.Millisecond).UnixMilli()},
		},
		Maps: []*inspectv1.MapInfo{
			{Name: "pv_ports_v2", Type: "Hash", MaxEntries: 4096, Entries: 1},
			{Name: "pv_nat_stats", Type: "PerCPUHash", MaxEntries: 4096, Entries: -1},
			{Name: "pv_counters_v3", Type: "Array", MaxEntries: 65537, Entries: 65537},
		},
		Ports:        []*inspectv1.PortStatus{{Interface: "tap-web01-0", Hook: "xdp", Mode: "driver", Acl: true}},
		Responders:   []*inspectv1.ResponderStatus{{Segment: "lab", Bridge: "virbr10", HostIp: "192.168.100.1/24", Size: 100, Free: 98, Bound: 1, Reserved: 1, Received: 4}},
		LeaseJournal: &inspectv1.LeaseJournalStatus{Dir: "/var/lib/pivirt/dhcp-journal", Pending: 1},
	}
	etcd := &inspectv1.StatusResponse{
		Version: "dev", Node: "gw1", Bpffs: "/sys/fs/bpf/pivirt",
		Store: &inspectv1.StoreStatus{Backend: "etcd", Endpoints: []string{"http://10.0.0.1:2379", "http://10.0.0.2:2379"}, Prefix: "/pivirt/", Revision: 9,
			Members: []*inspectv1.EtcdMember{
				{Name: "e1", Id: "8e9e05c52164694d", ClientUrls: []string{"http://10.0.0.1:2379"}, Healthy: true, Leader: true, DbSize: 20480},
				{Name: "e2", Id: "91bc3c398fb3c146", ClientUrls: []string{"http://10.0.0.2:2379"}, Error: "context deadline exceeded"},
			}},
		LeaseJournal: &inspectv1.LeaseJournalStatus{Dir: "/var/lib/pivirt/dhcp-journal", Pending: 12, Skipped: 1, WriteErrors: 7,
			Failing: "journaling 1 lease changes: write /var/lib/pivirt/dhcp-journal/0000000000000001.wal: no space left on device", FailingSinceUnix: now.Add(-3 * time.Minute).Unix()},
		Controllers: []*inspectv1.ControllerStatus{
			{Name: "guard", Passes: 1, LastPassUnixMs: now.Add(-5 * time.Second).UnixMilli(), LastError: "attaching xdp to tap0: no such device\nattaching xdp to tap1: no such device"},
			{Name: "overlay"},
		},
	}
	for _, tc := range []struct {
		name   string
		st     *inspectv1.StatusResponse
		output string
		want   string   // the whole output, when set
		has    []string // else substrings it must hold
	}{
		{name: "bbolt, ready", st: bolt, want: `Node:         hv1
Version:      0.1.0 (revision abc1234, go1.26.8)
Started:      2026-12-05T11:58:30Z (1m30s ago)
Ready:        yes: every controller's first pass is done
Store:        bbolt /var/lib/pivirt/state.db, revision 42, ok
Journal:      /var/lib/pivirt/dhcp-journal, 1 change waiting for the store, 0 failed writes, ok
Controllers:  2/2 ready
  NAME       READY   PASSES   LAST PASS   ERROR
  segments   yes     3        2s ago      -
  guard      yes     7        250ms ago   -
Maps:         3 pinned under /sys/fs/bpf/pivirt
  NAME             TYPE         ENTRIES   MAX     FILL
  pv_ports_v2      Hash         1         4096    0.0%
  pv_nat_stats     PerCPUHash   ?         4096    -
  pv_counters_v3   Array        65537     65537   -
Ports:        1 guarded
  INTERFACE     HOOK   MODE     ACL
  tap-web01-0   xdp    driver   yes
Responders:   1 DHCP
  SEGMENT   BRIDGE    HOST IP            BOUND   OFFERED   RESERVED   FREE   SIZE   RECEIVED
  lab       virbr10   192.168.100.1/24   1       0         1          98     100    4
`},
		{name: "etcd, a member down, a loop failing", st: etcd, has: []string{
			"Ready:        no: 0 of 2 controllers have done their first pass\n",
			"Store:        etcd http://10.0.0.1:2379,http://10.0.0.2:2379, prefix /pivirt/, revision 9, ok\n",
			"  e1       8e9e05c52164694d   http://10.0.0.1:2379   yes      20480     ok\n",
			"  e2       91bc3c398fb3c146   http://10.0.0.2:2379   no       0         unhealthy: context deadline exceeded\n",
			"  guard     no      1        5s ago      attaching xdp to tap0: no such device; attaching xdp to tap1: no such device\n",
			"  overlay   no      0        never       -\n",
			"Ports:        0 guarded\nResponders:   0 DHCP\n",
			"Journal:      /var/lib/pivirt/dhcp-journal, 12 changes waiting for the store, 1 damaged part skipped at start, 7 failed writes, " +
				"cannot be written since 2026-12-05T11:57:00Z (3m0s ago): journaling 1 lease changes: write /var/lib/pivirt/dhcp-journal/0000000000000001.wal: no space left on device\n",
		}},
		{name: "json", st: bolt, output: "json", has: []string{`"node": "hv1"`, `"ready": true`, `"interface": "tap-web01-0"`, `"lastError": ""`}},
		{name: "yaml", st: etcd, output: "yaml", has: []string{"node: gw1\n", "  backend: etcd\n", "leader: true", "ports: []\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeStatus(&b, tc.st, tc.output, now); err != nil {
				t.Fatal(err)
			}
			got := b.String()
			if tc.want != "" {
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("status (-want +got):\n%s", d)
				}
			}
			for _, s := range tc.has {
				if !strings.Contains(got, s) {
					t.Errorf("status lacks %q:\n%s", s, got)
				}
			}
			// The structured forms are one document that reads back.
			var v map[string]any
			switch tc.output {
			case "json":
				if err := json.Unmarshal(b.Bytes(), &v); err != nil {
					t.Errorf("not JSON: %v", err)
				}
			case "yaml":
				if err := yaml.Unmarshal(b.Bytes(), &v); err != nil {
					t.Errorf("not YAML: %v", err)
				}
			}
		})
	}
}
