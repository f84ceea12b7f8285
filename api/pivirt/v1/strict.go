// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// encoding/json's DisallowUnknownFields names neither the path of an
// unknown field nor that of a mistyped one, matches field names
// case-insensitively, and stops at the first problem. checkJSON walks the
// generic JSON value beside the Go type instead and reports every problem
// with its path, e.g. `spec.acl.ingress[0].port: unknown field`.

var timeType = reflect.TypeOf(time.Time{})
var rawType = reflect.TypeOf(json.RawMessage(nil))

// decodeStrict decodes data into v (a pointer), reporting unknown and
// mistyped fields under root.
func decodeStrict(data []byte, v any, root string) ErrorList {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		var errs ErrorList
		errs.Add(root, nil, "is not valid JSON: %v", err)
		return errs
	}
	var errs ErrorList
	if _, isObj := generic.(map[string]any); root == "" && !isObj && generic != nil {
		errs.Add("manifest", brief(generic), "must be an object")
		return errs
	}
	checkJSON(&errs, generic, reflect.TypeOf(v).Elem(), root)
	if len(errs) > 0 {
		return errs
	}
	if err := json.Unmarshal(data, v); err != nil {
		// checkJSON mirrors encoding/json, so this is a bug there.
		errs.Add(root, nil, "cannot be decoded: %v", err)
	}
	return errs
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func itoa(i int) string { return strconv.Itoa(i) }

// checkJSON checks that v (decoded with UseNumber) fits t.
func checkJSON(errs *ErrorList, v any, t reflect.Type, path string) {
	if v == nil {
		return // null leaves the zero value, as encoding/json does
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == rawType:
		return
	case t == timeType:
		s, ok := v.(string)
		if !ok {
			errs.Add(path, brief(v), "must be an RFC 3339 time string")
		} else if _, err := time.Parse(time.RFC3339, s); err != nil {
			errs.Add(path, show(s), "is not an RFC 3339 time (want e.g. 2026-12-02T17:00:00Z)")
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			errs.Add(path, brief(v), "must be an object")
			return
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f, ok := fields[k]
			if !ok {
				if hint := foldMatch(fields, k); hint != "" {
					errs.Add(join(path, k), nil, "unknown field (did you mean %s?)", hint)
				} else {
					errs.Add(join(path, k), nil, "unknown field")
				}
				continue
			}
			checkJSON(errs, obj[k], f.Type, join(path, k))
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			errs.Add(path, brief(v), "must be a list")
			return
		}
		for i, e := range arr {
			checkJSON(errs, e, t.Elem(), path+"["+itoa(i)+"]")
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			errs.Add(path, brief(v), "must be an object")
			return
		}
		for _, k := range sortedAnyKeys(obj) {
			checkJSON(errs, obj[k], t.Elem(), path+"["+k+"]")
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			errs.Add(path, brief(v), "must be a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			errs.Add(path, brief(v), "must be true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			errs.Add(path, brief(v), "must be an integer")
		} else if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			errs.Add(path, string(n), "is not an integer in range")
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			errs.Add(path, brief(v), "must be an integer")
		} else if _, err := strconv.ParseUint(string(n), 10, t.Bits()); err != nil {
			errs.Add(path, string(n), "is not a non-negative integer in range")
		}
	}
}

// jsonFields maps the JSON names of t's exported fields to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	m := make(map[string]reflect.StructField, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f
	}
	return m
}

// foldMatch returns the field name equal to k but for case, if any.
func foldMatch(fields map[string]reflect.StructField, k string) string {
	for name := range fields {
		if strings.EqualFold(name, k) {
			return name
		}
	}
	return ""
}

func sortedAnyKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// brief renders a JSON value for an error message, shortened.
func brief(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	if len(b) > 40 {
		return string(b[:37]) + "..."
	}
	return string(b)
}
