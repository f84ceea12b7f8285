// SPDX-License-Identifier: Apache-2.0

package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/tidwall/gjson"

	"pivirt.hu/pivirt/api/fields"
	"pivirt.hu/pivirt/api/labels"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
	"pivirt.hu/pivirt/api/resource/v1/resourcev1connect"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/store"
)

// ResourceServer serves resourcev1connect.ResourceServiceHandler.
type ResourceServer struct {
	Store store.Store
	// Index keeps admission's view between transactions; every write of
	// the daemon goes through it.
	Index    *admission.Index
	Recorder *events.Recorder
	Log      *slog.Logger
	Now      func() time.Time
	// Clustered: other nodes share the store (admission.Options.Clustered).
	Clustered bool
	// Nodes lists the nodes registered in the store (ListNodes).
	Nodes func(ctx context.Context) ([]*resourcev1.Node, error)

	// partSize is the objects per transaction an apply tries first:
	// half of the last part the store refused as too large (0: none
	// refused yet, no limit), so that only the first large apply pays
	// for finding a size the store accepts.
	partSize atomic.Int64
}

var _ resourcev1connect.ResourceServiceHandler = (*ResourceServer)(nil)

func (s *ResourceServer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// MaxRequestBytes caps one API request (after decompression): an apply of
// 10,000 leases is about 3 MiB, and a caller must not be able to make the
// daemon buffer more than this. A larger request is refused with
// ResourceExhausted, naming both sizes.
const MaxRequestBytes = 32 << 20

// HandlerOptions are the options every API handler is built with.
func HandlerOptions(extra ...connect.HandlerOption) []connect.HandlerOption {
	return append([]connect.HandlerOption{connect.WithReadMaxBytes(MaxRequestBytes)}, extra...)
}

// Apply admits and stores every object of the request in one transaction
// (one fsync), each on its own: a refused object gets its error in its
// result and the others still apply. Where the store limits a
// transaction (etcd), the objects go in as many as it takes, in order
// (see applyInParts).
func (s *ResourceServer) Apply(ctx context.Context, req *connect.Request[resourcev1.ApplyRequest]) (*connect.Response[resourcev1.ApplyResponse], error) {
	objs := make([]*pivirtv1.Object, len(req.Msg.Objects))
	results := make([]*resourcev1.ApplyResult, len(req.Msg.Objects))
	for i, raw := range req.Msg.Objects {
		results[i] = &resourcev1.ApplyResult{}
		o, err := pivirtv1.DecodeObject(raw)
		if o != nil {
			results[i].Kind, results[i].Name = o.Kind, o.Metadata.Name
			if k, err := pivirtv1.LookupKind(o.Kind); err == nil {
				results[i].Kind = k.Kind
			}
		}
		if err != nil {
			results[i].Error, results[i].Code = err.Error(), connect.CodeInvalidArgument.String()
			continue
		}
		objs[i] = o
	}
	opts := admission.Options{
		Privileged: RoleFrom(ctx) == RoleCluster,
		DryRun:     req.Msg.DryRun,
		Now:        s.now(),
		Clustered:  s.Clustered,
	}
	rev, anyStored, err := s.applyInParts(ctx, opts, objs, results)
	if err != nil {
		return nil, connectError(fmt.Errorf("applying: %w", err))
	}
	if !req.Msg.DryRun && anyStored {
		for _, res := range results {
			switch res.Action {
			case "created":
				s.Recorder.Record(res.Kind, res.Name, events.Normal, "Created", "stored by apply")
			case "configured":
				s.Recorder.Record(res.Kind, res.Name, events.Normal, "Configured", "updated by apply")
			}
		}
	}
	return connect.NewResponse(&resourcev1.ApplyResponse{Results: results, Revision: rev}), nil
}

// Get returns one object.
func (s *ResourceServer) Get(ctx context.Context, req *connect.Request[resourcev1.GetRequest]) (*connect.Response[resourcev1.GetResponse], error) {
	k, err := lookupKind(req.Msg.Kind)
	if err != nil {
		return nil, connectError(err)
	}
	o, err := s.Store.Get(ctx, k.Kind, req.Msg.Name)
	if err != nil {
		return nil, connectError(fmt.Errorf("%s %q: %w", lower(k.Kind), req.Msg.Name, err))
	}
	b, err := json.Marshal(o)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&resourcev1.GetResponse{Object: b}), nil
}

