// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"runtime"
	"strconv"
	"time"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
	"pivirt.hu/pivirt/control/store/etcd"
)

// storeStatusTimeout bounds the store's part of a status call: a status
// must answer when etcd does not.
const storeStatusTimeout = 5 * time.Second

// status is what the daemon says of itself in InspectService.Status:
// build, node, readiness, the store's health and each controller loop's
// last pass (inspect.Server adds the maps, ports and responders).
func (d *Daemon) status(ctx context.Context) *inspectv1.StatusResponse {
	version := d.cfg.Version
	if version == "" {
		version = "dev"
	}
	ready, _ := d.ready.check()
	out := &inspectv1.StatusResponse{Version: version, Revision: readBuild(version).revision, GoVersion: runtime.Version(),
		Node: d.cfg.Node, StartedUnix: d.started.Unix(), Ready: ready, Bpffs: d.cfg.BPFFS, Store: d.storeStatus(ctx)}
	for _, l := range d.ready.loops {
		st := l.Status()
		c := &inspectv1.ControllerStatus{Name: l.ID, Ready: st.Ready, Passes: st.Passes}
		if !st.Last.IsZero() {
			c.LastPassUnixMs = st.Last.UnixMilli()
		}
		if st.LastErr != nil {
			c.LastError = st.LastErr.Error()
		}
		out.Controllers = append(out.Controllers, c)
	}
	return out
}

// storeStatus reads the store's revision and, on etcd, every member's
// status.
func (d *Daemon) storeStatus(ctx context.Context) *inspectv1.StoreStatus {
	ctx, cancel := context.WithTimeout(ctx, storeStatusTimeout)
	defer cancel()
	out := &inspectv1.StoreStatus{Backend: d.cfg.Store}
	if rev, err := d.store.Revision(ctx); err != nil {
		out.Error = err.Error()
	} else {
		out.Revision = rev
	}
	es, ok := d.store.(*etcd.Store)
	if !ok {
		out.Path = d.cfg.StatePath()
		return out
	}
	out.Endpoints, out.Prefix = es.Endpoints(), d.cfg.EtcdPrefix
	members, err := es.Members(ctx)
	if err != nil {
		if out.Error == "" {
			out.Error = err.Error()
		}
		return out
	}
	for _, m := range members {
		em := &inspectv1.EtcdMember{Name: m.Name, Id: strconv.FormatUint(m.ID, 16), ClientUrls: m.ClientURLs,
			Healthy: m.Healthy, Leader: m.Leader, DbSize: m.DBSize}
		if m.Err != nil {
			em.Error = m.Err.Error()
		}
		out.Members = append(out.Members, em)
	}
	return out
}
