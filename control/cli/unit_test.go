// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

func TestMain(m *testing.M) {
	now = func() time.Time { return testNow }
	os.Exit(m.Run())
}

func TestHumanDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-5 * time.Second, "<invalid>"},
		{-time.Second, "0s"},
		{0, "0s"},
		{5 * time.Second, "5s"},
		{119 * time.Second, "119s"},
		{2 * time.Minute, "2m"},
		{3*time.Minute + 20*time.Second, "3m20s"},
		{10 * time.Minute, "10m"},
		{179 * time.Minute, "179m"},
		{3 * time.Hour, "3h"},
		{5*time.Hour + 30*time.Minute, "5h30m"},
		{8*time.Hour + 30*time.Minute, "8h"},
		{47 * time.Hour, "47h"},
		{4 * 24 * time.Hour, "4d"},
		{4*24*time.Hour + 3*time.Hour, "4d3h"},
		{30 * 24 * time.Hour, "30d"},
		{3 * 365 * 24 * time.Hour, "3y"},
		{(3*365 + 10) * 24 * time.Hour, "3y10d"},
		{10 * 365 * 24 * time.Hour, "10y"},
	} {
		t.Run(tc.d.String(), func(t *testing.T) {
			if got := HumanDuration(tc.d); got != tc.want {
				t.Errorf("HumanDuration(%v) = %q, want %q", tc.d, got, tc.want)
			}
		})
	}
}

