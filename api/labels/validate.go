// SPDX-License-Identifier: Apache-2.0

package labels

import (
	"errors"
	"fmt"
	"strings"
)

// Limits of label keys and values, as in Kubernetes.
const (
	MaxNameLength   = 63  // the name part of a key, and a value
	MaxPrefixLength = 253 // the DNS subdomain prefix of a key
)

// ValidateKey checks a label key: an optional DNS-1123 subdomain prefix and
// a slash, then a name of at most 63 characters that starts and ends with an
// alphanumeric character and holds only alphanumerics, '-', '_' and '.'.
// The error says what is wrong without repeating the key, so callers can
// put it after a field path.
func ValidateKey(key string) error {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	if hasPrefix {
		if err := validatePrefix(prefix); err != nil {
			return err
		}
	}
	if name == "" {
		return errors.New("name part must not be empty")
	}
	if err := validateName(name); err != nil {
		return fmt.Errorf("name part %w", err)
	}
	return nil
}

// ValidateValue checks a label value: empty, or at most 63 characters that
// start and end with an alphanumeric character and hold only alphanumerics,
// '-', '_' and '.'.
func ValidateValue(value string) error {
	if value == "" {
		return nil
	}
	return validateName(value)
}

// validateName checks the shared name/value syntax; the error reads after
// "name part" or after the value.
func validateName(s string) error {
	if len(s) > MaxNameLength {
		return fmt.Errorf("must be no more than %d characters (is %d)", MaxNameLength, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("must consist of alphanumeric characters, '-', '_' or '.' (has %q)", c)
		}
	}
	if !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return errors.New("must start and end with an alphanumeric character")
	}
	return nil
}

// validatePrefix checks a DNS-1123 subdomain: lowercase labels of
// alphanumerics and '-', dot-separated, each starting and ending alphanumeric.
func validatePrefix(p string) error {
	if p == "" {
		return errors.New("prefix must not be empty")
	}
	if len(p) > MaxPrefixLength {
		return fmt.Errorf("prefix must be no more than %d characters (is %d)", MaxPrefixLength, len(p))
	}
	for part := range strings.SplitSeq(p, ".") {
		if part == "" || !isLowerAlnum(part[0]) || !isLowerAlnum(part[len(part)-1]) {
			return fmt.Errorf("prefix %q must be a lowercase DNS subdomain (e.g. example.com)", p)
		}
		for i := 0; i < len(part); i++ {
			if !isLowerAlnum(part[i]) && part[i] != '-' {
				return fmt.Errorf("prefix %q must be a lowercase DNS subdomain (e.g. example.com)", p)
			}
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isLowerAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}
