// SPDX-License-Identifier: Apache-2.0

// Package inspectv1 holds the protobuf messages of pivirt.inspect.v1, generated
// by protoc-gen-go from inspect.proto (make generate).
package inspectv1