func TestMessage(t *testing.T) {
	const sock = "/run/pivirt/pivirtd.sock"
	dialErr := func(errno syscall.Errno) error {
		return connect.NewError(connect.CodeUnavailable,
			&net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", errno)})
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"not found", connect.NewError(connect.CodeNotFound, errors.New(`dhcplease "x" not found`)),
			`Error from server (NotFound): dhcplease "x" not found`},
		{"invalid", connect.NewError(connect.CodeInvalidArgument, errors.New("spec.hostIP: bad")),
			`Error from server (Invalid): spec.hostIP: bad`},
		{"conflict", connect.NewError(connect.CodeAborted, errors.New("stale resourceVersion")),
			`Error from server (Conflict): stale resourceVersion`},
		{"already exists", connect.NewError(connect.CodeAlreadyExists, errors.New("x exists")),
			`Error from server (AlreadyExists): x exists`},
		{"permission", connect.NewError(connect.CodePermissionDenied, errors.New("reserved label")),
			`Error from server (Forbidden): reserved label`},
		{"precondition", connect.NewError(connect.CodeFailedPrecondition, errors.New("lease is provisioning")),
			`Error from server (Forbidden): lease is provisioning`},
		{"unauthenticated", connect.NewError(connect.CodeUnauthenticated, errors.New("no token")),
			`Error from server (Unauthorized): no token`},
		{"internal", connect.NewError(connect.CodeInternal, errors.New("boom")),
			`Error from server (InternalError): boom`},
		{"wrapped", fmt.Errorf("getting: %w", connect.NewError(connect.CodeNotFound, errors.New("gone"))),
			`Error from server (NotFound): gone`},
		{"no socket", dialErr(syscall.ENOENT), "error: cannot reach pivirtd at " + sock + ": is it running?"},
		{"refused", dialErr(syscall.ECONNREFUSED), "error: cannot reach pivirtd at " + sock + ": is it running?"},
		{"denied", dialErr(syscall.EACCES), "error: cannot reach pivirtd at " + sock + ": permission denied (run as root or as the socket's owner)"},
		{"unavailable from the server", connect.NewError(connect.CodeUnavailable, errors.New("watch ended: the store closed it")),
			`Error from server (ServiceUnavailable): watch ended: the store closed it`},
		{"connection lost", connect.NewError(connect.CodeUnavailable, io.ErrUnexpectedEOF),
			"error: cannot reach pivirtd at " + sock + ": is it running? (unexpected EOF)"},
		{"server error", notFound("leases", "x"), `Error from server (NotFound): dhcplease "x" not found`},
		{"canceled", context.Canceled, "error: interrupted"},
		{"plain", errors.New(`the path "x" does not exist`), `error: the path "x" does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Message(tc.err, sock); got != tc.want {
				t.Errorf("Message() = %q\nwant        %q", got, tc.want)
			}
		})
	}
}

func TestApplyErrorText(t *testing.T) {
	for _, tc := range []struct {
		msg, kind, name string
		reason, trimmed string
	}{
		{`DHCPLease "x" is invalid: spec.ipAddress: 1.2.3 is bad`, "DHCPLease", "x", "Invalid", "spec.ipAddress: 1.2.3 is bad"},
		{`dhcplease "x": spec.ipAddress: bad`, "DHCPLease", "x", "Invalid", "spec.ipAddress: bad"},
		{`resourceVersion 3 is stale`, "DHCPLease", "x", "Conflict", "resourceVersion 3 is stale"},
		{`label pivirt.hu/node is forbidden to ordinary clients`, "NetworkSegment", "y", "Forbidden", "label pivirt.hu/node is forbidden to ordinary clients"},
		{`lease is-provisioning: cannot move`, "DHCPLease", "x", "Forbidden", "lease is-provisioning: cannot move"},
		{`applying dhcplease "x": moving the lease is refused while frozen: blocked`, "DHCPLease", "x", "Forbidden", "moving the lease is refused while frozen: blocked"},
		{`applying networksegment/n: metadata.labels: pivirt.hu/zone is reserved for the cluster tier (pivirt.hu/*): forbidden`, "NetworkSegment", "n",
			"Forbidden", "metadata.labels: pivirt.hu/zone is reserved for the cluster tier (pivirt.hu/*): forbidden"},
		{`applying dhcplease "x" at resourceVersion 3 (stored 4): conflict`, "DHCPLease", "x", "Conflict", `applying dhcplease "x" at resourceVersion 3 (stored 4): conflict`},
	} {
		t.Run(tc.msg, func(t *testing.T) {
			if got := applyErrorReason("", tc.msg); got != tc.reason {
				t.Errorf("reason = %q, want %q", got, tc.reason)
			}
			if got := trimObjectPrefix(tc.msg, tc.kind, tc.name); got != tc.trimmed {
				t.Errorf("trimmed = %q, want %q", got, tc.trimmed)
			}
		})
	}
}

const segmentDoc = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata:
  name: lan
spec:
  networkRef: net-lan
  bridge: br0
  hostIP: 192.168.100.1/24
`

const leaseDoc = `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: web-01
spec:
  network: br0
  macAddress: "52:54:00:12:34:56"
  ipAddress: 192.168.100.10
`

func TestParseManifests(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    string
		want    []string // kind/name@doc
		wantErr string
	}{
		{"one yaml", segmentDoc, []string{"NetworkSegment/lan@1"}, ""},
		{"multi doc", segmentDoc + "---\n" + leaseDoc, []string{"NetworkSegment/lan@1", "DHCPLease/web-01@2"}, ""},
		{"leading separator and empty docs", "---\n# only a comment\n---\n" + segmentDoc + "---\n\n---\n" + leaseDoc + "...\n",
			[]string{"NetworkSegment/lan@1", "DHCPLease/web-01@2"}, ""},
		{"separator with comment", segmentDoc + "--- # next\n" + leaseDoc, []string{"NetworkSegment/lan@1", "DHCPLease/web-01@2"}, ""},
		{"crlf", strings.ReplaceAll(segmentDoc+"---\n"+leaseDoc, "\n", "\r\n"), []string{"NetworkSegment/lan@1", "DHCPLease/web-01@2"}, ""},
		{"json object", `{"apiVersion":"pivirt.hu/v1","kind":"DHCPLease","metadata":{"name":"a"},"spec":{}}`, []string{"DHCPLease/a@1"}, ""},
		{"json stream", `{"kind":"DHCPLease","metadata":{"name":"a"}}
{"kind":"DHCPLease","metadata":{"name":"b"}}`, []string{"DHCPLease/a@1", "DHCPLease/b@2"}, ""},
		{"json list", `{"kind":"List","items":[{"kind":"DHCPLease","metadata":{"name":"a"}},{"kind":"VPCRouter","metadata":{"name":"r"}}]}`,
			[]string{"DHCPLease/a@1", "VPCRouter/r@1"}, ""},
		{"yaml list", "kind: List\nitems:\n- kind: DHCPLease\n  metadata: {name: a}\n", []string{"DHCPLease/a@1"}, ""},
		{"json array", `[{"kind":"DHCPLease","metadata":{"name":"a"}}]`, []string{"DHCPLease/a@1"}, ""},
		{"empty file", "\n# nothing\n", nil, ""},
		{"bad yaml in second doc", segmentDoc + "---\nkind: DHCPLease\nmetadata:\n  name: [x\n", nil,
			"parsing in.yaml: document 2 (line 10): "},
		{"no kind", "metadata: {name: a}\n", nil, "parsing in.yaml: document 1: kind not set"},
		{"no name", segmentDoc + "---\nkind: DHCPLease\nspec: {}\n", nil, "parsing in.yaml: document 2: DHCPLease without metadata.name"},
		{"scalar document", "just a string\n", nil, "parsing in.yaml: document 1: want an object"},
		{"bad list item", `{"kind":"List","items":[{"kind":"DHCPLease","metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}`, nil,
			"parsing in.yaml: document 1, item 2: kind not set"},
		{"bad json", `{"kind":"DHCPLease",}`, nil, "parsing in.yaml: document 1: invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := ParseManifests("in.yaml", []byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want prefix %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range ms {
				got = append(got, fmt.Sprintf("%s/%s@%d", m.Kind, m.Name, m.Doc))
				if m.Source != "in.yaml" || len(m.JSON) == 0 || m.JSON[0] != '{' {
					t.Errorf("manifest %+v: want source in.yaml and JSON", m)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReadManifests(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	obj := func(kind, name string) string { return fmt.Sprintf("kind: %s\nmetadata: {name: %s}\n", kind, name) }
	write("b.yaml", obj("DHCPLease", "b"))
	write("a.yml", obj("DHCPLease", "a"))
	write("c.json", `{"kind":"DHCPLease","metadata":{"name":"c"}}`)
	write("notes.txt", "not a manifest")
	write("sub/d.yaml", obj("DHCPLease", "d"))
	write("bad/x.yaml", "kind: [\n")

	for _, tc := range []struct {
		name      string
		paths     []string
		recursive bool
		stdin     string
		want      string
		wantErr   string
	}{
		{"dir sorted, no subdirs", []string{dir}, false, "", "a b c", ""},
		{"dir recursive", []string{filepath.Join(dir, "sub"), dir + "/a.yml"}, true, "", "d a", ""},
		{"stdin and file", []string{"-", dir + "/c.json"}, false, obj("VPCRouter", "r"), "r c", ""},
		{"missing path", []string{dir + "/nope.yaml"}, false, "", "", `the path "` + dir + `/nope.yaml" does not exist`},
		{"bad file named", []string{dir + "/bad"}, false, "", "", "parsing " + dir + "/bad/x.yaml: document 1 (line 1): "},
		{"no -f", nil, false, "", "", "must give -f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := ReadManifests(tc.paths, tc.recursive, strings.NewReader(tc.stdin))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, m := range ms {
				names = append(names, m.Name)
			}
			if got := strings.Join(names, " "); got != tc.want {
				t.Errorf("names = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWatchStart(t *testing.T) {
	obj := func(rv string) Item {
		return Item{Obj: &pivirtv1.Object{Metadata: pivirtv1.ObjectMeta{ResourceVersion: rv}}}
	}
	for _, tc := range []struct {
		name  string
		items []Item
		want  int64
	}{
		{"none", nil, 0},
		{"one", []Item{obj("7")}, 7},
		{"oldest of several", []Item{obj("9"), obj("5"), obj("12")}, 5},
		{"opaque version watches from now", []Item{obj("5"), obj("abc")}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := watchStart(tc.items); got != tc.want {
				t.Errorf("watchStart() = %d, want %d", got, tc.want)
			}
		})
	}
}
