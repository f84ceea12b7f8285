// SPDX-License-Identifier: Apache-2.0

// Package resourcev1 holds the protobuf messages of pivirt.resource.v1, generated
// by protoc-gen-go from resource.proto (make generate).
package resourcev1