// List returns the objects of a kind (every kind when empty) matching the
// label and field selectors, a page at a time when the request sets a
// limit.
func (s *ResourceServer) List(ctx context.Context, req *connect.Request[resourcev1.ListRequest]) (*connect.Response[resourcev1.ListResponse], error) {
	kind := ""
	if req.Msg.Kind != "" {
		k, err := lookupKind(req.Msg.Kind)
		if err != nil {
			return nil, connectError(err)
		}
		kind = k.Kind
	}
	sel, err := labels.Parse(req.Msg.LabelSelector)
	if err != nil {
		return nil, connectError(fmt.Errorf("%w: %w", errInvalid, err))
	}
	fs, err := fields.Parse(kind, req.Msg.FieldSelector)
	if err != nil {
		return nil, connectError(fmt.Errorf("%w: %w", errInvalid, err))
	}
	if req.Msg.Limit < 0 {
		return nil, connectError(fmt.Errorf("%w: limit %d: want 0 (all) or more", errInvalid, req.Msg.Limit))
	}
	opts := store.ListOptions{Fields: fs, Limit: int(req.Msg.Limit), Continue: req.Msg.Continue, Raw: true, NamesOnly: req.Msg.NamesOnly}
	if req.Msg.LabelSelector != "" {
		opts.Labels = sel // none: nothing to decode objects for
	}
	page, err := s.Store.ListPage(ctx, kind, opts)
	switch {
	case errors.Is(err, store.ErrBadContinue):
		return nil, connectError(fmt.Errorf("%w: continue: %w", errInvalid, err))
	case errors.Is(err, store.ErrCompacted):
		return nil, connectError(fmt.Errorf("the list's continue token is too old (%w): list again from the start", err))
	case err != nil:
		return nil, connectError(fmt.Errorf("listing %s: %w", kind, err))
	}
	out := &resourcev1.ListResponse{Revision: page.Revision, Continue: page.Continue, Objects: page.Raw}
	if req.Msg.MetadataOnly && !req.Msg.NamesOnly {
		for i, raw := range out.Objects {
			out.Objects[i] = metadataOnly(raw)
		}
	}
	return connect.NewResponse(out), nil
}

// metadataOnly is an object's JSON without its spec and status.
func metadataOnly(raw []byte) []byte {
	r := gjson.GetManyBytes(raw, "apiVersion", "kind", "metadata")
	b := append([]byte(`{"apiVersion":`), r[0].Raw...)
	b = append(append(b, `,"kind":`...), r[1].Raw...)
	b = append(append(b, `,"metadata":`...), r[2].Raw...)
	return append(b, '}')
}

// Delete removes an object and its dependents.
func (s *ResourceServer) Delete(ctx context.Context, req *connect.Request[resourcev1.DeleteRequest]) (*connect.Response[resourcev1.DeleteResponse], error) {
	k, err := lookupKind(req.Msg.Kind)
	if err != nil {
		return nil, connectError(err)
	}
	opts := admission.Options{Privileged: RoleFrom(ctx) == RoleCluster, DryRun: req.Msg.DryRun, Now: s.now(), Clustered: s.Clustered}
	var deleted []string
	_, err = s.Index.Update(ctx, s.Store, opts, func(b *admission.Batch) error {
		var err error
		deleted, err = b.Delete(k.Kind, req.Msg.Name, req.Msg.ResourceVersion)
		return err
	})
	if err != nil {
		return nil, connectError(fmt.Errorf("deleting %s %q: %w", lower(k.Kind), req.Msg.Name, err))
	}
	if !req.Msg.DryRun {
		for _, d := range deleted {
			if kind, name, ok := cutKindName(d); ok {
				s.Recorder.Forget(kind, name)
			}
		}
	}
	return connect.NewResponse(&resourcev1.DeleteResponse{Deleted: deleted}), nil
}

// Watch streams store changes of a kind after a revision.
func (s *ResourceServer) Watch(ctx context.Context, req *connect.Request[resourcev1.WatchRequest], stream *connect.ServerStream[resourcev1.WatchResponse]) error {
	kind := ""
	if req.Msg.Kind != "" {
		k, err := lookupKind(req.Msg.Kind)
		if err != nil {
			return connectError(err)
		}
		kind = k.Kind
	}
	ch, err := s.Store.Watch(ctx, req.Msg.FromRevision)
	if err != nil {
		if errors.Is(err, store.ErrCompacted) {
			return connect.NewError(connect.CodeOutOfRange, err)
		}
		return connectError(err)
	}
	for ev := range ch {
		if kind != "" && ev.Object.Kind != kind {
			continue
		}
		b, err := json.Marshal(ev.Object)
		if err != nil {
			return connectError(err)
		}
		if err := stream.Send(&resourcev1.WatchResponse{Type: ev.Type.String(), Object: b, Revision: ev.Revision}); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return connect.NewError(connect.CodeCanceled, err)
	}
	return connect.NewError(connect.CodeUnavailable, errors.New("watch ended: the store closed it (too slow a reader, or shutting down)"))
}

