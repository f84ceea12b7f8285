// SPDX-License-Identifier: Apache-2.0

package inspectcli

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
)

func TestPrintLeases(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	db := &inspectv1.LeasesResponse{Seq: 42, Pending: 1,
		Leases: []*inspectv1.LeaseRecord{
			{Segment: "vm-net", SegmentId: 0x1a2b3c4d, Mac: "52:54:00:00:00:01", Ip: "192.168.100.101", State: "bound", Hostname: "web01",
				ExpiresUnix: now.Add(time.Hour).Unix(), LastAckUnix: now.Add(-12 * time.Second).Unix(), Seq: 41, Store: "pending"},
			{Segment: "vm-net", SegmentId: 0x1a2b3c4d, Mac: "52:54:00:00:00:02", Ip: "192.168.100.102", State: "held",
				ExpiresUnix: now.Add(-time.Minute).Unix(), LastAckUnix: now.Add(-time.Hour).Unix(), Seq: 7, Store: "synced"},
			{SegmentId: 0x0000beef, Mac: "52:54:00:00:00:03", Ip: "10.0.0.9", State: "released",
				ExpiresUnix: now.Add(time.Minute).Unix(), LastAckUnix: now.Add(-time.Minute).Unix(), Seq: 40, Store: "operator"},
		},
		Probations: []*inspectv1.LeaseProbation{{Segment: "vm-net", SegmentId: 0x1a2b3c4d, Ip: "192.168.100.150", UntilUnix: now.Add(24 * time.Hour).Unix()}},
	}
	for _, tc := range []struct {
		name string
		db   *inspectv1.LeasesResponse
		want string
	}{
		{"empty", &inspectv1.LeasesResponse{}, "Lease database: 0 bindings, 0 ends the store may lack, 0 addresses on probation; last change 0, 0 changes waiting for the store\n"},
		{"bindings, an end, a probation", db, `Lease database: 2 bindings, 1 end the store may lack, 1 address on probation; last change 42, 1 change waiting for the store
SEGMENT   SEGMENT ID   MAC                 IP                STATE      EXPIRES     LAST ACK     SEQ   STORE      HOSTNAME
vm-net    0x1a2b3c4d   52:54:00:00:00:01   192.168.100.101   bound      in 1h0m0s   12s ago      41    pending    web01
vm-net    0x1a2b3c4d   52:54:00:00:00:02   192.168.100.102   held       1m0s ago    1h0m0s ago   7     synced     -
-         0x0000beef   52:54:00:00:00:03   10.0.0.9          released   in 1m0s     1m0s ago     40    operator   -

DECLINE probations:
SEGMENT   SEGMENT ID   IP                UNTIL
vm-net    0x1a2b3c4d   192.168.100.150   in 24h0m0s
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printLeases(&b, tc.db, now)
			if d := cmp.Diff(tc.want, b.String()); d != "" {
				t.Errorf("text (-want +got):\n%s", d)
			}
		})
	}
	// -o json: the proto's JSON mapping, every field present.
	var b bytes.Buffer
	if err := writeProto(&b, db, "json"); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Leases []map[string]any `json:"leases"`
		Seq    string           `json:"seq"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, b.String())
	}
	if len(got.Leases) != 3 || got.Leases[2]["segment"] != "" || got.Leases[0]["store"] != "pending" || got.Seq != "42" {
		t.Errorf("-o json: %s", b.String())
	}
}
