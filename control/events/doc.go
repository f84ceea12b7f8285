// SPDX-License-Identifier: Apache-2.0

// Package events records what the daemon did to each object (created,
// programmed, refused, attached) in a bounded in-memory log, for
// `pivirtctl describe`. Repeated events are folded into one with a count,
// as Kubernetes does.
package events
