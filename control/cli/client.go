// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"

	"connectrpc.com/connect"

	"pivirt.hu/pivirt/api/resource/v1/resourcev1connect"
)

// socketBaseURL is the base URL of calls over the unix socket; the host is
// only a label, the transport always dials the socket.
const socketBaseURL = "http://pivirtd"

// Dial returns an HTTP client and base URL that reach pivirtd as the global
// flags say, for building a connect client of any pivirtd service.
func (r *Root) Dial() (connect.HTTPClient, string, error) {
	return r.conn.dial()
}

// Client returns a ResourceService client as the global flags say.
func (r *Root) Client() (resourcev1connect.ResourceServiceClient, error) {
	hc, base, err := r.conn.dial()
	if err != nil {
		return nil, err
	}
	var opts []connect.ClientOption
	if r.conn.local() {
		// Over the local socket or loopback, compressing a list of
		// 100,000 leases costs both ends more time than sending it.
		opts = append(opts, connect.WithAcceptCompression("gzip", nil, nil))
	}
	return resourcev1connect.NewResourceServiceClient(hc, base, opts...), nil
}

// local reports whether the daemon is on this host: the unix socket, or
// a --server on a loopback address or localhost.
func (c ConnFlags) local() bool {
	if c.Server == "" {
		return true
	}
	u, err := url.Parse(c.Server)
	if err != nil {
		return false
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		return ip.IsLoopback()
	}
	return u.Hostname() == "localhost"
}

// Target names where the daemon is expected, for error messages.
func (c ConnFlags) Target() string {
	if c.Server != "" {
		return c.Server
	}
	return c.Socket
}

func (c ConnFlags) dial() (*http.Client, string, error) {
	if c.Server == "" {
		if c.TokenFile != "" || c.CAFile != "" || c.InsecureSkipTLSVerify || c.ClientCert != "" {
			return nil, "", fmt.Errorf("--token-file, --ca-file, --client-cert and --insecure-skip-tls-verify need --server")
		}
		socket := c.Socket
		tr := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
			MaxIdleConnsPerHost: 4,
		}
		return &http.Client{Transport: tr}, socketBaseURL, nil
	}

	u, err := url.Parse(c.Server)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, "", fmt.Errorf("parsing --server %q: want http://host:port or https://host:port", c.Server)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if u.Scheme == "https" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipTLSVerify} //nolint:gosec // the user asked for it
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return nil, "", fmt.Errorf("reading --ca-file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, "", fmt.Errorf("reading --ca-file %s: no PEM certificate in it", c.CAFile)
			}
			cfg.RootCAs = pool
		}
		if (c.ClientCert == "") != (c.ClientKey == "") {
			return nil, "", fmt.Errorf("--client-cert and --client-key go together")
		}
		if c.ClientCert != "" {
			pair, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
			if err != nil {
				return nil, "", fmt.Errorf("loading --client-cert %s and --client-key %s: %w", c.ClientCert, c.ClientKey, err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		tr.TLSClientConfig = cfg
	} else if c.CAFile != "" || c.InsecureSkipTLSVerify || c.ClientCert != "" {
		return nil, "", fmt.Errorf("--ca-file, --client-cert and --insecure-skip-tls-verify need an https --server")
	}
	var rt http.RoundTripper = tr
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("reading --token-file: %w", err)
		}
		token := strings.TrimSpace(string(b))
		if token == "" {
			return nil, "", fmt.Errorf("reading --token-file %s: it is empty", c.TokenFile)
		}
		rt = bearer{token: token, next: tr}
	}
	return &http.Client{Transport: rt}, strings.TrimRight(u.String(), "/"), nil
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}
