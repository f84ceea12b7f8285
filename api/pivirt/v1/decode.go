// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// DecodeSpec decodes o.Spec into the kind's typed spec, rejecting unknown
// fields. It does not default or validate.
func (o *Object) DecodeSpec() (Spec, error) {
	k, err := LookupKind(o.Kind)
	if err != nil {
		return nil, err
	}
	spec := k.NewSpec()
	if len(o.Spec) == 0 {
		return spec, nil
	}
	dec := json.NewDecoder(bytes.NewReader(o.Spec))
	dec.DisallowUnknownFields()
	if err := dec.Decode(spec); err != nil {
		return nil, fmt.Errorf("decoding spec of %s %q: %w", o.Kind, o.Metadata.Name, err)
	}
	return spec, nil
}

// SetSpec encodes spec into o.Spec.
func (o *Object) SetSpec(spec Spec) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encoding spec of %s %q: %w", o.Kind, o.Metadata.Name, err)
	}
	o.Spec = b
	return nil
}

// DecodeStatus decodes o.Status into v (a kind's status type).
func (o *Object) DecodeStatus(v any) error {
	if len(o.Status) == 0 {
		return nil
	}
	return json.Unmarshal(o.Status, v)
}

// DeepCopy returns a copy sharing nothing with o.
func (o *Object) DeepCopy() *Object {
	b, err := json.Marshal(o)
	if err != nil {
		panic(fmt.Sprintf("marshalling object: %v", err))
	}
	var c Object
	if err := json.Unmarshal(b, &c); err != nil {
		panic(fmt.Sprintf("unmarshalling object: %v", err))
	}
	return &c
}

// DefaultedSpec decodes o.Spec strictly and fills in the kind's defaults.
func (o *Object) DefaultedSpec() (Spec, error) {
	s, err := o.DecodeSpec()
	if err != nil {
		return nil, err
	}
	applyDefaults(s, o.Metadata.Name)
	return s, nil
}
