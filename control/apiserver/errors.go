// SPDX-License-Identifier: Apache-2.0

package apiserver

import (
	"errors"

	"connectrpc.com/connect"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/store"
)

// errInvalid marks requests that are malformed before admission sees them
// (bad JSON, unknown kind, bad selector).
var errInvalid = errors.New("invalid request")

// code maps an error to the Connect code clients branch on.
func code(err error) connect.Code {
	var ve *pivirtv1.ValidationError
	switch {
	case errors.As(err, &ve), errors.Is(err, errInvalid):
		return connect.CodeInvalidArgument
	case errors.Is(err, store.ErrNotFound):
		return connect.CodeNotFound
	case errors.Is(err, store.ErrExists):
		return connect.CodeAlreadyExists
	case errors.Is(err, store.ErrConflict):
		return connect.CodeAborted
	case errors.Is(err, admission.ErrForbidden):
		return connect.CodePermissionDenied
	case errors.Is(err, admission.ErrBlocked):
		return connect.CodeFailedPrecondition
	case errors.Is(err, store.ErrUnavailable):
		return connect.CodeUnavailable
	case errors.Is(err, store.ErrTooLarge):
		return connect.CodeResourceExhausted
	case errors.Is(err, store.ErrCompacted):
		return connect.CodeOutOfRange
	}
	return connect.CodeInternal
}

// connectError wraps err with its Connect code.
func connectError(err error) error {
	if err == nil {
		return nil
	}
	return connect.NewError(code(err), err)
}
