// SPDX-License-Identifier: Apache-2.0

package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
	"pivirt.hu/pivirt/api/resource/v1/resourcev1connect"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/store/bolt"
)

const (
	operatorToken = "op-0123456789abcdef"
	clusterToken  = "cl-0123456789abcdef"
)

func TestLoadTokens(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    Tokens
		wantErr string
	}{
		{"roles", "# comment\n\noperator " + operatorToken + "\ncluster " + clusterToken + "\n",
			Tokens{operatorToken: RoleOperator, clusterToken: RoleCluster}, ""},
		{"bare token is an operator", operatorToken + "\n", Tokens{operatorToken: RoleOperator}, ""},
		{"unknown role", "admin " + operatorToken, nil, "line 1"},
		{"short token", "operator short", nil, "shorter than 16"},
		{"empty", "# nothing\n", nil, "holds no token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadTokens(p)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("tokens = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("role of %s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

// tokenCreds writes a token file of toks and loads it.
func tokenCreds(t *testing.T, toks Tokens) *Credentials {
	t.Helper()
	var b strings.Builder
	for tok, role := range toks {
		fmt.Fprintf(&b, "%s %s\n", role, tok)
	}
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadCredentials(CredentialFiles{Tokens: p})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAuthenticate(t *testing.T) {
	toks := tokenCreds(t, Tokens{operatorToken: RoleOperator, clusterToken: RoleCluster})
	tests := []struct {
		name      string
		anonymous Role
		header    string
		wantCode  int
		wantRole  Role
	}{
		{"unix socket, no token", RoleOperator, "", 200, RoleOperator},
		{"tcp, no token", RoleNone, "", 401, RoleNone},
		{"tcp, wrong token", RoleNone, "Bearer nope-nope-nope-nope", 401, RoleNone},
		{"tcp, not bearer", RoleNone, "Basic " + operatorToken, 401, RoleNone},
		{"tcp, operator", RoleNone, "Bearer " + operatorToken, 200, RoleOperator},
		{"tcp, cluster", RoleNone, "Bearer " + clusterToken, 200, RoleCluster},
		{"socket with a bad token is refused too", RoleOperator, "Bearer nope-nope-nope-nope", 401, RoleNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got Role
			h := Authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = RoleFrom(r.Context()) }), toks, tc.anonymous)
			req := httptest.NewRequest("POST", "/x", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode || got != tc.wantRole {
				t.Errorf("code %d role %v, want %d %v", rec.Code, got, tc.wantCode, tc.wantRole)
			}
		})
	}
}

// TestProtocolsAndRoles serves the real handlers over HTTP/2 with TLS and
// calls them with the Connect, gRPC and gRPC-Web protocols; an operator
// may not set a reserved label, the cluster tier may.
func TestProtocolsAndRoles(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs := &ResourceServer{Store: st, Index: admission.NewIndex(), Recorder: events.NewRecorder(5)}
	mux := http.NewServeMux()
	mux.Handle(resourcev1connect.NewResourceServiceHandler(rs))
	srv := httptest.NewUnstartedServer(Authenticate(mux, tokenCreds(t, Tokens{operatorToken: RoleOperator, clusterToken: RoleCluster}), RoleNone))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	lease := func(name string, labels map[string]string) []byte {
		b, _ := json.Marshal(map[string]any{"apiVersion": "pivirt.hu/v1", "kind": "DHCPLease",
			"metadata": map[string]any{"name": name, "labels": labels},
			"spec":     map[string]any{"network": "br-x", "macAddress": "52:54:00:00:00:01", "ipAddress": "10.0.0.5"}})
		return b
	}
	for _, p := range []struct {
		name string
		opt  connect.ClientOption
	}{{"connect", connect.WithProtoJSON()}, {"grpc", connect.WithGRPC()}, {"grpc-web", connect.WithGRPCWeb()}} {
		t.Run(p.name, func(t *testing.T) {
			client := func(token string) resourcev1connect.ResourceServiceClient {
				return resourcev1connect.NewResourceServiceClient(srv.Client(), srv.URL, p.opt,
					connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
						return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
							if token != "" {
								req.Header().Set("Authorization", "Bearer "+token)
							}
							return next(ctx, req)
						}
					})))
			}
			ctx := context.Background()
			_, err := client("").List(ctx, connect.NewRequest(&resourcev1.ListRequest{Kind: "leases"}))
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Fatalf("unauthenticated List: %v, want Unauthenticated", err)
			}
			name := "l-" + strings.ReplaceAll(p.name, "-", "")
			resp, err := client(operatorToken).Apply(ctx, connect.NewRequest(&resourcev1.ApplyRequest{
				Objects: [][]byte{lease(name, map[string]string{"pivirt.hu/owner": "x"})}}))
			if err != nil {
				t.Fatal(err)
			}
			if r := resp.Msg.Results[0]; r.Code != connect.CodePermissionDenied.String() || !strings.Contains(r.Error, "pivirt.hu/owner") {
				t.Errorf("operator setting a reserved label: %+v", r)
			}
			resp, err = client(clusterToken).Apply(ctx, connect.NewRequest(&resourcev1.ApplyRequest{
				Objects: [][]byte{lease(name, map[string]string{"pivirt.hu/owner": "x"})}}))
			if err != nil {
				t.Fatal(err)
			}
			if r := resp.Msg.Results[0]; r.Action != "created" {
				t.Errorf("cluster tier setting a reserved label: %+v", r)
			}
			_, err = client(operatorToken).Get(ctx, connect.NewRequest(&resourcev1.GetRequest{Kind: "lease", Name: "missing"}))
			if connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("Get of a missing lease: %v", err)
			}
			_, err = client(operatorToken).Delete(ctx, connect.NewRequest(&resourcev1.DeleteRequest{Kind: "lease", Name: name}))
			if err != nil {
				t.Errorf("Delete: %v", err)
			}
			var ce *connect.Error
			if _, err := client(operatorToken).List(ctx, connect.NewRequest(&resourcev1.ListRequest{Kind: "leases", LabelSelector: "a in (b"})); !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
				t.Errorf("bad selector: %v", err)
			}
		})
	}
}

