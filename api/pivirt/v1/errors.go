// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// FieldError is one validation failure: the field path, the bad value and
// why it is bad, e.g. `spec.dhcp.delegatedRangeEnd: 192.168.101.5 is outside
// hostIP subnet 192.168.100.0/24`.
type FieldError struct {
	Path   string
	Value  any
	Detail string
}

func (e *FieldError) Error() string {
	if e.Value == nil || e.Value == "" {
		return fmt.Sprintf("%s: %s", e.Path, e.Detail)
	}
	return fmt.Sprintf("%s: %s %s", e.Path, clip(fmt.Sprint(e.Value)), e.Detail)
}

// maxShown is how much of a bad value an error echoes: a whole name (253)
// fits, a 20 MB string is not sent back whole.
const maxShown = 256

// clip cuts a value shown in an error to maxShown bytes (at a rune
// boundary) and says how long it was.
func clip(s string) string {
	if len(s) <= maxShown {
		return s
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:cut], len(s))
}

// ErrorList collects the field errors of one object.
type ErrorList []*FieldError

// Add appends an error for path.
func (l *ErrorList) Add(path string, value any, format string, args ...any) {
	*l = append(*l, &FieldError{Path: path, Value: value, Detail: fmt.Sprintf(format, args...)})
}

// Err returns nil for an empty list, else an error listing every failure.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return &ValidationError{Errors: l}
}

// ValidationError is the error admission returns; the API maps it to
// InvalidArgument.
type ValidationError struct {
	Kind, Name string
	Errors     ErrorList
}

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		msgs[i] = fe.Error()
	}
	prefix := ""
	if e.Kind != "" {
		prefix = fmt.Sprintf("%s %q is invalid: ", e.Kind, e.Name)
	}
	return prefix + strings.Join(msgs, "; ")
}
