// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"sigs.k8s.io/yaml"
)

// Manifest is one object read from a file, kept as JSON for the wire.
type Manifest struct {
	// Source is the file it came from, "-" for standard input.
	Source string
	// Doc is the 1-based index of its YAML document or JSON value in Source.
	Doc int
	// Kind and Name are copied from the object for messages.
	Kind, Name string
	// JSON is the object as compact JSON.
	JSON []byte
}

// manifestExts are the file endings read from a directory.
var manifestExts = map[string]bool{".yaml": true, ".yml": true, ".json": true}

// ReadManifests reads every object from paths: files, directories (their
// *.yaml, *.yml and *.json files in name order, subdirectories too when
// recursive) and "-" for in. Objects keep the order they were read in.
func ReadManifests(paths []string, recursive bool, in io.Reader) ([]Manifest, error) {
	if len(paths) == 0 {
		return nil, errors.New("must give -f with a file, directory or - for standard input")
	}
	var out []Manifest
	for _, p := range paths {
		if p == "-" {
			data, err := io.ReadAll(in)
			if err != nil {
				return nil, fmt.Errorf("reading standard input: %w", err)
			}
			ms, err := ParseManifests("-", data)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
			continue
		}
		files, err := manifestFiles(p, recursive)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", f, err)
			}
			ms, err := ParseManifests(f, data)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
	}
	return out, nil
}

// manifestFiles expands p into the files to read.
func manifestFiles(p string, recursive bool) ([]string, error) {
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the path %q does not exist", p)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != p && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		if manifestExts[strings.ToLower(filepath.Ext(path))] {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading directory %s: %w", p, err)
	}
	sort.Strings(files)
	return files, nil
}

// ParseManifests splits data into objects. It takes multi-document YAML
// ("---" separated) or a stream of JSON values; a value that is a
// {"kind":"List","items":[...]} or a JSON array contributes its items.
// Empty documents are skipped. Errors name source and document index.
func ParseManifests(source string, data []byte) ([]Manifest, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		return parseJSONStream(source, trimmed)
	}
	var docs []yamlDoc
	for _, d := range splitYAML(data) {
		if isBlankYAML(d.text) {
			continue
		}
		// Count only documents a reader sees, so a leading "---" does not
		// shift the numbers.
		d.index = len(docs) + 1
		docs = append(docs, d)
	}
	// YAML decoding dominates a large apply (10,000 leases), and documents
	// are independent: convert them on every CPU, keeping their order.
	parsed := make([][]Manifest, len(docs))
	errs := make([]error, len(docs))
	parallel(len(docs), func(i int) {
		d := docs[i]
		j, err := yaml.YAMLToJSON(d.text)
		if err != nil {
			errs[i] = fmt.Errorf("parsing %s: document %d (line %d): %w", source, d.index, d.line, err)
			return
		}
		parsed[i], errs[i] = objects(source, d.index, j)
	})
	var out []Manifest
	for i := range docs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		out = append(out, parsed[i]...)
	}
	return out, nil
}

// parallel calls f(0..n-1) on up to GOMAXPROCS goroutines; small inputs
// stay on the caller's goroutine.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n/64)
	if workers < 2 {
		for i := range n {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}

func parseJSONStream(source string, data []byte) ([]Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var out []Manifest
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parsing %s: document %d: %w", source, doc, err)
		}
		ms, err := objects(source, doc, raw)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
}

// header is the part of an object the CLI reads itself.
type header struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
}

// objects turns one decoded document (JSON) into manifests, expanding lists.
func objects(source string, doc int, j []byte) ([]Manifest, error) {
	j = bytes.TrimSpace(j)
	if len(j) == 0 || bytes.Equal(j, []byte("null")) {
		return nil, nil
	}
	where := func(item int) string {
		if item == 0 {
			return fmt.Sprintf("parsing %s: document %d", source, doc)
		}
		return fmt.Sprintf("parsing %s: document %d, item %d", source, doc, item)
	}
	var items []json.RawMessage
	switch j[0] {
	case '[':
		if err := json.Unmarshal(j, &items); err != nil {
			return nil, fmt.Errorf("%s: %w", where(0), err)
		}
	case '{':
		var h header
		if err := json.Unmarshal(j, &h); err != nil {
			return nil, fmt.Errorf("%s: %w", where(0), err)
		}
		if h.Kind != "List" {
			m, err := manifest(j, h)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where(0), err)
			}
			m.Source, m.Doc = source, doc
			return []Manifest{m}, nil
		}
		items = h.Items
	default:
		return nil, fmt.Errorf("%s: want an object with apiVersion, kind, metadata and spec, got %.20s", where(0), j)
	}
	out := make([]Manifest, 0, len(items))
	for i, it := range items {
		var h header
		if err := json.Unmarshal(it, &h); err != nil {
			return nil, fmt.Errorf("%s: want an object: %w", where(i+1), err)
		}
		m, err := manifest(it, h)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where(i+1), err)
		}
		m.Source, m.Doc = source, doc
		out = append(out, m)
	}
	return out, nil
}

func manifest(j []byte, h header) (Manifest, error) {
	switch {
	case h.Kind == "":
		return Manifest{}, errors.New("kind not set")
	case h.Kind == "List":
		return Manifest{}, errors.New("a List inside a List")
	case h.Metadata.Name == "":
		return Manifest{}, fmt.Errorf("%s without metadata.name", h.Kind)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, j); err != nil {
		return Manifest{}, err
	}
	return Manifest{Kind: h.Kind, Name: h.Metadata.Name, JSON: buf.Bytes()}, nil
}

// yamlDoc is one "---" separated document.
type yamlDoc struct {
	index int // 1-based, among all documents
	line  int // 1-based line of its first line in the file
	text  []byte
}

// splitYAML splits at "---" lines (optionally followed by a comment or
// inline content) and drops "..." end markers.
func splitYAML(data []byte) []yamlDoc {
	var docs []yamlDoc
	cur := yamlDoc{index: 1, line: 1}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), len(data)+1)
	line := 0
	for sc.Scan() {
		line++
		l := sc.Bytes()
		if bytes.HasPrefix(l, []byte("---")) && (len(l) == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r') {
			docs = append(docs, cur)
			cur = yamlDoc{index: cur.index + 1, line: line + 1}
			rest := bytes.TrimSpace(l[3:])
			if len(rest) > 0 && rest[0] != '#' {
				cur.line = line
				cur.text = append(cur.text, rest...)
				cur.text = append(cur.text, '\n')
			}
			continue
		}
		if bytes.Equal(bytes.TrimRight(l, " \t\r"), []byte("...")) {
			continue
		}
		cur.text = append(cur.text, l...)
		cur.text = append(cur.text, '\n')
	}
	docs = append(docs, cur)
	return docs
}

// isBlankYAML reports whether a document holds only blanks and comments.
func isBlankYAML(b []byte) bool {
	for len(b) > 0 {
		var l []byte
		l, b, _ = bytes.Cut(b, []byte("\n"))
		l = bytes.TrimSpace(l)
		if len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}
