// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"github.com/prometheus/client_golang/prometheus"

	"pivirt.hu/pivirt/dataplane/dhcp/responder"
)

var (
	descReceived = prometheus.NewDesc("pivirt_dhcp_received_frames_total", "Frames the DHCP responder read from its socket.", []string{"segment"}, nil)
	descRequests = prometheus.NewDesc("pivirt_dhcp_requests_total", "Valid DHCP requests by message type.", []string{"segment", "type"}, nil)
	descReplies  = prometheus.NewDesc("pivirt_dhcp_replies_total", "DHCP replies sent by message type.", []string{"segment", "type"}, nil)
	descDropped  = prometheus.NewDesc("pivirt_dhcp_dropped_total", "Frames dropped by reason (malformed, rate limited).", []string{"segment", "reason"}, nil)
	descIgnored  = prometheus.NewDesc("pivirt_dhcp_ignored_total", "Valid requests not answered, by reason.", []string{"segment", "reason"}, nil)
	descPersist  = prometheus.NewDesc("pivirt_dhcp_persist_errors_total", "Lease groups that failed to persist (their ACKs were not sent).", []string{"segment"}, nil)
	descCommits  = prometheus.NewDesc("pivirt_dhcp_lease_commits_total", "Groups of lease changes made durable (one lease journal fdatasync each).", []string{"segment"}, nil)
	descReused   = prometheus.NewDesc("pivirt_dhcp_lease_reuses_total", "ACKs of a stored lease as it is, for the time it has left, with no write (--dhcp-lease-reuse).", []string{"segment"}, nil)
	descUnwrit   = prometheus.NewDesc("pivirt_dhcp_unwritable_acks_total", "ACKs of a durable lease for the time it has left, sent while the lease journal could not be written (a full or failing disk).", []string{"segment"}, nil)
	descPending  = prometheus.NewDesc("pivirt_dhcp_journal_pending", "Lease changes in the journal not yet stored as DHCPLease objects.", nil, nil)
	descStoreErr = prometheus.NewDesc("pivirt_dhcp_store_errors_total", "Failed attempts to store journaled lease changes (they stay in the journal and are retried).", nil, nil)
	descSockDrop = prometheus.NewDesc("pivirt_dhcp_socket_drops_total", "Frames the kernel dropped on the responder's socket before it read them (receive buffer full; PACKET_STATISTICS).", []string{"segment"}, nil)
	descReadFrm  = prometheus.NewDesc("pivirt_dhcp_read_frames", "Frames per read of the responder's socket (a full batch of 64 means the loop fell behind).", []string{"segment"}, nil)
	descCommitN  = prometheus.NewDesc("pivirt_dhcp_commit_changes", "Lease changes per durable commit (one journal fdatasync); the ACKs of a commit leave together.", []string{"segment"}, nil)
	descCommitT  = prometheus.NewDesc("pivirt_dhcp_commit_seconds", "Time of one durable commit of lease changes (journal write and fdatasync, pins).", []string{"segment"}, nil)
	descAddrs    = prometheus.NewDesc("pivirt_dhcp_addresses", "Addresses of the segment's range by state (free, bound, offered, reserved, quarantined).", []string{"segment", "state"}, nil)
	descAway     = prometheus.NewDesc("pivirt_dhcp_elsewhere_addresses", "Addresses of the segment's network that other nodes' objects hold, as this node's DHCP server knows them (held: the provisioning interlock holds them).", []string{"segment", "held"}, nil)
	descRefused  = prometheus.NewDesc("pivirt_dhcp_journal_refused_total", "Journaled lease changes the store refused, each resolved by a rule and recorded as an event (LeaseChangeRefused).", nil, nil)
	descJournErr = prometheus.NewDesc("pivirt_dhcp_journal_write_errors_total", "Failed writes of the lease journal or its snapshot (a full or failing disk under --state-dir): ACK commits, ACKs of leases as they are, export marks, compactions.", nil, nil)
	descSkipped  = prometheus.NewDesc("pivirt_dhcp_lease_db_skipped", "Parts of the lease database its last open could not read and skipped (journal records, the rest of a damaged journal segment, a damaged snapshot set aside); the log names each.", nil, nil)
)

// Describe implements prometheus.Collector.
func (m *Manager) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReceived, descRequests, descReplies, descDropped, descIgnored, descPersist, descCommits, descReused, descUnwrit, descPending, descStoreErr, descRefused, descJournErr, descSkipped, descSockDrop, descReadFrm, descCommitN, descCommitT, descAddrs, descAway} {
		ch <- d
	}
}

// Collect implements prometheus.Collector with the responders' counters.
func (m *Manager) Collect(ch chan<- prometheus.Metric) {
	m.init()
	lg := m.ledger
	j, _ := m.LeaseJournal()
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(j.Pending))
	ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.GaugeValue, float64(j.Skipped))
	ch <- prometheus.MustNewConstMetric(descJournErr, prometheus.CounterValue, float64(j.WriteErrors))
	ch <- prometheus.MustNewConstMetric(descStoreErr, prometheus.CounterValue, float64(lg.exp.errors.Load()))
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(lg.exp.refused.Load()))
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, r := range m.running {
		s := r.resp.Counters().Snapshot()
		counter := func(d *prometheus.Desc, v uint64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{name}, labels...)...)
		}
		counter(descReceived, s.Received)
		for k, v := range s.Requests {
			counter(descRequests, v, k)
		}
		for k, v := range s.Replied {
			counter(descReplies, v, k)
		}
		for _, k := range responder.DropReasons() {
			counter(descDropped, s.Dropped[k], k)
		}
		for _, k := range responder.IgnoreReasons() {
			counter(descIgnored, s.Ignored[k], k)
		}
		counter(descPersist, s.PersistErrors)
		counter(descCommits, s.Batches)
		counter(descReused, s.Reused)
		counter(descUnwrit, s.Unwritten)
		counter(descSockDrop, s.SocketDrops)
		if st, ok := m.srv.Stats(r.id); ok {
			gauge := func(d *prometheus.Desc, v int, label string) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), name, label)
			}
			gauge(descAddrs, st.Free, "free")
			gauge(descAddrs, st.Bound, "bound")
			gauge(descAddrs, st.Offered, "offered")
			gauge(descAddrs, st.Reserved, "reserved")
			gauge(descAddrs, st.Quarantined, "quarantined")
			gauge(descAway, st.Elsewhere-st.ElsewhereHeld, "false")
			gauge(descAway, st.ElsewhereHeld, "true")
		}
		c := r.resp.Counters()
		for d, h := range map[*prometheus.Desc]*responder.Histogram{descReadFrm: c.ReadFrames, descCommitN: c.CommitChanges, descCommitT: c.CommitSeconds} {
			n, sum, buckets := h.Cumulative()
			ch <- prometheus.MustNewConstHistogram(d, n, sum, buckets, name)
		}
	}
}

// SocketDrops returns what the responder of a segment found dropped on its
// socket (segment.DHCP).
func (m *Manager) SocketDrops(segment string) uint64 {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.running[segment]; r != nil {
		return r.resp.Counters().SocketDrops.Load()
	}
	return 0
}
