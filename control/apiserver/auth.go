// SPDX-License-Identifier: Apache-2.0

package apiserver

import (
	"bufio"
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Role is what a caller may do.
type Role int

// Roles. Operators manage objects; the cluster tier may also set reserved
// pivirt.hu/* labels.
const (
	RoleNone Role = iota
	RoleOperator
	RoleCluster
)

func (r Role) String() string {
	switch r {
	case RoleOperator:
		return "operator"
	case RoleCluster:
		return "cluster"
	}
	return "none"
}

// Tokens maps bearer tokens to roles.
type Tokens map[string]Role

// LoadTokens reads a token file: one token per line, optionally preceded
// by its role ("cluster <token>" or "operator <token>"; a bare token is an
// operator's). Blank lines and #-comments are ignored.
func LoadTokens(path string) (Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening token file: %w", err)
	}
	defer f.Close()
	toks := Tokens{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		role, tok := RoleOperator, fields[0]
		switch {
		case len(fields) == 2 && fields[0] == "operator":
			tok = fields[1]
		case len(fields) == 2 && fields[0] == "cluster":
			role, tok = RoleCluster, fields[1]
		case len(fields) != 1:
			return nil, fmt.Errorf("token file %s line %d: want \"[operator|cluster] TOKEN\"", path, n)
		}
		if len(tok) < 16 {
			return nil, fmt.Errorf("token file %s line %d: token shorter than 16 characters", path, n)
		}
		toks[tok] = role
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading token file: %w", err)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("token file %s holds no token", path)
	}
	return toks, nil
}

// lookup compares in constant time per token.
func (t Tokens) lookup(tok string) Role {
	role := RoleNone
	for k, r := range t {
		if subtle.ConstantTimeCompare([]byte(k), []byte(tok)) == 1 {
			role = r
		}
	}
	return role
}

type roleKey struct{}

// RoleFrom returns the caller's role set by Authenticate.
func RoleFrom(ctx context.Context) Role {
	r, _ := ctx.Value(roleKey{}).(Role)
	return r
}

// Authenticate wraps h so every call carries a role. A bearer token, when
// present, must be valid and gives its role; else a verified client
// certificate gives the role its organization names (CertOrgOperator,
// CertOrgCluster); without either the call gets anonymous (an operator on
// the unix socket, refused on TCP). creds may be nil (no token file: only
// anonymous callers).
func Authenticate(h http.Handler, creds *Credentials, anonymous Role) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		role := anonymous
		if auth := r.Header.Get("Authorization"); auth != "" {
			tok, ok := strings.CutPrefix(auth, "Bearer ")
			role = RoleNone
			if ok {
				role = creds.tokens().lookup(tok)
			}
		} else if cr := certRole(r); cr != RoleNone {
			role = cr
		}
		if role == RoleNone {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"code":"unauthenticated","message":"a valid bearer token or client certificate is required"}`)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), roleKey{}, role)))
	})
}
