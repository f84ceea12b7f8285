// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
)

// certs writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, as PEM files in dir.
func certs(t *testing.T, dir string) (ca, srvCert, srvKey, cliCert, cliKey string) {
	t.Helper()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pivirt test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (string, string) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kb)
	}
	ca = write("ca.pem", "CERTIFICATE", caDER)
	srvCert, srvKey = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	cliCert, cliKey = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return ca, srvCert, srvKey, cliCert, cliKey
}

// TestTLS: against an etcd that checks client certificates, the store
// works with --etcd-cert/--etcd-key/--etcd-ca, and without the client
// certificate it fails rather than falling back to anything.
func TestTLS(t *testing.T) {
	ca, srvCert, srvKey, cliCert, cliKey := certs(t, t.TempDir())
	good, err := ClientTLS(cliCert, cliKey, ca)
	if err != nil {
		t.Fatal(err)
	}
	url := etcdtest.StartWith(t, etcdtest.Options{Scheme: "https", Extra: []string{"--cert-file", srvCert, "--key-file", srvKey,
		"--trusted-ca-file", ca, "--client-cert-auth"}, Ready: good}).URL

	st, err := Open([]string{url}, Options{TLS: good, Prefix: "/tls/"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	o := &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindDHCPLease, Metadata: pivirtv1.ObjectMeta{Name: "a"}, Spec: []byte(`{}`)}
	ctx := context.Background()
	if _, err := st.Update(ctx, func(tx store.Tx) error { return tx.Create(o) }); err != nil {
		t.Fatalf("writing over TLS: %v", err)
	}
	if _, err := st.Get(ctx, pivirtv1.KindDHCPLease, "a"); err != nil {
		t.Fatalf("reading over TLS: %v", err)
	}

	caOnly, err := ClientTLS("", "", ca)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := Open([]string{url}, Options{TLS: caOnly, Prefix: "/tls/", DialTimeout: 2 * time.Second})
	if err == nil {
		defer bad.Close()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if _, err := bad.Get(cctx, pivirtv1.KindDHCPLease, "a"); err == nil {
			t.Fatal("read without a client certificate from an etcd that requires one")
		}
	}

	for _, tc := range []struct{ cert, key, ca, want string }{
		{cliCert, "", "", "--etcd-cert and --etcd-key go together"},
		{"", "", filepath.Join(t.TempDir(), "none.pem"), "--etcd-ca"},
		{cliCert, cliKey, cliKey, "no PEM certificate"},
	} {
		if _, err := ClientTLS(tc.cert, tc.key, tc.ca); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ClientTLS(%q, %q, %q) = %v, want an error naming %q", tc.cert, tc.key, tc.ca, err, tc.want)
		}
	}
}
