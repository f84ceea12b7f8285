// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// build says which pivirtd runs: its version, the git revision it was
// built from, the Go release.
type build struct{ version, revision, goVersion string }

func readBuild(version string) build {
	if version == "" {
		version = "dev"
	}
	b := build{version: version, revision: "unknown", goVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				b.revision = s.Value
			}
		}
	}
	return b
}

// buildInfo is pivirt_build_info: always 1, labelled with what runs, so
// that a fleet's dashboards and alerts can tell its versions apart (as
// go_build_info and Kubernetes' *_build_info do).
func buildInfo(b build) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "pivirt_build_info",
		Help:        "Always 1; the labels say which pivirtd runs: its version, the git revision it was built from, and the Go release.",
		ConstLabels: prometheus.Labels{"version": b.version, "revision": b.revision, "goversion": b.goVersion},
	}, func() float64 { return 1 })
}
