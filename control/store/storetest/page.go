// SPDX-License-Identifier: Apache-2.0

package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"pivirt.hu/pivirt/api/fields"
	"pivirt.hu/pivirt/api/labels"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// pageLease is lease i of network net, labelled odd or even.
func pageLease(network string, i int) *pivirtv1.Object {
	o := newObj(pivirtv1.KindDHCPLease, fmt.Sprintf("l-%s-%03d", network, i), map[string]string{"parity": []string{"even", "odd"}[i%2]})
	o.Spec = []byte(fmt.Sprintf(`{"network":%q,"macAddress":"52:54:00:00:%02X:%02X","ipAddress":"10.0.%d.%d","type":"dynamic"}`,
		network, len(network), i, len(network), i))
	return o
}

// pages lists kind page by page and returns every object and the pages'
// sizes; it fails on a page over the limit or a token on the last page
// missing.
func pages(t *testing.T, s store.Store, kind string, opts store.ListOptions, between func(page int)) ([]*pivirtv1.Object, []int) {
	t.Helper()
	var all []*pivirtv1.Object
	var sizes []int
	var rev int64
	for n := 0; ; n++ {
		if n > 1000 {
			t.Fatal("ListPage: no last page after 1000 pages")
		}
		p, err := s.ListPage(t.Context(), kind, opts)
		if err != nil {
			t.Fatalf("ListPage(%s, %+v) page %d: %v", kind, opts, n, err)
		}
		if opts.Limit > 0 && p.Len() > opts.Limit {
			t.Fatalf("page %d holds %d objects, limit %d", n, p.Len(), opts.Limit)
		}
		if opts.Raw && len(p.Objects) > 0 || !opts.Raw && len(p.Raw) > 0 {
			t.Fatalf("ListOptions.Raw %v, page holds %d objects and %d JSON documents", opts.Raw, len(p.Objects), len(p.Raw))
		}
		for _, raw := range p.Raw {
			var o pivirtv1.Object
			if err := json.Unmarshal(raw, &o); err != nil {
				t.Fatalf("page %d: %v: %s", n, err, raw)
			}
			if cur := get(t, s, o.Kind, o.Metadata.Name); between == nil && cur.Metadata.ResourceVersion != o.Metadata.ResourceVersion {
				t.Errorf("%s as JSON has resourceVersion %q, Get %q", o.Metadata.Name, o.Metadata.ResourceVersion, cur.Metadata.ResourceVersion)
			}
			p.Objects = append(p.Objects, &o)
		}
		if n > 0 && p.Revision != rev {
			t.Errorf("page %d read at revision %d, the first at %d", n, p.Revision, rev)
		}
		rev = p.Revision
		all, sizes = append(all, p.Objects...), append(sizes, len(p.Objects))
		if p.Continue == "" {
			return all, sizes
		}
		opts.Continue = p.Continue
		if between != nil {
			between(n)
		}
	}
}

