// SPDX-License-Identifier: Apache-2.0

package portguard

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"pivirt.hu/pivirt/dataplane/guard"
)

var descFrames = prometheus.NewDesc("pivirt_guard_frames_total",
	"Frames the port guard saw from a VM port, by verdict and reason (pv_counters_v3).",
	[]string{"interface", "verdict", "reason"}, nil)

var descRepairs = prometheus.NewDesc("pivirt_resync_repairs_total",
	"Guard map entries the periodic full resync found wrong and rewrote, by map; changes reach the maps object by object, so this should stay 0.",
	[]string{"map"}, nil)

// Describe implements prometheus.Collector.
func (c *Controller) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFrames
	ch <- descRepairs
}

// Collect implements prometheus.Collector from pv_counters_v3, read
// without stopping traffic (each port's slot, found through pv_ports_v2).
func (c *Controller) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	ports := make(map[uint32]string, len(c.attached))
	for name, a := range c.attached {
		ports[a.Ifindex] = name
	}
	repairs := maps.Clone(c.repairs)
	c.mu.Unlock()
	for _, m := range []string{guard.MapPorts, guard.MapAllow4, guard.MapAllow6, guard.MapLeases, guard.MapACL} {
		ch <- prometheus.MustNewConstMetric(descRepairs, prometheus.CounterValue, float64(repairs[m]), m)
	}
	var err error
	for k, totals := range c.Loader.Maps().Counters.All(&err) {
		ifname := ports[k.Ifindex]
		if ifname == "" {
			continue // a port no longer guarded
		}
		for r, v := range totals {
			if v == 0 {
				continue
			}
			reason, verdict := guard.Reason(r), "pass"
			if reason.Drop() {
				verdict = "drop"
			}
			ch <- prometheus.MustNewConstMetric(descFrames, prometheus.CounterValue, float64(v), ifname, verdict, reason.String())
		}
	}
	if err != nil {
		c.Log.Warn("reading pv_counters_v3 for metrics", "err", err)
	}
}
