// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"pivirt.hu/pivirt/api/fields"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
	"pivirt.hu/pivirt/api/resource/v1/resourcev1connect"
)

// testNow is the clock of every test; objects the fake creates are five
// minutes old.
var testNow = time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)

// fakeServer is an in-memory ResourceService with just enough admission
// to exercise the CLI: strict spec decoding, an IP check on leases, a
// lease type default, cascade and blockOwnerDeletion on delete.
type fakeServer struct {
	resourcev1connect.UnimplementedResourceServiceHandler

	mu         sync.Mutex
	objs       map[string]*pivirtv1.Object // by "Kind/name"
	rev        int64
	events     map[string][]*resourcev1.Event
	applySizes []int
	lists      int // List calls
	// failApply, when set, fails the Apply request with this index (0-based).
	failApply func(call int) error
	watchers  map[chan *resourcev1.WatchResponse]string // channel -> kind filter
	// watchHook, when set, runs first in Watch; an error ends the call.
	watchHook func(from int64) error
}

func newFakeServer() *fakeServer {
	return &fakeServer{
		objs:     map[string]*pivirtv1.Object{},
		events:   map[string][]*resourcev1.Event{},
		watchers: map[chan *resourcev1.WatchResponse]string{},
	}
}

func key(kind, name string) string { return kind + "/" + name }

// canonical resolves an alias the way the server would.
func canonical(kind string) (string, error) {
	k, err := pivirtv1.LookupKind(kind)
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	return k.Kind, nil
}

// admit checks and defaults one object; the error text mimics
// pivirtv1.ValidationError.
func admit(o *pivirtv1.Object) error {
	if _, err := pivirtv1.LookupKind(o.Kind); err != nil {
		return err
	}
	spec, err := o.DecodeSpec()
	if err != nil {
		return err
	}
	if l, ok := spec.(*pivirtv1.DHCPLeaseSpec); ok {
		if _, err := netip.ParseAddr(l.IPAddress); err != nil {
			return &pivirtv1.ValidationError{Kind: o.Kind, Name: o.Metadata.Name, Errors: pivirtv1.ErrorList{
				{Path: "spec.ipAddress", Value: l.IPAddress, Detail: "is not an IPv4 address"}}}
		}
		if l.Type == "" {
			l.Type = pivirtv1.LeaseStatic
		}
	}
	return o.SetSpec(spec)
}

