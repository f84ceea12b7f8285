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

var (
	dbSizeDesc = prometheus.NewDesc("pivirt_store_etcd_db_bytes",
		"Size of etcd's db file (the largest of the members), as the last housekeeping round read it; etcd refuses writes (NOSPACE) at its --quota-backend-bytes.", nil, nil)
	dbInUseDesc = prometheus.NewDesc("pivirt_store_etcd_db_in_use_bytes",
		"Bytes of etcd's db in use (the largest of the members): what a defragmentation would shrink the file to.", nil, nil)
	noSpaceDesc = prometheus.NewDesc("pivirt_store_etcd_nospace_alarm",
		"1 while etcd has a NOSPACE alarm raised (it refuses every write), else 0.", nil, nil)
	compactionsDesc = prometheus.NewDesc("pivirt_store_etcd_compactions_total",
		"Compactions of etcd this node made (one node of the cluster compacts each round).", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Compactor) Describe(ch chan<- *prometheus.Desc) {
	ch <- dbSizeDesc
	ch <- dbInUseDesc
	ch <- noSpaceDesc
	ch <- compactionsDesc
}

// Collect implements prometheus.Collector.
func (c *Compactor) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(dbSizeDesc, prometheus.GaugeValue, float64(c.dbSize.Load()))
	ch <- prometheus.MustNewConstMetric(dbInUseDesc, prometheus.GaugeValue, float64(c.dbInUse.Load()))
	ch <- prometheus.MustNewConstMetric(noSpaceDesc, prometheus.GaugeValue, float64(c.noSpace.Load()))
	ch <- prometheus.MustNewConstMetric(compactionsDesc, prometheus.CounterValue, float64(c.compactions.Load()))
}

// DBSize returns what the last Step read: the db file's size and the
// bytes in use, of the largest member.
func (c *Compactor) DBSize() (size, inUse int64) { return c.dbSize.Load(), c.dbInUse.Load() }
