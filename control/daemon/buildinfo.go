// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// buildInfo is pivirt_build_info: always 1, labelled with what runs, so
// that a fleet's dashboards and alerts can tell its versions apart (as
// go_build_info and Kubernetes' *_build_info do).
func buildInfo(version string) prometheus.Collector {
	if version == "" {
		version = "dev"
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "pivirt_build_info",
		Help:        "Always 1; the labels say which pivirtd runs: its version, the git revision it was built from, and the Go release.",
		ConstLabels: prometheus.Labels{"version": version, "revision": buildRevision(), "goversion": runtime.Version()},
	}, func() float64 { return 1 })
}

// buildRevision is the git commit the binary was built from ("unknown"
// when the build did not stamp one, as go build -trimpath outside a
// checkout).
func buildRevision() string {
	revision := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	return revision
}