func testListPages(t *testing.T, s store.Store) {
	var objs []*pivirtv1.Object
	for i := range 23 {
		objs = append(objs, pageLease("blue", i), pageLease("red", i))
	}
	for i := range 7 {
		objs = append(objs, pageLease("green", i))
	}
	create(t, s, objs...)
	create(t, s, newObj(kindB, "a", nil)) // another kind: never in a lease list

	want := func(keep func(o *pivirtv1.Object) bool) []string {
		var out []string
		for _, o := range objs {
			if keep(o) {
				out = append(out, o.Metadata.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		fields, labels string
		limit          int
		keep           func(o *pivirtv1.Object) bool
	}{
		{"", "", 0, func(*pivirtv1.Object) bool { return true }},
		{"", "", 5, func(*pivirtv1.Object) bool { return true }},
		{"", "", 1, func(*pivirtv1.Object) bool { return true }},
		{"", "", 53, func(*pivirtv1.Object) bool { return true }},
		{"spec.network=red", "", 4, func(o *pivirtv1.Object) bool { return strings.HasPrefix(o.Metadata.Name, "l-red-") }},
		{"spec.network=green", "", 0, func(o *pivirtv1.Object) bool { return strings.HasPrefix(o.Metadata.Name, "l-green-") }},
		{"spec.network=none", "", 3, func(*pivirtv1.Object) bool { return false }},
		{"spec.network=red", "parity=odd", 3, func(o *pivirtv1.Object) bool {
			return strings.HasPrefix(o.Metadata.Name, "l-red-") && fields.Value(o, "metadata.name")[len(o.Metadata.Name)-1]%2 == 1
		}},
		{"spec.network!=red", "", 6, func(o *pivirtv1.Object) bool { return !strings.HasPrefix(o.Metadata.Name, "l-red-") }},
		{"spec.macAddress=52-54-00-00-04-07", "", 2, func(o *pivirtv1.Object) bool { return o.Metadata.Name == "l-blue-007" }},
		{"spec.macAddress=52:54:00:00:03:07,spec.network=red", "", 2, func(o *pivirtv1.Object) bool { return o.Metadata.Name == "l-red-007" }},
		{"spec.network=blue,metadata.name=l-blue-020", "", 1, func(o *pivirtv1.Object) bool { return o.Metadata.Name == "l-blue-020" }},
	} {
		fs, err := fields.Parse(pivirtv1.KindDHCPLease, tc.fields)
		if err != nil {
			t.Fatal(err)
		}
		ls, err := labels.Parse(tc.labels)
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range []struct{ raw, names bool }{{false, false}, {true, false}, {true, true}} {
			raw := mode.raw
			opts := store.ListOptions{Fields: fs, Limit: tc.limit, Raw: raw, NamesOnly: mode.names}
			if tc.labels != "" {
				opts.Labels = ls
			}
			got, sizes := pages(t, s, pivirtv1.KindDHCPLease, opts, nil)
			for _, o := range got {
				if mode.names && (len(o.Spec) > 0 || o.Metadata.Labels != nil || o.APIVersion != pivirtv1.APIVersion || o.Kind != pivirtv1.KindDHCPLease) {
					t.Errorf("fields %q labels %q: names only, got %+v", tc.fields, tc.labels, o)
				}
			}
			gotNames := names(got)
			slices.Sort(gotNames)
			if w := want(tc.keep); !slices.Equal(gotNames, w) {
				t.Errorf("fields %q labels %q limit %d raw %v names %v: got %v, want %v (pages %v)", tc.fields, tc.labels, tc.limit, raw, mode.names, gotNames, w, sizes)
			}
			if tc.limit > 0 && len(sizes) > 1 && sizes[0] != tc.limit {
				t.Errorf("fields %q limit %d raw %v: a first page of %d of more", tc.fields, tc.limit, raw, sizes[0])
			}
		}
	}

	// Writes between pages: an object already listed is not listed again,
	// and one not yet reached and never touched is listed once.
	seen := map[string]int{}
	got, _ := pages(t, s, pivirtv1.KindDHCPLease, store.ListOptions{Limit: 7}, func(page int) {
		if page == 1 {
			rev := revision(t, s)
			l := pageLease("blue", 0)
			l.Metadata.ResourceVersion = rvOf(rev)
			if _, err := s.Update(t.Context(), func(tx store.Tx) error {
				cur, err := tx.Get(pivirtv1.KindDHCPLease, "l-blue-000")
				if err != nil {
					return err
				}
				cur.Metadata.Labels["touched"] = "yes"
				return tx.Put(cur)
			}); err != nil {
				t.Fatal(err)
			}
		}
	})
	for _, o := range got {
		seen[o.Metadata.Name]++
	}
	for _, o := range objs {
		if seen[o.Metadata.Name] != 1 {
			t.Errorf("with a write between pages, %s listed %d times", o.Metadata.Name, seen[o.Metadata.Name])
		}
	}

	// Tokens are checked: garbage, another kind's, another selection's.
	p, err := s.ListPage(t.Context(), pivirtv1.KindDHCPLease, store.ListOptions{Limit: 2})
	if err != nil || p.Continue == "" {
		t.Fatalf("first page: %v, continue %q", err, p.Continue)
	}
	red, _ := fields.Parse(pivirtv1.KindDHCPLease, "spec.network=red")
	for _, tc := range []struct {
		kind string
		opts store.ListOptions
		want string
	}{
		{pivirtv1.KindDHCPLease, store.ListOptions{Continue: "garbage!"}, "not made by this pivirtd"},
		{kindB, store.ListOptions{Continue: p.Continue}, "it continues a list of DHCPLease"},
		{pivirtv1.KindDHCPLease, store.ListOptions{Continue: p.Continue, Fields: red}, `field selector "", not "spec.network=red"`},
	} {
		_, err := s.ListPage(t.Context(), tc.kind, tc.opts)
		if !errors.Is(err, store.ErrBadContinue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ListPage(%s, continue %q) = %v, want ErrBadContinue saying %q", tc.kind, tc.opts.Continue, err, tc.want)
		}
	}
}
