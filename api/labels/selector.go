// SPDX-License-Identifier: Apache-2.0

package labels

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Operator is the relation a Requirement tests.
type Operator string

// Operators, spelled as String prints them.
const (
	Equals       Operator = "="
	NotEquals    Operator = "!="
	In           Operator = "in"
	NotIn        Operator = "notin"
	Exists       Operator = "exists"
	DoesNotExist Operator = "!"
)

// Requirement is one comma-separated term of a selector.
type Requirement struct {
	Key string
	Op  Operator
	// Values holds one value for Equals/NotEquals, one or more (sorted,
	// unique) for In/NotIn, none for Exists/DoesNotExist.
	Values []string
}

// Matches reports whether labels satisfy r. As in Kubernetes, != and notin
// also match objects that lack the key.
func (r Requirement) Matches(labels map[string]string) bool {
	v, ok := labels[r.Key]
	switch r.Op {
	case Exists:
		return ok
	case DoesNotExist:
		return !ok
	case Equals, In:
		return ok && slices.Contains(r.Values, v)
	case NotEquals, NotIn:
		return !ok || !slices.Contains(r.Values, v)
	}
	return false
}

func (r Requirement) String() string {
	switch r.Op {
	case Exists:
		return r.Key
	case DoesNotExist:
		return "!" + r.Key
	case Equals, NotEquals:
		return r.Key + string(r.Op) + r.Values[0]
	default:
		return r.Key + " " + string(r.Op) + " (" + strings.Join(r.Values, ",") + ")"
	}
}

// Selector is a conjunction of requirements. The zero Selector selects
// everything. It satisfies control/store.Selector.
type Selector struct {
	reqs []Requirement
}

// Everything returns the selector that matches every label set.
func Everything() Selector { return Selector{} }

// Matches reports whether labels satisfy every requirement.
func (s Selector) Matches(labels map[string]string) bool {
	for _, r := range s.reqs {
		if !r.Matches(labels) {
			return false
		}
	}
	return true
}

// Empty reports whether s selects everything.
func (s Selector) Empty() bool { return len(s.reqs) == 0 }

// Requirements returns a copy of the terms of s, sorted by key.
func (s Selector) Requirements() []Requirement {
	out := make([]Requirement, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = Requirement{Key: r.Key, Op: r.Op, Values: slices.Clone(r.Values)}
	}
	return out
}

// String prints s in canonical form: requirements sorted by key, values
// sorted, "==" written "="; Parse(s.String()) yields an equal selector.
func (s Selector) String() string {
	parts := make([]string, len(s.reqs))
	for i, r := range s.reqs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// Parse parses a kubectl label selector. The empty (or all-blank) string
// selects everything. Errors quote the selector and name the bad part, e.g.
// `parsing selector "a in (b": missing ")"`.
func Parse(s string) (Selector, error) {
	reqs, err := parse(s)
	if err != nil {
		return Selector{}, fmt.Errorf("parsing selector %q: %w", s, err)
	}
	return Selector{reqs: reqs}, nil
}

// MustParse is Parse for selectors known to be valid, e.g. in tests; it
// panics on error.
func MustParse(s string) Selector {
	sel, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}

type tokenKind int

const (
	tokEOF tokenKind = iota
	tokIdent
	tokComma
	tokOpen
	tokClose
	tokNot   // !
	tokEq    // = or ==
	tokNotEq // !=
	tokBadOp // < or >, unsupported
)

type token struct {
	kind tokenKind
	text string
}

// lex splits s into tokens. Identifiers are runs of anything but blanks and
// the symbols = ! ( ) , < >; validation of keys and values comes later.
func lex(s string) []token {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == ',':
			toks = append(toks, token{tokComma, ","})
			i++
		case c == '(':
			toks = append(toks, token{tokOpen, "("})
			i++
		case c == ')':
			toks = append(toks, token{tokClose, ")"})
			i++
		case c == '<' || c == '>':
			toks = append(toks, token{tokBadOp, string(c)})
			i++
		case c == '=':
			if strings.HasPrefix(s[i:], "==") {
				toks = append(toks, token{tokEq, "=="})
				i += 2
			} else {
				toks = append(toks, token{tokEq, "="})
				i++
			}
		case c == '!':
			if strings.HasPrefix(s[i:], "!=") {
				toks = append(toks, token{tokNotEq, "!="})
				i += 2
			} else {
				toks = append(toks, token{tokNot, "!"})
				i++
			}
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n\r,()<>=!", rune(s[j])) {
				j++
			}
			toks = append(toks, token{tokIdent, s[i:j]})
			i = j
		}
	}
	return append(toks, token{kind: tokEOF})
}

