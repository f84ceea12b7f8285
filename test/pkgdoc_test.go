// SPDX-License-Identifier: Apache-2.0

package test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs fails when a package has no doc comment, or when the
// license header became its doc (a missing blank line after SPDX), as
// tailscale's pkgdoc_test does.
func TestPackageDocs(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dirs[filepath.Dir(p)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir := range dirs {
		rel, _ := filepath.Rel(root, dir)
		pkgs, err := parser.ParseDir( //nolint:staticcheck // build tags do not matter for doc.go lookups
			token.NewFileSet(), dir, func(fi os.FileInfo) bool {
				return !strings.HasSuffix(fi.Name(), "_test.go")
			}, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		for name, pkg := range pkgs {
			doc := ""
			for _, f := range pkg.Files {
				if f.Doc != nil {
					doc += f.Doc.Text()
				}
			}
			switch {
			case strings.TrimSpace(doc) == "":
				t.Errorf("%s: package %s has no doc comment (add a doc.go)", rel, name)
			case strings.Contains(doc, "SPDX-License-Identifier"):
				t.Errorf("%s: package %s's doc is the license header (leave a blank line after it)", rel, name)
			}
		}
	}
}
