// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"fmt"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

const bigSegment = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: big}
spec: {networkRef: net-big, bridge: br-big, hostIP: 10.0.0.1/16, dhcp: {delegatedRangeStart: 10.0.1.0, delegatedRangeEnd: 10.0.255.254}}
`

// leases returns n distinct static leases inside bigSegment's range.
func leases(b *testing.B, n int) []*pivirtv1.Object {
	out := make([]*pivirtv1.Object, n)
	for i := range out {
		doc := fmt.Sprintf(`{"apiVersion":"pivirt.hu/v1","kind":"DHCPLease","metadata":{"name":"vm-%d"},"spec":{"network":"br-big","macAddress":"52:54:00:00:%02x:%02x","ipAddress":"10.0.%d.%d"}}`,
			i, i>>8, i&0xff, 1+i>>8, i&0xff)
		o, err := pivirtv1.DecodeObject([]byte(doc))
		if err != nil {
			b.Fatal(err)
		}
		out[i] = o
	}
	return out
}

// BenchmarkBatchApply10kLeases admits 10,000 leases in one transaction,
// as one `pivirtctl apply` of a 10,000-document file does (fake store).
func BenchmarkBatchApply10kLeases(b *testing.B) {
	objs := leases(b, 10000)
	for b.Loop() {
		b.StopTimer()
		tx := newFakeTx()
		seg, _ := pivirtv1.DecodeObject([]byte(bigSegment))
		if _, _, err := Apply(tx, seg, Options{}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		batch := NewBatch(tx, Options{})
		for _, o := range objs {
			if _, action, err := batch.Apply(o); err != nil || action != ActionCreated {
				b.Fatalf("%s: %q %v", o.Metadata.Name, action, err)
			}
		}
	}
}

// BenchmarkApplyOneLeaseAmong10k is a single apply (its own batch) into a
// store holding 10,000 leases: dominated by listing the leases.
func BenchmarkApplyOneLeaseAmong10k(b *testing.B) {
	objs := leases(b, 10001)
	tx := newFakeTx()
	seg, _ := pivirtv1.DecodeObject([]byte(bigSegment))
	batch := NewBatch(tx, Options{})
	for _, o := range append([]*pivirtv1.Object{seg}, objs[:10000]...) {
		if _, _, err := batch.Apply(o); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; b.Loop(); i++ {
		o := objs[10000]
		if i%2 == 1 { // alternate create and configure
			o = objs[10000].DeepCopy()
			o.Spec = []byte(`{"network":"br-big","macAddress":"52:54:00:ff:ff:ff","ipAddress":"10.0.200.200","hostname":"x"}`)
		}
		if _, _, err := Apply(tx, o, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIndexApplyOneLeaseAmong10k is the same single apply through a
// long-lived Index, as pivirtd does: no listing once the index is warm.
func BenchmarkIndexApplyOneLeaseAmong10k(b *testing.B) {
	objs := leases(b, 10001)
	st, x := newFakeStore(), NewIndex()
	st.noSnapshot = true
	seg, _ := pivirtv1.DecodeObject([]byte(bigSegment))
	if _, err := x.Update(b.Context(), st, Options{}, func(batch *Batch) error {
		for _, o := range append([]*pivirtv1.Object{seg}, objs[:10000]...) {
			if _, _, err := batch.Apply(o); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		o := objs[10000]
		if i%2 == 1 {
			o = objs[10000].DeepCopy()
			o.Spec = []byte(`{"network":"br-big","macAddress":"52:54:00:ff:ff:ff","ipAddress":"10.0.200.200","hostname":"x"}`)
		}
		if _, err := x.Update(b.Context(), st, Options{}, func(batch *Batch) error {
			_, _, err := batch.Apply(o)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}