// newPlainClient is a client of a ResourceServer on a bolt store in
// t's temporary directory, over plain HTTP, with the daemon's handler
// options.
func newPlainClient(t *testing.T) resourcev1connect.ResourceServiceClient {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	rs := &ResourceServer{Store: st, Index: admission.NewIndex(), Recorder: events.NewRecorder(5)}
	mux := http.NewServeMux()
	mux.Handle(resourcev1connect.NewResourceServiceHandler(rs, HandlerOptions()...))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return resourcev1connect.NewResourceServiceClient(srv.Client(), srv.URL)
}

// TestRequestSizeLimit: a request just over MaxRequestBytes is refused
// with a clear ResourceExhausted error and the server keeps serving; a
// huge bad value is echoed only as a short prefix.
func TestRequestSizeLimit(t *testing.T) {
	client := newPlainClient(t)
	ctx := context.Background()

	big := bytes.Repeat([]byte("a"), MaxRequestBytes)
	_, err := client.Apply(ctx, connect.NewRequest(&resourcev1.ApplyRequest{Objects: [][]byte{big}}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "larger than configured max") {
		t.Fatalf("a request over the limit: %v, want ResourceExhausted naming the limit", err)
	}
	if _, err := client.List(ctx, connect.NewRequest(&resourcev1.ListRequest{Kind: "leases"})); err != nil {
		t.Fatalf("the server stopped serving after a refused request: %v", err)
	}

	host := strings.Repeat("x", 1<<20)
	obj, _ := json.Marshal(map[string]any{"apiVersion": "pivirt.hu/v1", "kind": "DHCPLease", "metadata": map[string]any{"name": "big"},
		"spec": map[string]any{"network": "br-x", "macAddress": "52:54:00:00:00:01", "ipAddress": "10.0.0.5", "hostname": host}})
	resp, err := client.Apply(ctx, connect.NewRequest(&resourcev1.ApplyRequest{Objects: [][]byte{obj}}))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Msg.Results[0]; r.Code != connect.CodeInvalidArgument.String() || len(r.Error) > 1024 || !strings.Contains(r.Error, "(1048576 bytes)") {
		t.Errorf("a 1 MiB bad value echoed as %d bytes: %.300s", len(r.Error), r.Error)
	}
}

// TestListPages: List pages through a real store with limit and
// continue, selects by field, strips spec and status for metadata_only,
// and refuses a bad field, limit or token with InvalidArgument naming it.
func TestListPages(t *testing.T) {
	client := newPlainClient(t)
	ctx := context.Background()
	var objs [][]byte
	for i := range 25 {
		b, _ := json.Marshal(map[string]any{"apiVersion": "pivirt.hu/v1", "kind": "DHCPLease", "metadata": map[string]any{"name": fmt.Sprintf("l-%02d", i)},
			"spec": map[string]any{"network": []string{"br-a", "br-b"}[i%2], "macAddress": fmt.Sprintf("52:54:00:00:00:%02x", i), "ipAddress": fmt.Sprintf("10.0.%d.%d", i%2, 10+i)}})
		objs = append(objs, b)
	}
	if _, err := client.Apply(ctx, connect.NewRequest(&resourcev1.ApplyRequest{Objects: objs})); err != nil {
		t.Fatal(err)
	}
	list := func(req *resourcev1.ListRequest) (names []string, pages int) {
		t.Helper()
		for pages = 1; ; pages++ {
			resp, err := client.List(ctx, connect.NewRequest(req))
			if err != nil {
				t.Fatalf("List %v: %v", req, err)
			}
			for _, raw := range resp.Msg.Objects {
				var o pivirtv1.Object
				if err := json.Unmarshal(raw, &o); err != nil {
					t.Fatal(err)
				}
				if (req.MetadataOnly || req.NamesOnly) != (o.Spec == nil) {
					t.Errorf("metadata_only %v names_only %v: %s", req.MetadataOnly, req.NamesOnly, raw)
				}
				if req.NamesOnly && (o.Metadata.ResourceVersion == "" || o.Metadata.UID != "") {
					t.Errorf("names_only: %s", raw)
				}
				names = append(names, o.Metadata.Name)
			}
			if resp.Msg.Continue == "" {
				return names, pages
			}
			req.Continue = resp.Msg.Continue
		}
	}
	if names, pages := list(&resourcev1.ListRequest{Kind: "leases", Limit: 10}); len(names) != 25 || pages != 3 || names[0] != "l-00" || names[24] != "l-24" {
		t.Errorf("limit 10: %d names in %d pages (%v)", len(names), pages, names)
	}
	if names, _ := list(&resourcev1.ListRequest{Kind: "lease", FieldSelector: "spec.network=br-b", Limit: 5, MetadataOnly: true}); len(names) != 12 || names[0] != "l-01" {
		t.Errorf("spec.network=br-b: %v", names)
	}
	if names, _ := list(&resourcev1.ListRequest{Kind: "lease", Limit: 7, NamesOnly: true}); len(names) != 25 || names[24] != "l-24" {
		t.Errorf("names only: %v", names)
	}
	for _, tc := range []struct {
		req  *resourcev1.ListRequest
		want string
	}{
		{&resourcev1.ListRequest{Kind: "leases", FieldSelector: "spec.bridge=x"}, `"spec.bridge" is not a field of DHCPLease`},
		{&resourcev1.ListRequest{Kind: "leases", Limit: -1}, "limit -1"},
		{&resourcev1.ListRequest{Kind: "leases", Continue: "nope"}, "continue: invalid continue token"},
	} {
		_, err := client.List(ctx, connect.NewRequest(tc.req))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("List %v: %v, want InvalidArgument saying %q", tc.req, err, tc.want)
		}
	}
}
