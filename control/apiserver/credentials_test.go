// SPDX-License-Identifier: Apache-2.0

package apiserver

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pivirt.hu/pivirt/test/testutil"
)

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMutualTLS: a client certificate of the client CA gives the role its
// organization names; a token still works without one; a certificate of
// another CA is refused; an organization naming no role is refused.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := testutil.NewCA(t, "server CA"), testutil.NewCA(t, "client CA"), testutil.NewCA(t, "other CA")
	sc, sk := serverCA.Server(t)
	files := CredentialFiles{Tokens: writeFile(t, dir, "tokens", []byte("operator "+operatorToken+"\n")),
		Cert: writeFile(t, dir, "server.pem", sc), Key: writeFile(t, dir, "server-key.pem", sk),
		ClientCA: writeFile(t, dir, "clients.pem", clientCA.PEM)}
	creds, err := LoadCredentials(files)
	if err != nil {
		t.Fatal(err)
	}
	var got Role
	srv := httptest.NewUnstartedServer(Authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = RoleFrom(r.Context()) }), creds, RoleNone))
	srv.TLS = creds.TLSConfig()
	srv.StartTLS()
	defer srv.Close()

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(serverCA.PEM)
	clientWith := func(ca *testutil.CA, orgs ...string) *http.Client {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if ca != nil {
			c, k := ca.Client(t, "someone", orgs...)
			pair, err := tls.X509KeyPair(c, k)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	for _, c := range []struct {
		name     string
		client   *http.Client
		token    string
		wantCode int // 0: refused, by the handshake or with 401 (a Go client
		// sends no certificate the server's CA list does not name)
		wantRole Role
	}{
		{"operator certificate", clientWith(&clientCA, CertOrgOperator), "", 200, RoleOperator},
		{"cluster certificate", clientWith(&clientCA, CertOrgCluster), "", 200, RoleCluster},
		{"certificate naming no role", clientWith(&clientCA, "acme"), "", 401, RoleNone},
		{"no certificate, a token", clientWith(nil), operatorToken, 200, RoleOperator},
		{"no certificate, no token", clientWith(nil), "", 401, RoleNone},
		{"another CA's certificate", clientWith(&otherCA, CertOrgCluster), "", 0, RoleNone},
	} {
		t.Run(c.name, func(t *testing.T) {
			got = RoleNone
			req, _ := http.NewRequest("POST", srv.URL+"/x", nil)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := c.client.Do(req)
			if c.wantCode == 0 {
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != http.StatusUnauthorized || got != RoleNone {
						t.Fatalf("a certificate of another CA was accepted (%d, role %v)", resp.StatusCode, got)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.wantCode || got != c.wantRole {
				t.Errorf("code %d role %v, want %d %v", resp.StatusCode, got, c.wantCode, c.wantRole)
			}
		})
	}
}

// TestCredentialsReload: a changed token file is noticed and read; one
// that does not read keeps the tokens in use.
func TestCredentialsReload(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "tokens", []byte("operator "+operatorToken+"\n"))
	creds, err := LoadCredentials(CredentialFiles{Tokens: p})
	if err != nil {
		t.Fatal(err)
	}
	if creds.Changed() {
		t.Error("Changed right after loading")
	}
	// A new token (and a later mtime, whatever the clock's resolution).
	writeFile(t, dir, "tokens", []byte("cluster "+clusterToken+"\n"))
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	if !creds.Changed() {
		t.Fatal("the rewritten token file is not noticed")
	}
	if err := creds.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := creds.tokens().lookup(clusterToken); r != RoleCluster {
		t.Errorf("the new token has role %v, want cluster", r)
	}
	if r := creds.tokens().lookup(operatorToken); r != RoleNone {
		t.Errorf("the removed token still has role %v", r)
	}
	// Half-written: no token in it. Refused, the previous tokens stay.
	writeFile(t, dir, "tokens", []byte("# nothing yet\n"))
	if err := creds.Reload(); err == nil {
		t.Error("a token file without tokens was taken")
	}
	if r := creds.tokens().lookup(clusterToken); r != RoleCluster {
		t.Errorf("after a failed reload the token has role %v, want the previous cluster", r)
	}
}