// Events returns the recent events of one object.
func (s *ResourceServer) Events(ctx context.Context, req *connect.Request[resourcev1.EventsRequest]) (*connect.Response[resourcev1.EventsResponse], error) {
	k, err := lookupKind(req.Msg.Kind)
	if err != nil {
		return nil, connectError(err)
	}
	out := &resourcev1.EventsResponse{}
	for _, e := range s.Recorder.Events(k.Kind, req.Msg.Name) {
		out.Events = append(out.Events, &resourcev1.Event{
			Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count,
			FirstTimestampUnix: e.First.Unix(), LastTimestampUnix: e.Last.Unix(),
		})
	}
	return connect.NewResponse(out), nil
}

func lookupKind(name string) (pivirtv1.KindInfo, error) {
	k, err := pivirtv1.LookupKind(name)
	if err != nil {
		return k, fmt.Errorf("%w: %w", errInvalid, err)
	}
	return k, nil
}

// applyInParts admits and stores objs (nil ones are skipped: refused at
// decoding) in one transaction, or, when the store refuses it as too
// large (store.ErrTooLarge: etcd's --max-txn-ops, 128 by default, is
// about 40 leases), in consecutive parts of half the size until one fits,
// each part one transaction. Each object's admission stays within one
// transaction, and a later object sees the earlier ones. An object too
// large on its own is refused with ResourceExhausted, naming the limit.
// A failure after some part was stored does not fail the request: the
// objects not stored get the error in their results.
func (s *ResourceServer) applyInParts(ctx context.Context, opts admission.Options, objs []*pivirtv1.Object, results []*resourcev1.ApplyResult) (rev int64, anyStored bool, err error) {
	var pending []int
	for i, o := range objs {
		if o != nil {
			pending = append(pending, i)
		}
	}
	size := len(pending)
	if learned := int(s.partSize.Load()); learned > 0 {
		size = min(size, learned)
	}
	if len(pending) == 0 {
		rev, _, err := s.applyPart(ctx, opts, objs, results, nil)
		return rev, false, err
	}
	stored := false // some part committed
	for len(pending) > 0 {
		part := pending[:min(size, len(pending))]
		r, wrote, err := s.applyPart(ctx, opts, objs, results, part)
		switch {
		case err == nil:
			rev, anyStored, stored = r, anyStored || wrote, true
			pending = pending[len(part):]
		case errors.Is(err, store.ErrTooLarge) && len(part) > 1:
			size = len(part) / 2
			s.partSize.Store(int64(size))
		case errors.Is(err, store.ErrTooLarge):
			o := objs[part[0]]
			refuse(results[part[0]], fmt.Errorf("applying %s/%s on its own: %w", o.Kind, o.Metadata.Name, err))
			pending = pending[1:]
		case !stored:
			return 0, false, err
		default:
			for _, i := range pending {
				refuse(results[i], fmt.Errorf("not stored (the objects before it were): %w", err))
			}
			pending = nil
		}
	}
	return rev, anyStored, nil
}

// applyPart admits the objects objs[i] for i in part in one transaction.
// On an error their results are cleared: nothing of them was stored.
func (s *ResourceServer) applyPart(ctx context.Context, opts admission.Options, objs []*pivirtv1.Object, results []*resourcev1.ApplyResult, part []int) (int64, bool, error) {
	var anyStored bool
	rev, err := s.Index.Update(ctx, s.Store, opts, func(b *admission.Batch) error {
		anyStored = false
		for _, i := range part {
			stored, action, err := b.Apply(objs[i].DeepCopy())
			res := results[i]
			res.Action, res.Error, res.Code, res.Object = "", "", "", nil
			if err != nil {
				res.Error, res.Code = err.Error(), code(err).String()
				continue
			}
			res.Action = action
			if res.Object, err = json.Marshal(stored); err != nil {
				return fmt.Errorf("encoding %s %q: %w", stored.Kind, stored.Metadata.Name, err)
			}
			anyStored = anyStored || action != "unchanged"
		}
		return nil
	})
	if err != nil {
		for _, i := range part {
			res := results[i]
			res.Action, res.Error, res.Code, res.Object = "", "", "", nil
		}
		return 0, false, err
	}
	return rev, anyStored, nil
}

// refuse records err as an object's result.
func refuse(res *resourcev1.ApplyResult, err error) {
	res.Action, res.Object = "", nil
	res.Error, res.Code = err.Error(), code(err).String()
}

// ListNodes answers from Nodes: the nodes registered in the store
// (control/liveness); Unimplemented without it.
func (s *ResourceServer) ListNodes(ctx context.Context, _ *connect.Request[resourcev1.ListNodesRequest]) (*connect.Response[resourcev1.ListNodesResponse], error) {
	if s.Nodes == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this pivirtd lists no nodes"))
	}
	nodes, err := s.Nodes(ctx)
	if err != nil {
		return nil, connectError(fmt.Errorf("listing nodes: %w", err))
	}
	return connect.NewResponse(&resourcev1.ListNodesResponse{Nodes: nodes}), nil
}
