// SPDX-License-Identifier: Apache-2.0

package pivirtv1

// Placeholder: defaults and per-object validation are being written; see
// the validation work item. Every method returns no error for now.

func (s *NetworkSegmentSpec) Default()            {}
func (s *NetworkSegmentSpec) Validate() ErrorList { return nil }
func (s *DHCPLeaseSpec) Default()                 {}
func (s *DHCPLeaseSpec) Validate() ErrorList      { return nil }
func (s *PortSecuritySpec) Default()              {}
func (s *PortSecuritySpec) Validate() ErrorList   { return nil }
func (s *ExternalIPSpec) Default()                {}
func (s *ExternalIPSpec) Validate() ErrorList     { return nil }
func (s *VPCRouterSpec) Default()                 {}
func (s *VPCRouterSpec) Validate() ErrorList      { return nil }
