// SPDX-License-Identifier: Apache-2.0

// Package inspect serves pivirtd's InspectService: the pinned maps and
// their decoded entries, the attached programs, compile's desired state
// and its drift from the live maps, packets simulated through the
// loaded guard, the daemon's status and the node's lease database.
// pivirtctl inspect/simulate/status print what it answers.
package inspect