func (f *fakeServer) Apply(_ context.Context, req *connect.Request[resourcev1.ApplyRequest]) (*connect.Response[resourcev1.ApplyResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applySizes = append(f.applySizes, len(req.Msg.GetObjects()))
	if f.failApply != nil {
		if err := f.failApply(len(f.applySizes) - 1); err != nil {
			return nil, err
		}
	}
	resp := &resourcev1.ApplyResponse{}
	for _, raw := range req.Msg.GetObjects() {
		var o pivirtv1.Object
		if err := json.Unmarshal(raw, &o); err != nil {
			resp.Results = append(resp.Results, &resourcev1.ApplyResult{Error: err.Error()})
			continue
		}
		res := &resourcev1.ApplyResult{Kind: o.Kind, Name: o.Metadata.Name}
		resp.Results = append(resp.Results, res)
		if err := admit(&o); err != nil {
			res.Error = err.Error()
			continue
		}
		o.Status = nil
		k := key(o.Kind, o.Metadata.Name)
		old := f.objs[k]
		created := testNow.Add(-5 * time.Minute)
		switch {
		case old == nil:
			res.Action = "created"
			o.Metadata.UID = "uid-" + o.Metadata.Name
			o.Metadata.Generation = 1
			o.Metadata.CreationTimestamp = &created
		default:
			o.Metadata.UID = old.Metadata.UID
			o.Metadata.CreationTimestamp = old.Metadata.CreationTimestamp
			o.Metadata.Generation = old.Metadata.Generation
			o.Status = old.Status
			o.Metadata.ResourceVersion = old.Metadata.ResourceVersion
			sameSpec := bytes.Equal(old.Spec, o.Spec)
			if !sameSpec {
				o.Metadata.Generation++
			}
			if sameSpec && reflect.DeepEqual(old.Metadata.Labels, o.Metadata.Labels) &&
				reflect.DeepEqual(old.Metadata.Annotations, o.Metadata.Annotations) {
				res.Action = "unchanged"
			} else {
				res.Action = "configured"
			}
		}
		if !req.Msg.GetDryRun() && res.Action != "unchanged" {
			f.rev++
			o.Metadata.ResourceVersion = strconv.FormatInt(f.rev, 10)
			f.objs[k] = &o
			typ := "MODIFIED"
			if old == nil {
				typ = "ADDED"
			}
			f.notify(typ, &o)
		}
		res.Object, _ = json.Marshal(&o)
	}
	resp.Revision = f.rev
	return connect.NewResponse(resp), nil
}

// notify sends an event to the watchers; called with f.mu held.
func (f *fakeServer) notify(typ string, o *pivirtv1.Object) {
	raw, _ := json.Marshal(o)
	for ch, kind := range f.watchers {
		if kind == "" || kind == o.Kind {
			ch <- &resourcev1.WatchResponse{Type: typ, Object: raw, Revision: f.rev}
		}
	}
}

func (f *fakeServer) Get(_ context.Context, req *connect.Request[resourcev1.GetRequest]) (*connect.Response[resourcev1.GetResponse], error) {
	kind, err := canonical(req.Msg.GetKind())
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.objs[key(kind, req.Msg.GetName())]
	if o == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("%s %s not found", kind, req.Msg.GetName()))
	}
	raw, _ := json.Marshal(o)
	return connect.NewResponse(&resourcev1.GetResponse{Object: raw}), nil
}

// matches implements only "k=v" terms, which is all the tests use.
func matches(labels map[string]string, selector string) bool {
	if selector == "" {
		return true
	}
	for _, term := range strings.Split(selector, ",") {
		k, v, _ := strings.Cut(term, "=")
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (f *fakeServer) List(_ context.Context, req *connect.Request[resourcev1.ListRequest]) (*connect.Response[resourcev1.ListResponse], error) {
	kind := ""
	if req.Msg.GetKind() != "" {
		var err error
		if kind, err = canonical(req.Msg.GetKind()); err != nil {
			return nil, err
		}
	}
	fs, err := fields.Parse(kind, req.Msg.GetFieldSelector())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var keys []string
	for k, o := range f.objs {
		if (kind == "" || o.Kind == kind) && matches(o.Metadata.Labels, req.Msg.GetLabelSelector()) && fs.Matches(o) && k > req.Msg.GetContinue() {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	resp := &resourcev1.ListResponse{Revision: f.rev}
	for i, k := range keys {
		if l := int(req.Msg.GetLimit()); l > 0 && i == l {
			resp.Continue = keys[i-1] // the real token is opaque; this one is the last key
			break
		}
		raw, _ := json.Marshal(f.objs[k])
		resp.Objects = append(resp.Objects, raw)
	}
	return connect.NewResponse(resp), nil
}

// dependents returns the keys owned, directly or not, by k.
func (f *fakeServer) dependents(k string) []string {
	var out []string
	for dk, o := range f.objs {
		for _, ref := range o.Metadata.OwnerReferences {
			if key(ref.Kind, ref.Name) == k {
				out = append(out, dk)
				out = append(out, f.dependents(dk)...)
			}
		}
	}
	sort.Strings(out)
	return out
}

func (f *fakeServer) Delete(_ context.Context, req *connect.Request[resourcev1.DeleteRequest]) (*connect.Response[resourcev1.DeleteResponse], error) {
	kind, err := canonical(req.Msg.GetKind())
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := key(kind, req.Msg.GetName())
	if f.objs[k] == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("not found"))
	}
	deps := f.dependents(k)
	for _, d := range deps {
		for _, ref := range f.objs[d].Metadata.OwnerReferences {
			if ref.BlockOwnerDeletion && key(ref.Kind, ref.Name) == k {
				return nil, connect.NewError(connect.CodeFailedPrecondition,
					fmt.Errorf("%s %q is blocked by its dependent %s", kind, req.Msg.GetName(), d))
			}
		}
	}
	gone := append([]string{k}, deps...)
	if !req.Msg.GetDryRun() {
		for _, g := range gone {
			f.rev++
			f.notify("DELETED", f.objs[g])
			delete(f.objs, g)
		}
	}
	return connect.NewResponse(&resourcev1.DeleteResponse{Deleted: gone}), nil
}

func (f *fakeServer) Events(_ context.Context, req *connect.Request[resourcev1.EventsRequest]) (*connect.Response[resourcev1.EventsResponse], error) {
	kind, err := canonical(req.Msg.GetKind())
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&resourcev1.EventsResponse{Events: f.events[key(kind, req.Msg.GetName())]}), nil
}

func (f *fakeServer) Watch(ctx context.Context, req *connect.Request[resourcev1.WatchRequest], stream *connect.ServerStream[resourcev1.WatchResponse]) error {
	if f.watchHook != nil {
		if err := f.watchHook(req.Msg.GetFromRevision()); err != nil {
			return err
		}
	}
	kind := ""
	if req.Msg.GetKind() != "" {
		var err error
		if kind, err = canonical(req.Msg.GetKind()); err != nil {
			return err
		}
	}
	ch := make(chan *resourcev1.WatchResponse, 64)
	f.mu.Lock()
	f.watchers[ch] = kind
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.watchers, ch)
		f.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

func (f *fakeServer) watching() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers) > 0
}

