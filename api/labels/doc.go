// SPDX-License-Identifier: Apache-2.0

// Package labels parses and evaluates kubectl-style label selectors
// (`k=v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, comma = AND)
// and validates label keys and values by the Kubernetes rules, so the CLI,
// the API and admission agree on one grammar.
package labels
