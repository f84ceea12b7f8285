// SPDX-License-Identifier: Apache-2.0

// Package fields parses and evaluates kubectl-style field selectors
// (`spec.network=lan,spec.macAddress!=52:54:00:00:00:01`; `=`, `==` and
// `!=`, comma = AND) over the fields each kind offers, so the CLI, the
// API and the stores' indexes agree on one grammar and one value of a
// field (a MAC compares in its canonical form, a lease without a type is
// static).
package fields
