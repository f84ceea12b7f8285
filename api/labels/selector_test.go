// SPDX-License-Identifier: Apache-2.0

package labels

import (
	"strings"
	"testing"
)

func TestParseMatches(t *testing.T) {
	web := map[string]string{"app": "web", "tier": "front", "env": "prod"}
	db := map[string]string{"app": "db", "env": "prod"}
	bare := map[string]string{}
	tests := []struct {
		name     string
		sel      string
		want     string // canonical String()
		web, db  bool
		bareWant bool
	}{
		{"empty selects all", "", "", true, true, true},
		{"blank selects all", "  \t ", "", true, true, true},
		{"equals", "app=web", "app=web", true, false, false},
		{"double equals", "app==web", "app=web", true, false, false},
		{"not equals matches absent", "app!=web", "app!=web", false, true, true},
		{"in", "app in (web,db)", "app in (db,web)", true, true, false},
		{"in spaced", "app  in ( web , cache )", "app in (cache,web)", true, false, false},
		{"notin matches absent", "app notin (web)", "app notin (web)", false, true, true},
		{"exists", "tier", "tier", true, false, false},
		{"not exists", "!tier", "!tier", false, true, true},
		{"not exists spaced", "! tier", "!tier", false, true, true},
		{"and", "env=prod,app!=db", "app!=db,env=prod", true, false, false},
		{"and with spaces", " env = prod , tier ", "env=prod,tier", true, false, false},
		{"empty value", "tier=", "tier=", false, false, false},
		{"empty value in set", "tier in (front,)", "tier in (,front)", true, false, false},
		{"empty set is the empty value", "tier notin ()", "tier notin ()", true, true, true},
		{"prefixed key", "example.com/app=web", "example.com/app=web", false, false, false},
		{"duplicate values", "app in (web,web)", "app in (web)", true, false, false},
		{"dotted value", "v=1.2.3", "v=1.2.3", false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := Parse(tc.sel)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.sel, err)
			}
			if got := sel.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
			if got := sel.Matches(web); got != tc.web {
				t.Errorf("Matches(web) = %v, want %v", got, tc.web)
			}
			if got := sel.Matches(db); got != tc.db {
				t.Errorf("Matches(db) = %v, want %v", got, tc.db)
			}
			if got := sel.Matches(bare); got != tc.bareWant {
				t.Errorf("Matches({}) = %v, want %v", got, tc.bareWant)
			}
			if got := sel.Matches(nil); got != tc.bareWant {
				t.Errorf("Matches(nil) = %v, want %v", got, tc.bareWant)
			}
			again, err := Parse(sel.String())
			if err != nil || again.String() != sel.String() {
				t.Errorf("round trip of %q: %q, %v", sel.String(), again.String(), err)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		sel  string
		want string // the whole message
	}{
		{"a in (b", `parsing selector "a in (b": missing ")"`},
		{"a in b", `parsing selector "a in b": expected "(" after "a in", found "b"`},
		{"a in (b c)", `parsing selector "a in (b c)": expected "," or ")" in the values of "a", found "c"`},
		{"a=b,", `parsing selector "a=b,": expected a requirement after ","`},
		{",a", `parsing selector ",a": expected a label key, found ","`},
		{"a=b c=d", `parsing selector "a=b c=d": unexpected "c" after "a=b", expected ","`},
		{"a foo (b)", `parsing selector "a foo (b)": expected an operator (=, ==, !=, in, notin) after key "a", found "foo"`},
		{"a>1", `parsing selector "a>1": unsupported operator ">" after key "a" (use =, ==, !=, in, notin)`},
		{"!", `parsing selector "!": expected a key after "!", found end of input`},
		{"!a=b", `parsing selector "!a=b": unexpected "=" after "!a", expected ","`},
		{"a=(b)", `parsing selector "a=(b)": expected a value after "a=", found "("`},
		{"-a=b", `parsing selector "-a=b": invalid label key "-a": name part must start and end with an alphanumeric character`},
		{"a=b$", `parsing selector "a=b$": invalid label value "b$" for key "a": must consist of alphanumeric characters, '-', '_' or '.' (has '$')`},
		{"Ex.com/a=b", `parsing selector "Ex.com/a=b": invalid label key "Ex.com/a": prefix "Ex.com" must be a lowercase DNS subdomain (e.g. example.com)`},
		{"a/=b", `parsing selector "a/=b": invalid label key "a/": name part must not be empty`},
		{"a in (b,c$)", `parsing selector "a in (b,c$)": invalid label value "c$" for key "a": must consist of alphanumeric characters, '-', '_' or '.' (has '$')`},
	}
	for _, tc := range tests {
		t.Run(tc.sel, func(t *testing.T) {
			_, err := Parse(tc.sel)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want error %q", tc.sel, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("Parse(%q) error\n got %q\nwant %q", tc.sel, err.Error(), tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("a", 63)
	tests := []struct {
		name     string
		key      string
		keyOK    bool
		valueOK  bool // the same string as a value
		wantText string
	}{
		{"simple", "app", true, true, ""},
		{"max name", long, true, true, ""},
		{"name too long", long + "a", false, false, "no more than 63 characters"},
		{"prefixed", "pivirt.hu/generation", true, false, ""},
		{"dns prefix", "a-b.example.com/x_y.z", true, false, ""},
		{"uppercase name", "App_1", true, true, ""},
		{"uppercase prefix", "Example.com/x", false, false, "lowercase DNS subdomain"},
		{"empty prefix", "/x", false, false, "prefix must not be empty"},
		{"two slashes", "a/b/c", false, false, "must consist of"},
		{"empty", "", false, true, "must not be empty"},
		{"trailing dash", "a-", false, false, "start and end"},
		{"space", "a b", false, false, "must consist of"},
		{"prefix too long", strings.Repeat("a.", 127) + "a/x", false, false, "no more than 253"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateKey(tc.key)
			if (err == nil) != tc.keyOK {
				t.Errorf("ValidateKey(%q) = %v, want ok=%v", tc.key, err, tc.keyOK)
			}
			if err != nil && !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("ValidateKey(%q) = %q, want it to mention %q", tc.key, err, tc.wantText)
			}
			if err := ValidateValue(tc.key); (err == nil) != tc.valueOK {
				t.Errorf("ValidateValue(%q) = %v, want ok=%v", tc.key, err, tc.valueOK)
			}
		})
	}
}

func TestRequirementsCopy(t *testing.T) {
	sel := MustParse("b in (x,y),a")
	reqs := sel.Requirements()
	if len(reqs) != 2 || reqs[0].Key != "a" || reqs[0].Op != Exists || reqs[1].Op != In {
		t.Fatalf("Requirements() = %+v", reqs)
	}
	reqs[1].Values[0] = "z"
	if sel.String() != "a,b in (x,y)" {
		t.Errorf("mutating Requirements() changed the selector: %q", sel.String())
	}
	if !Everything().Empty() || sel.Empty() {
		t.Error("Empty() wrong")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "a=b", "a==b,c!=d", "a in (b,c)", "a notin (b,)", "!a", "a,b", "x.io/a=b", "a in (b", "a>1", "!!", "=,(", "a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := Parse(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "parsing selector ") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		again, err := Parse(sel.String())
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", sel.String(), s, err)
		}
		if again.String() != sel.String() {
			t.Fatalf("round trip %q -> %q", sel.String(), again.String())
		}
		sel.Matches(map[string]string{"a": "b"})
	})
}
