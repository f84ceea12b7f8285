// SPDX-License-Identifier: Apache-2.0

package apiserver

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"
)

// CredentialFiles are the files the TCP API authenticates with; empty
// ones are not used.
type CredentialFiles struct {
	Tokens   string // bearer tokens with roles (LoadTokens)
	Cert     string // the server's certificate (PEM)
	Key      string // its key (PEM)
	ClientCA string // CAs whose client certificates authenticate (mutual TLS)
}

// Credentials hold what CredentialFiles said when they were last read;
// Reload reads them again, and a failed read keeps the previous ones, so
// a half-written file never locks operators out nor lets anyone in.
type Credentials struct {
	files CredentialFiles
	cur   atomic.Pointer[credentials]
}

type credentials struct {
	tokens    Tokens
	cert      *tls.Certificate
	clientCAs *x509.CertPool
	stamp     []fileStamp // of the files read, to notice a change
}

// fileStamp is what Changed compares: a file's size and modification time.
type fileStamp struct {
	size  int64
	mtime time.Time
}

// LoadCredentials reads files; an error names the file.
func LoadCredentials(files CredentialFiles) (*Credentials, error) {
	c := &Credentials{files: files}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files again and, if all read, uses them from the next
// call (and the next TLS handshake) on.
func (c *Credentials) Reload() error {
	next := &credentials{stamp: c.stamps()}
	var err error
	if c.files.Tokens != "" {
		if next.tokens, err = LoadTokens(c.files.Tokens); err != nil {
			return err
		}
	}
	if c.files.Cert != "" {
		cert, err := tls.LoadX509KeyPair(c.files.Cert, c.files.Key)
		if err != nil {
			return fmt.Errorf("loading TLS key pair %s, %s: %w", c.files.Cert, c.files.Key, err)
		}
		next.cert = &cert
	}
	if c.files.ClientCA != "" {
		pem, err := os.ReadFile(c.files.ClientCA)
		if err != nil {
			return fmt.Errorf("reading client CAs: %w", err)
		}
		next.clientCAs = x509.NewCertPool()
		if !next.clientCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("client CAs %s: no PEM certificate in it", c.files.ClientCA)
		}
	}
	c.cur.Store(next)
	return nil
}

// Changed reports whether a file changed (size or modification time)
// since it was last read.
func (c *Credentials) Changed() bool {
	return !slices.Equal(c.stamps(), c.cur.Load().stamp)
}

func (c *Credentials) stamps() []fileStamp {
	var out []fileStamp
	for _, p := range []string{c.files.Tokens, c.files.Cert, c.files.Key, c.files.ClientCA} {
		var s fileStamp
		if fi, err := os.Stat(p); p != "" && err == nil {
			s = fileStamp{fi.Size(), fi.ModTime()}
		}
		out = append(out, s)
	}
	return out
}

// TLSConfig is the server's TLS configuration, or nil without a
// certificate. The certificate and the client CAs are those of the
// moment of each handshake. With client CAs, a client certificate is
// optional (bearer tokens still work) but, when presented, must verify.
func (c *Credentials) TLSConfig() *tls.Config {
	if c.files.Cert == "" {
		return nil
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cur := c.cur.Load()
			cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cur.cert}}
			if cur.clientCAs != nil {
				cfg.ClientCAs, cfg.ClientAuth = cur.clientCAs, tls.VerifyClientCertIfGiven
			}
			return cfg, nil
		},
	}
}

// Client certificate identities: the certificate's organization (O) says
// the role, as Kubernetes reads groups from it; any other organization
// gets none.
const (
	CertOrgOperator = "pivirt:operator"
	CertOrgCluster  = "pivirt:cluster"
)

// certRole is the role of a request's verified client certificate, or
// RoleNone (no certificate, or one whose organization names no role).
func certRole(r *http.Request) Role {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return RoleNone
	}
	role := RoleNone
	for _, o := range r.TLS.VerifiedChains[0][0].Subject.Organization {
		switch o {
		case CertOrgCluster:
			role = RoleCluster
		case CertOrgOperator:
			if role == RoleNone {
				role = RoleOperator
			}
		}
	}
	return role
}

// tokens are the bearer tokens of the moment.
func (c *Credentials) tokens() Tokens {
	if c == nil {
		return nil
	}
	return c.cur.Load().tokens
}
