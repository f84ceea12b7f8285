// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"encoding/json"
	"time"
)

// APIVersion is the only apiVersion this server speaks.
const APIVersion = "pivirt.hu/v1"

// Object is the envelope every manifest shares. Spec and Status are kept raw
// so the store and the API move objects without knowing their kind; Decode
// turns Spec into the kind's typed spec.
type Object struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   ObjectMeta      `json:"metadata"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	Status     json.RawMessage `json:"status,omitempty"`
}

// ObjectMeta is the metadata of every object. UID, Generation,
// ResourceVersion and CreationTimestamp are set by the server only.
type ObjectMeta struct {
	Name              string            `json:"name"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	OwnerReferences   []OwnerReference  `json:"ownerReferences,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	CreationTimestamp *time.Time        `json:"creationTimestamp,omitempty"`
}

// OwnerReference points at the object that owns this one. Deleting the owner
// deletes its dependents; a dependent with BlockOwnerDeletion keeps its owner
// from being deleted until the dependent is gone.
type OwnerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid,omitempty"`
	BlockOwnerDeletion bool   `json:"blockOwnerDeletion,omitempty"`
}

// Reserved metadata keys.
const (
	// ReservedLabelPrefix marks labels only the cluster tier may set.
	ReservedLabelPrefix = "pivirt.hu/"
	// NodeLabel places an object on one node (seed 002: the scheduled
	// host node); only the pivirtd whose --node it names realizes it.
	// pivirtd stamps the dynamic leases it serves with it.
	NodeLabel = ReservedLabelPrefix + "node"
	// LabelGeneration is carried opaquely for the cluster tier and never
	// causes drift.
	LabelGeneration = "pivirt.hu/generation"
	// AnnotationProvisioning, when "true" on a lease or its owner, freezes
	// the lease: it cannot be deleted or moved to another IP or network.
	AnnotationProvisioning = "pivirtd.pilab.hu/is-provisioning"
)

// Status is the server-owned part every kind shares. Kind-specific status
// types embed it, so their fields sit beside these in JSON.
type Status struct {
	Phase              string      `json:"phase,omitempty"`
	ObservedGeneration int64       `json:"observedGeneration,omitempty"`
	Message            string      `json:"message,omitempty"`
	Conditions         []Condition `json:"conditions,omitempty"`
}

// Condition is one observed aspect of an object, as in Kubernetes.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"` // "True", "False", "Unknown"
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// Phases reported in Status.Phase.
const (
	PhasePending = "Pending"
	PhaseReady   = "Ready"
	PhaseFailed  = "Failed"
)

// DHCPLeaseStatus is a DHCPLease's status: Ready once its segment serves
// it (and the guard may pin it), Pending while no segment's range holds it.
type DHCPLeaseStatus struct {
	Status
	SegmentID uint32 `json:"segmentID,omitempty"`
}

// PlacedElsewhere reports whether o is placed (NodeLabel) on a node other
// than node; an object without the label, or any object when node is "",
// is not.
func PlacedElsewhere(o *Object, node string) bool {
	n, ok := o.Metadata.Labels[NodeLabel]
	return ok && node != "" && n != node
}
