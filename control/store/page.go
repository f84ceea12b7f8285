// SPDX-License-Identifier: Apache-2.0

package store

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"pivirt.hu/pivirt/api/fields"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// ListOptions select and page a ListPage, as the Kubernetes apiserver's
// list options do.
type ListOptions struct {
	// Labels and Fields select objects (nil: all).
	Labels Selector
	Fields fields.Selector
	// Limit is the most objects a page holds; 0 is no limit (one page).
	Limit int
	// Continue is the previous page's Page.Continue: the list goes on
	// after its last key.
	Continue string
	// Raw asks for Page.Raw instead of Page.Objects: each object's JSON
	// as stored, resourceVersion exact, decoded only where a selector
	// must read it (what an API list sends on: no decode, no re-encode).
	Raw bool
	// NamesOnly, with Raw, asks for each object's NameOnly JSON: a store
	// need not read the objects a selector does not look at (etcd reads
	// keys alone), which is all `get -o name` needs.
	NamesOnly bool
}

// NameOnly is the JSON of an object reduced to its apiVersion, kind, name
// and resourceVersion (ListOptions.NamesOnly).
func NameOnly(kind, name string, rev int64) []byte {
	b := make([]byte, 0, 96+len(kind)+len(name))
	b = append(b, `{"apiVersion":"`+pivirtv1.APIVersion+`","kind":`...)
	b = strconv.AppendQuote(b, kind)
	b = append(b, `,"metadata":{"name":`...)
	b = strconv.AppendQuote(b, name)
	b = append(b, `,"resourceVersion":"`...)
	b = strconv.AppendInt(b, rev, 10)
	return append(b, `"}}`...)
}

// Page is one page of a list.
type Page struct {
	Objects []*pivirtv1.Object
	// Raw holds the objects' JSON instead, with ListOptions.Raw.
	Raw [][]byte
	// Revision is the store revision the list is read at: the first
	// page's, carried by its token to the others.
	Revision int64
	// Continue is the token of the next page; "" after the last.
	Continue string
}

// Matches reports whether o satisfies both selectors.
func (o ListOptions) Matches(obj *pivirtv1.Object) bool {
	return (o.Labels == nil || o.Labels.Matches(obj.Metadata.Labels)) && o.Fields.Matches(obj)
}

// Selects reports whether o has a selector: without one every object
// matches and none needs decoding.
func (o ListOptions) Selects() bool { return o.Labels != nil || len(o.Fields) > 0 }

// Len is how many objects the page holds.
func (p Page) Len() int { return len(p.Objects) + len(p.Raw) }

// AllKinds is the one page of a list of every kind (not paged): the
// objects of objs that opts selects, encoded with ListOptions.Raw.
func AllKinds(objs []*pivirtv1.Object, rev int64, opts ListOptions) (Page, error) {
	objs = slices.DeleteFunc(objs, func(o *pivirtv1.Object) bool { return !opts.Matches(o) })
	if !opts.Raw {
		return Page{Objects: objs, Revision: rev}, nil
	}
	p := Page{Raw: make([][]byte, 0, len(objs)), Revision: rev}
	for _, o := range objs {
		if opts.NamesOnly {
			r, _ := strconv.ParseInt(o.Metadata.ResourceVersion, 10, 64)
			p.Raw = append(p.Raw, NameOnly(o.Kind, o.Metadata.Name, r))
			continue
		}
		b, err := json.Marshal(o)
		if err != nil {
			return Page{}, fmt.Errorf("encoding %s/%s: %w", o.Kind, o.Metadata.Name, err)
		}
		p.Raw = append(p.Raw, b)
	}
	return p, nil
}

// ErrBadContinue: a continue token that is not one this kind's list made.
var ErrBadContinue = errors.New("invalid continue token")

// continueToken is what a Page.Continue carries (base64 JSON, opaque to
// clients): the kind, the selection, the revision of the first page and
// the last key the page read.
type continueToken struct {
	Version  int    `json:"v"`
	Kind     string `json:"k"`
	Selector string `json:"s,omitempty"`
	Revision int64  `json:"r"`
	After    string `json:"a"`
}

// EncodeContinue makes the token of the page after key after, for a
// store's ListPage.
func EncodeContinue(kind string, opts ListOptions, rev int64, after string) string {
	b, _ := json.Marshal(continueToken{Version: 1, Kind: kind, Selector: opts.Fields.String(), Revision: rev, After: after})
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeContinue reads opts.Continue: the revision and the key after
// which the list goes on (0 and "" without a token). A token of another
// kind or field selection is ErrBadContinue.
func DecodeContinue(kind string, opts ListOptions) (int64, string, error) {
	if opts.Continue == "" {
		return 0, "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(opts.Continue)
	var t continueToken
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	switch {
	case err != nil || t.Version != 1 || t.After == "":
		return 0, "", fmt.Errorf("%w: not made by this pivirtd", ErrBadContinue)
	case t.Kind != kind:
		return 0, "", fmt.Errorf("%w: it continues a list of %s, not %s", ErrBadContinue, t.Kind, kind)
	case t.Selector != opts.Fields.String():
		return 0, "", fmt.Errorf("%w: it continues a list with field selector %q, not %q", ErrBadContinue, t.Selector, opts.Fields.String())
	}
	return t.Revision, t.After, nil
}
