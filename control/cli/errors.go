// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"connectrpc.com/connect"
)

// Reason returns kubectl's reason phrase for a connect code, as printed in
// "Error from server (Reason): ...".
func Reason(code connect.Code) string {
	switch code {
	case connect.CodeNotFound:
		return "NotFound"
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return "Invalid"
	case connect.CodeAlreadyExists:
		return "AlreadyExists"
	case connect.CodeAborted:
		return "Conflict"
	case connect.CodePermissionDenied:
		return "Forbidden"
	case connect.CodeFailedPrecondition:
		// Refusals such as blockOwnerDeletion or the provisioning interlock:
		// the request is well formed but the current state forbids it.
		return "Forbidden"
	case connect.CodeUnauthenticated:
		return "Unauthorized"
	case connect.CodeResourceExhausted:
		return "TooManyRequests"
	case connect.CodeDeadlineExceeded:
		return "Timeout"
	case connect.CodeUnavailable:
		return "ServiceUnavailable"
	case connect.CodeUnimplemented:
		return "NotImplemented"
	case connect.CodeCanceled:
		return "Canceled"
	default:
		return "InternalError"
	}
}

// ServerError is a refusal by pivirtd, printed as
// "Error from server (Reason): Message".
type ServerError struct {
	Reason  string
	Message string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("Error from server (%s): %s", e.Reason, e.Message)
}

// notFound is the error kubectl prints for a missing object.
func notFound(kind, name string) error {
	return &ServerError{Reason: "NotFound", Message: fmt.Sprintf("%s %q not found", kindLower(kind), name)}
}

// isNotFound reports whether err says an object does not exist.
func isNotFound(err error) bool {
	var se *ServerError
	if errors.As(err, &se) {
		return se.Reason == "NotFound"
	}
	return connect.CodeOf(err) == connect.CodeNotFound
}

// Message renders err as pivirtctl prints it: server refusals with
// kubectl's reason phrase, an unreachable daemon with where it was looked
// for, anything else as "error: ...".
func Message(err error, target string) string {
	var se *ServerError
	if errors.As(err, &se) {
		return se.Error()
	}
	if errors.Is(err, context.Canceled) {
		return "error: interrupted"
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		if ce.Code() == connect.CodeUnavailable && isTransport(ce) {
			return unreachable(ce, target)
		}
		return (&ServerError{Reason: Reason(ce.Code()), Message: ce.Message()}).Error()
	}
	return "error: " + err.Error()
}

// isTransport reports whether an Unavailable error came from the
// connection (nothing listening, connection lost) rather than from pivirtd
// itself, which also answers Unavailable (e.g. a watch the store ended).
func isTransport(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var errno syscall.Errno
	return errors.As(err, &errno)
}

// unreachable explains a failed connection; "is it running?" only when
// nothing listens, since a permission problem needs a different fix.
func unreachable(err error, target string) string {
	switch {
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Sprintf("error: cannot reach pivirtd at %s: permission denied (run as root or as the socket's owner)", target)
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("error: cannot reach pivirtd at %s: is it running?", target)
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Message() != "" {
		return fmt.Sprintf("error: cannot reach pivirtd at %s: is it running? (%s)", target, ce.Message())
	}
	return fmt.Sprintf("error: cannot reach pivirtd at %s: is it running?", target)
}

func (r *Root) message(err error) string { return Message(err, r.conn.Target()) }

// applyErrorReason names the reason of a per-object Apply error from its
// Connect code, or guesses it from the text when the server sent none
// (older servers): admission refusals are Invalid unless the text says
// otherwise.
func applyErrorReason(code, msg string) string {
	var c connect.Code
	if code != "" && c.UnmarshalText([]byte(code)) == nil {
		return Reason(c)
	}
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "conflict"), strings.Contains(m, "resourceversion"):
		return "Conflict"
	case strings.Contains(m, "forbidden"), strings.Contains(m, "provisioning"), strings.HasSuffix(m, ": blocked"):
		return "Forbidden"
	default:
		return "Invalid"
	}
}
