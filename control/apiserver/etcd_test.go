// SPDX-License-Identifier: Apache-2.0

package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
	"pivirt.hu/pivirt/api/resource/v1/resourcev1connect"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/store/etcd"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
)

// TestEtcdDown: with etcd gone (stopped: connections refused) or hung
// (frozen: connections open, no answer), API writes fail with Unavailable
// naming etcd instead of hanging until the caller gives up; with etcd
// stopped, reads do too. The bound is generous: it shows the call does not
// hang, it is no speed target.
func TestEtcdDown(t *testing.T) {
	for _, mode := range []string{"stopped", "frozen"} {
		t.Run(mode, func(t *testing.T) { testEtcdDown(t, mode == "frozen") })
	}
}

// etcdAPI serves the resource API of a node on srv (a clustered node,
// as pivirtd --store etcd), closed with the test.
func etcdAPI(t *testing.T, srv *etcdtest.Server) (resourcev1connect.ResourceServiceClient, *etcd.Store, *ResourceServer) {
	t.Helper()
	st, err := etcd.Open([]string{srv.URL}, etcd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	index := admission.NewIndex()
	index.Shared = true
	rs := &ResourceServer{Store: st, Index: index, Recorder: events.NewRecorder(5), Clustered: true}
	mux := http.NewServeMux()
	mux.Handle(resourcev1connect.NewResourceServiceHandler(rs, HandlerOptions()...))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return resourcev1connect.NewResourceServiceClient(hs.Client(), hs.URL), st, rs
}

func testEtcdDown(t *testing.T, frozen bool) {
	srv := etcdtest.Start(t)
	client, _, _ := etcdAPI(t, srv)

	lease := func(name, mac, ip string) []byte {
		return []byte(`{"apiVersion":"pivirt.hu/v1","kind":"DHCPLease","metadata":{"name":"` + name +
			`"},"spec":{"network":"br-x","macAddress":"` + mac + `","ipAddress":"` + ip + `"}}`)
	}
	resp, err := client.Apply(t.Context(), connect.NewRequest(&resourcev1.ApplyRequest{Objects: [][]byte{lease("before", "52:54:00:00:00:01", "10.0.0.5")}}))
	if err != nil || resp.Msg.Results[0].Error != "" {
		t.Fatalf("apply with etcd up: %v %v", err, resp.Msg.GetResults())
	}
	if frozen {
		if err := srv.Freeze(); err != nil {
			t.Fatal(err)
		}
	} else {
		srv.Stop()
	}

	const bound = 5 * time.Second
	calls := []struct {
		name  string
		write bool
		call  func(ctx context.Context) error
	}{
		{"apply", true, func(ctx context.Context) error {
			_, err := client.Apply(ctx, connect.NewRequest(&resourcev1.ApplyRequest{Objects: [][]byte{lease("after", "52:54:00:00:00:02", "10.0.0.6")}}))
			return err
		}},
		{"delete", true, func(ctx context.Context) error {
			_, err := client.Delete(ctx, connect.NewRequest(&resourcev1.DeleteRequest{Kind: "lease", Name: "before"}))
			return err
		}},
		{"get", false, func(ctx context.Context) error {
			_, err := client.Get(ctx, connect.NewRequest(&resourcev1.GetRequest{Kind: "lease", Name: "before"}))
			return err
		}},
		{"list", false, func(ctx context.Context) error {
			_, err := client.List(ctx, connect.NewRequest(&resourcev1.ListRequest{Kind: "leases"}))
			return err
		}},
	}
	for _, c := range calls {
		if frozen && !c.write {
			continue // a read may wait longer (listing a kind: 10 request timeouts)
		}
		t.Run(c.name, func(t *testing.T) {
			// The caller would wait a minute: the answer must come first.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			start := time.Now()
			err := c.call(ctx)
			took := time.Since(start)
			if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "etcd") {
				t.Errorf("err = %v (code %v), want Unavailable naming etcd", err, connect.CodeOf(err))
			}
			if took > bound {
				t.Errorf("answered after %v, want within %v", took, bound)
			}
			t.Logf("%s: %v after %v", c.name, err, took.Round(time.Millisecond))
		})
	}
}

// TestEtcdApplyManyObjects: one apply of more objects than etcd takes in
// a transaction (--max-txn-ops, 128 by default: about 40 leases) stores
// them all, in as many transactions as it takes, each with its result;
// an object that alone exceeds the limit is refused with
// ResourceExhausted naming it, never InternalError.
func TestEtcdApplyManyObjects(t *testing.T) {
	tests := []struct {
		name      string
		etcdFlags []string
		leases    int
		wantCode  string // of every result; "" for stored
	}{
		{"10,000 leases, etcd's defaults", nil, 10000, ""},
		{"one lease exceeds --max-txn-ops", []string{"--max-txn-ops", "1"}, 3, connect.CodeResourceExhausted.String()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client, st, rs := etcdAPI(t, etcdtest.StartWith(t, etcdtest.Options{Extra: tc.etcdFlags}))

			req := &resourcev1.ApplyRequest{}
			for i := range tc.leases {
				req.Objects = append(req.Objects, []byte(fmt.Sprintf(`{"apiVersion":"pivirt.hu/v1","kind":"DHCPLease","metadata":{"name":"l%05d"},`+
					`"spec":{"network":"br-x","macAddress":"52:54:00:00:%02x:%02x","ipAddress":"10.1.%d.%d"}}`, i, i>>8, i&0xff, i/250, i%250+1)))
			}
			resp, err := client.Apply(t.Context(), connect.NewRequest(req))
			if err != nil {
				t.Fatalf("apply of %d leases: %v", tc.leases, err)
			}
			results := resp.Msg.GetResults()
			if len(results) != tc.leases {
				t.Fatalf("%d results for %d leases", len(results), tc.leases)
			}
			for i, res := range results {
				if res.GetCode() != tc.wantCode || tc.wantCode == "" && res.GetAction() != "created" {
					t.Fatalf("result %d: action %q, code %q, error %q; want code %q", i, res.GetAction(), res.GetCode(), res.GetError(), tc.wantCode)
				}
				if tc.wantCode != "" && !strings.Contains(res.GetError(), "--max-txn-ops") {
					t.Errorf("result %d: error %q does not name etcd's --max-txn-ops", i, res.GetError())
				}
			}
			stored, _, err := st.List(t.Context(), "DHCPLease", nil)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.leases
			if tc.wantCode != "" {
				want = 0
			}
			if len(stored) != want {
				t.Errorf("%d leases stored, want %d", len(stored), want)
			}
			t.Logf("%d leases: %d stored, revision %d, parts of %d", tc.leases, len(stored), resp.Msg.GetRevision(), rs.partSize.Load())
		})
	}
}
