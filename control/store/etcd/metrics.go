// SPDX-License-Identifier: Apache-2.0

package etcd

import "github.com/prometheus/client_golang/prometheus"

var (
	watchEventsDesc = prometheus.NewDesc("pivirt_store_watch_events_total",
		"Events this node's etcd watches received (a scoped node: its networks' leases and every other object).", nil, nil)
	watchBytesDesc = prometheus.NewDesc("pivirt_store_watch_bytes_total",
		"Bytes of the keys and values (current and previous) of the events this node's etcd watches received.", nil, nil)
)

// Describe implements prometheus.Collector.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	ch <- watchEventsDesc
	ch <- watchBytesDesc
}

// Collect implements prometheus.Collector.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(watchEventsDesc, prometheus.CounterValue, float64(s.watchEvents.Load()))
	ch <- prometheus.MustNewConstMetric(watchBytesDesc, prometheus.CounterValue, float64(s.watchBytes.Load()))
}

// WatchStats returns what this Store's watches received so far: events,
// and bytes of their keys and values.
func (s *Store) WatchStats() (events, bytes uint64) {
	return s.watchEvents.Load(), s.watchBytes.Load()
}
