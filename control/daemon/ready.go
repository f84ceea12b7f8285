// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	sdaemon "github.com/coreos/go-systemd/v22/daemon"

	"pivirt.hu/pivirt/control/reconcile"
)

// readiness is what "ready" means for pivirtd: every reconcile loop's
// first full pass succeeded, so everything the store held at start is in
// the dataplane: every map written, every PortSecurity whose interface
// exists attached, every DHCP segment's responder listening. Until then
// a guest may be unguarded or unanswered, and a supervisor (systemd,
// a rolling upgrade) must not count this node as serving.
type readiness struct {
	loops []*reconcile.Loop
}

// check returns whether every part is ready, and each part's line as
// /readyz?verbose prints it.
func (r *readiness) check() (bool, []string) {
	ready := true
	var lines []string
	for _, l := range r.loops {
		st := l.Status()
		switch {
		case st.Ready:
			lines = append(lines, fmt.Sprintf("[+]%s ok", l.ID))
		case st.LastErr != nil:
			ready = false
			lines = append(lines, fmt.Sprintf("[-]%s failed: %v", l.ID, st.LastErr))
		default:
			ready = false
			lines = append(lines, fmt.Sprintf("[-]%s first pass not done", l.ID))
		}
	}
	return ready, lines
}

// waiting names the parts not ready yet, for systemd's STATUS=.
func (r *readiness) waiting() []string {
	var out []string
	for _, l := range r.loops {
		if !l.Status().Ready {
			out = append(out, l.ID)
		}
	}
	return out
}

// serveHTTP adds /healthz (the process serves) and /readyz (200 once
// ready, 503 before; ?verbose lists each part, as the Kubernetes API
// server and etcd do).
func (r *readiness) serveHTTP(m *http.ServeMux) {
	m.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	m.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		ready, lines := r.check()
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		if _, verbose := req.URL.Query()["verbose"]; verbose {
			fmt.Fprintln(w, strings.Join(lines, "\n"))
		}
		if ready {
			fmt.Fprintln(w, "readyz check passed")
		} else {
			fmt.Fprintln(w, "readyz check failed")
		}
	})
}

// notifyWhenReady tells systemd (Type=notify; NOTIFY_SOCKET) READY=1 once
// every part is ready, and what it waits for until then (STATUS=); it
// logs "pivirtd ready" at that moment. Without NOTIFY_SOCKET it only logs.
func (r *readiness) notifyWhenReady(ctx context.Context, log *slog.Logger) {
	var last []string
	for ctx.Err() == nil {
		waiting := r.waiting()
		if len(waiting) == 0 {
			if _, err := sdaemon.SdNotify(false, sdaemon.SdNotifyReady+"\nSTATUS=ready: every map written, ports attached, DHCP listening"); err != nil {
				log.Warn("telling systemd we are ready", "err", err)
			}
			log.Info("pivirtd ready: every reconciler's first pass is done")
			return
		}
		if !slices.Equal(waiting, last) {
			_, _ = sdaemon.SdNotify(false, "STATUS=waiting for the first pass of: "+strings.Join(waiting, ", "))
			last = waiting
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}