type parser struct {
	toks []token
	pos  int
}

func (p *parser) peek() token { return p.toks[p.pos] }

func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tokEOF {
		p.pos++
	}
	return t
}

func parse(s string) ([]Requirement, error) {
	p := &parser{toks: lex(s)}
	if p.peek().kind == tokEOF {
		return nil, nil
	}
	var reqs []Requirement
	for {
		r, err := p.requirement()
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, r)
		switch t := p.next(); t.kind {
		case tokEOF:
			slices.SortStableFunc(reqs, func(a, b Requirement) int { return strings.Compare(a.Key, b.Key) })
			return reqs, nil
		case tokComma:
			if p.peek().kind == tokEOF {
				return nil, errors.New(`expected a requirement after ","`)
			}
		default:
			return nil, fmt.Errorf("unexpected %q after %q, expected \",\"", t.text, r.String())
		}
	}
}

func (p *parser) requirement() (Requirement, error) {
	t := p.next()
	switch t.kind {
	case tokNot:
		k := p.next()
		if k.kind != tokIdent {
			return Requirement{}, fmt.Errorf("expected a key after \"!\", found %s", describe(k))
		}
		if err := ValidateKey(k.text); err != nil {
			return Requirement{}, fmt.Errorf("invalid label key %q: %w", k.text, err)
		}
		return Requirement{Key: k.text, Op: DoesNotExist}, nil
	case tokIdent:
	default:
		return Requirement{}, fmt.Errorf("expected a label key, found %s", describe(t))
	}
	key := t.text
	if err := ValidateKey(key); err != nil {
		return Requirement{}, fmt.Errorf("invalid label key %q: %w", key, err)
	}
	op := p.peek()
	switch {
	case op.kind == tokEOF || op.kind == tokComma:
		return Requirement{Key: key, Op: Exists}, nil
	case op.kind == tokEq || op.kind == tokNotEq:
		p.next()
		v := ""
		switch n := p.peek(); n.kind {
		case tokIdent:
			v = p.next().text
		case tokEOF, tokComma: // k= selects the empty value
		default:
			return Requirement{}, fmt.Errorf("expected a value after %q, found %s", key+op.text, describe(n))
		}
		if err := ValidateValue(v); err != nil {
			return Requirement{}, fmt.Errorf("invalid label value %q for key %q: %w", v, key, err)
		}
		o := Equals
		if op.kind == tokNotEq {
			o = NotEquals
		}
		return Requirement{Key: key, Op: o, Values: []string{v}}, nil
	case op.kind == tokIdent && (op.text == "in" || op.text == "notin"):
		p.next()
		vals, err := p.values(key, op.text)
		if err != nil {
			return Requirement{}, err
		}
		o := In
		if op.text == "notin" {
			o = NotIn
		}
		return Requirement{Key: key, Op: o, Values: vals}, nil
	case op.kind == tokBadOp:
		return Requirement{}, fmt.Errorf("unsupported operator %q after key %q (use =, ==, !=, in, notin)", op.text, key)
	default:
		return Requirement{}, fmt.Errorf("expected an operator (=, ==, !=, in, notin) after key %q, found %s", key, describe(op))
	}
}

// values parses "(a, b, ...)" after in/notin; an empty item is the empty
// value, so "()" is the set {""}, as in Kubernetes.
func (p *parser) values(key, op string) ([]string, error) {
	if t := p.next(); t.kind != tokOpen {
		return nil, fmt.Errorf("expected \"(\" after %q, found %s", key+" "+op, describe(t))
	}
	var vals []string
	for {
		v := ""
		if p.peek().kind == tokIdent {
			v = p.next().text
		}
		if err := ValidateValue(v); err != nil {
			return nil, fmt.Errorf("invalid label value %q for key %q: %w", v, key, err)
		}
		vals = append(vals, v)
		switch t := p.next(); t.kind {
		case tokComma:
		case tokClose:
			slices.Sort(vals)
			return slices.Compact(vals), nil
		case tokEOF:
			return nil, errors.New(`missing ")"`)
		default:
			return nil, fmt.Errorf("expected \",\" or \")\" in the values of %q, found %s", key, describe(t))
		}
	}
}

func describe(t token) string {
	if t.kind == tokEOF {
		return "end of input"
	}
	return fmt.Sprintf("%q", t.text)
}
