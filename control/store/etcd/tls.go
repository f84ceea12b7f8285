// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ClientTLS builds the TLS of a client of etcd from PEM files: certFile
// and keyFile, the client certificate etcd checks (--client-cert-auth),
// go together; caFile holds the CAs that sign etcd's server certificate
// (empty: the system's). All empty gives nil: plain http.
func ClientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" && caFile == "" {
		return nil, nil
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--etcd-cert and --etcd-key go together: a client certificate needs its key")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert %s / --etcd-key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-ca %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}