// put stores an object directly, status included, as Apply would have.
func (f *fakeServer) put(t *testing.T, doc string) {
	t.Helper()
	ms, err := ParseManifests("put", []byte(doc))
	if err != nil || len(ms) != 1 {
		t.Fatalf("put: %v (%d objects)", err, len(ms))
	}
	var o pivirtv1.Object
	if err := json.Unmarshal(ms[0].JSON, &o); err != nil {
		t.Fatal(err)
	}
	if err := admit(&o); err != nil {
		t.Fatal(err)
	}
	created := testNow.Add(-5 * time.Minute)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	o.Metadata.UID = "uid-" + o.Metadata.Name
	o.Metadata.Generation = 1
	o.Metadata.ResourceVersion = strconv.FormatInt(f.rev, 10)
	o.Metadata.CreationTimestamp = &created
	f.objs[key(o.Kind, o.Metadata.Name)] = &o
	f.notify("ADDED", &o)
}

// startFake serves f on a unix socket and returns its path.
func startFake(t testing.TB, f *fakeServer) string {
	t.Helper()
	return startFakeHandler(t, f)
}

// startFakeHandler serves h (a fakeServer with more methods) on a unix
// socket and returns its path.
func startFakeHandler(t testing.TB, h resourcev1connect.ResourceServiceHandler) string {
	t.Helper()
	// Unix socket paths are limited to 108 bytes, which t.TempDir can exceed.
	dir, err := os.MkdirTemp("", "pvctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "pivirtd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(resourcev1connect.NewResourceServiceHandler(h))
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return sock
}

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// run executes pivirtctl against sock and returns stdout, stderr and the
// exit status.
func run(t testing.TB, sock, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return runCtx(context.Background(), t, sock, stdin, &syncBuffer{}, args...)
}

func runCtx(ctx context.Context, t testing.TB, sock, stdin string, out *syncBuffer, args ...string) (string, string, int) {
	t.Helper()
	var errOut syncBuffer
	root := New(IOStreams{In: strings.NewReader(stdin), Out: out, ErrOut: &errOut})
	code := root.Execute(ctx, append([]string{"--socket", sock}, args...))
	return out.String(), errOut.String(), code
}
