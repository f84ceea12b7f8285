// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
)

// nodesServer answers ListNodes with two nodes: n1 Ready, n2 lost.
type nodesServer struct {
	*fakeServer
}

func (nodesServer) ListNodes(context.Context, *connect.Request[resourcev1.ListNodesRequest]) (*connect.Response[resourcev1.ListNodesResponse], error) {
	return connect.NewResponse(&resourcev1.ListNodesResponse{Nodes: []*resourcev1.Node{
		{Name: "n1", Vtep: "10.99.1.1", Version: "v1.2", LastSeenUnix: testNow.Add(-2 * time.Second).Unix(), Ready: true, TtlSeconds: 15},
		{Name: "n2", Version: "v1.2", LastSeenUnix: testNow.Add(-90 * time.Second).Unix(), TtlSeconds: 15},
	}}), nil
}

func TestGetNodes(t *testing.T) {
	f := nodesServer{newFakeServer()}
	sock := startFakeHandler(t, f)
	for _, tc := range []struct {
		name     string
		args     []string
		wantOut  string
		wantErr  string
		wantCode int
	}{
		{name: "table", args: []string{"get", "nodes"},
			wantOut: "NAME   VTEP        VERSION   LAST-SEEN   READY\n" +
				"n1     10.99.1.1   v1.2      2s ago      True\n" +
				"n2     <none>      v1.2      90s ago     False\n"},
		{name: "wide, one node, alias", args: []string{"get", "no", "n2", "-o", "wide"},
			wantOut: "NAME   VTEP     VERSION   LAST-SEEN   READY   TTL\n" +
				"n2     <none>   v1.2      90s ago     False   15s\n"},
		{name: "names", args: []string{"get", "Node", "-o", "name"}, wantOut: "node/n1\nnode/n2\n"},
		{name: "json of one", args: []string{"get", "node", "n1", "-o", "json"},
			wantOut: `{
    "apiVersion": "pivirt.hu/v1",
    "kind": "Node",
    "metadata": {
        "name": "n1"
    },
    "status": {
        "vtep": "10.99.1.1",
        "version": "v1.2",
        "lastSeen": "` + testNow.Add(-2*time.Second).UTC().Format(time.RFC3339) + `",
        "ready": true,
        "ttlSeconds": 15
    }
}
`},
		{name: "yaml list", args: []string{"get", "nodes", "-o", "yaml"},
			wantOut: "apiVersion: pivirt.hu/v1\nitems:\n" +
				"- apiVersion: pivirt.hu/v1\n  kind: Node\n  metadata:\n    name: n1\n  status:\n    lastSeen: \"" + testNow.Add(-2*time.Second).UTC().Format(time.RFC3339) + "\"\n    ready: true\n    ttlSeconds: 15\n    version: v1.2\n    vtep: 10.99.1.1\n" +
				"- apiVersion: pivirt.hu/v1\n  kind: Node\n  metadata:\n    name: n2\n  status:\n    lastSeen: \"" + testNow.Add(-90*time.Second).UTC().Format(time.RFC3339) + "\"\n    ready: false\n    ttlSeconds: 15\n    version: v1.2\n" +
				"kind: List\n"},
		{name: "missing", args: []string{"get", "nodes", "n1", "n9"},
			wantOut:  "NAME   VTEP        VERSION   LAST-SEEN   READY\nn1     10.99.1.1   v1.2      2s ago      True\n",
			wantErr:  "Error from server (NotFound): nodes \"n9\" not found\n",
			wantCode: 1},
		{name: "no selector", args: []string{"get", "nodes", "-l", "a=b"},
			wantErr: "error: get nodes takes no selector (-l, --field-selector) and no --watch\n", wantCode: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := run(t, sock, "", tc.args...)
			if out != tc.wantOut || errOut != tc.wantErr || code != tc.wantCode {
				t.Errorf("pivirtctl %v:\nstdout:\n%s\nwant:\n%s\nstderr: %q, want %q\ncode %d, want %d", tc.args, out, tc.wantOut, errOut, tc.wantErr, code, tc.wantCode)
			}
		})
	}
}
