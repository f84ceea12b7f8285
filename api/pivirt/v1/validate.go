// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

// ValidateObject checks o on its own as admission does (envelope, metadata,
// strict spec decoding, then the kind's rules on the defaulted spec) without
// changing o. It returns nil or a *ValidationError listing every problem.
func ValidateObject(o *Object) error {
	c := *o
	_, _, err := PrepareObject(&c)
	return err
}

// PrepareObject admits o on its own: it checks the envelope and metadata,
// decodes the spec strictly, fills defaults and validates it. On success it
// rewrites o.Kind to the canonical kind name and o.Spec to the defaulted
// spec, and returns the kind and typed spec. On failure o is unchanged and
// the error is a *ValidationError. Server-set metadata and status are not
// looked at; admission overwrites them.
func PrepareObject(o *Object) (KindInfo, Spec, error) {
	return prepare(o, nil)
}

// PrepareTyped is PrepareObject for a spec built in Go, such as the DHCP
// server's own leases: the same checks, defaults and canonical encoding
// into o.Spec, without a strict decode of JSON nobody wrote by hand.
// spec must be the kind's spec type; it is defaulted in place.
func PrepareTyped(o *Object, spec Spec) (KindInfo, error) {
	if spec == nil {
		return KindInfo{}, fmt.Errorf("preparing %s %q: no spec", o.Kind, o.Metadata.Name)
	}
	kind, _, err := prepare(o, spec)
	return kind, err
}

// prepare is PrepareObject, or PrepareTyped when typed is not nil.
func prepare(o *Object, typed Spec) (KindInfo, Spec, error) {
	var errs ErrorList
	switch o.APIVersion {
	case APIVersion:
	case "":
		errs.Add("apiVersion", nil, "required (want %s)", APIVersion)
	default:
		errs.Add("apiVersion", show(o.APIVersion), "is not supported (want %s)", APIVersion)
	}
	kind, kindErr := LookupKind(o.Kind)
	kindName := o.Kind
	switch {
	case o.Kind == "":
		errs.Add("kind", nil, "required (one of %s)", kindNames())
	case kindErr != nil:
		errs.Add("kind", show(o.Kind), "is not a known kind (one of %s)", kindNames())
	default:
		kindName = kind.Kind
	}
	errs = append(errs, validateMeta(&o.Metadata)...)
	for i, r := range o.Metadata.OwnerReferences {
		// An object owning itself could never be deleted past its own block.
		if k, err := LookupKind(r.Kind); err == nil && kindErr == nil && k.Kind == kind.Kind && r.Name == o.Metadata.Name {
			errs.Add("metadata.ownerReferences["+itoa(i)+"]", r.Kind+"/"+r.Name, "is the object itself")
		}
	}
	var spec Spec
	switch {
	case kindErr != nil:
	case typed != nil:
		if want := kind.NewSpec(); reflect.TypeOf(typed) != reflect.TypeOf(want) {
			return KindInfo{}, nil, fmt.Errorf("preparing %s %q: spec is a %T, want %T", kind.Kind, o.Metadata.Name, typed, want)
		}
		spec = typed
		applyDefaults(spec, o.Metadata.Name)
		errs = append(errs, spec.Validate()...)
	default:
		spec = kind.NewSpec()
		if len(o.Spec) == 0 || string(o.Spec) == "null" {
			errs.Add("spec", nil, "required")
		} else if serrs := decodeStrict(o.Spec, spec, "spec"); len(serrs) > 0 {
			errs = append(errs, serrs...)
		} else {
			applyDefaults(spec, o.Metadata.Name)
			errs = append(errs, spec.Validate()...)
		}
	}
	if len(errs) > 0 {
		return KindInfo{}, nil, &ValidationError{Kind: kindName, Name: o.Metadata.Name, Errors: errs}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return KindInfo{}, nil, fmt.Errorf("encoding spec of %s %q: %w", kind.Kind, o.Metadata.Name, err)
	}
	o.Kind = kind.Kind
	o.Spec = b
	return kind, spec, nil
}

func kindNames() string {
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = k.Kind
	}
	return strings.Join(names, ", ")
}

// DecodeObject decodes one manifest document (YAML or JSON) into an
// Object, refusing unknown or mistyped envelope fields with their path
// (`metadata.lables: unknown field`). The spec is left raw; PrepareObject
// checks it.
func DecodeObject(doc []byte) (*Object, error) {
	data := bytes.TrimSpace(doc)
	if len(data) == 0 || data[0] != '{' {
		// JSON is YAML too, but converting it is slow; only YAML needs it.
		var err error
		if data, err = yaml.YAMLToJSON(doc); err != nil {
			return nil, fmt.Errorf("parsing manifest: %w", err)
		}
	}
	var o Object
	if errs := decodeStrict(data, &o, ""); len(errs) > 0 {
		ve := &ValidationError{Errors: errs}
		// Name the object when its identity decoded, for a better message.
		var id struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if json.Unmarshal(data, &id) == nil {
			ve.Kind, ve.Name = id.Kind, id.Metadata.Name
		}
		return nil, ve
	}
	return &o, nil
}
