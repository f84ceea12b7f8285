// SPDX-License-Identifier: Apache-2.0

package mapsync

import "pivirt.hu/pivirt/dataplane/maps/typed"

// Result counts what a sync of one map did (typed.Sync).
type Result = typed.Result
