// SPDX-License-Identifier: Apache-2.0

package pivirtv1

// ConditionNodeLost is the condition control/liveness sets (status
// "True") on the NetworkSegments and DHCPLeases placed on a node whose
// registration in the cluster store lapsed: a crashed or frozen pivirtd.
// The objects stay (its guests may still run, its leases stay held);
// the other nodes stop flooding to its VTEP. It goes when the node
// registers again. Writers of the rest of a status keep it.
const ConditionNodeLost = "NodeLost"

// OwnedConditions are the condition types one controller owns across
// objects that others write the status of (Conflict: control/collision;
// NodeLost: control/liveness): a writer of the rest of a status keeps
// them as stored.
var OwnedConditions = []string{ConditionConflict, ConditionNodeLost}
