// SPDX-License-Identifier: Apache-2.0

package store

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

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
}

// Page is one page of a list.
type Page struct {
	Objects []*pivirtv1.Object
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
