// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// packageSettings are the flags the Debian package's
// /etc/pivirt/pivirtd.yaml sets; every other flag is there commented out
// at its default.
var packageSettings = []struct{ name, value string }{
	// The API socket's group: its members are operators (postinst
	// creates the group).
	{"socket-group", "pivirt"},
}

// exampleConfig renders pivirtd's --config file as the package ships it:
// every flag (hidden ones, --config and --help aside) with its help as a
// comment, then "key: value" at its default, commented out, or set and
// not commented for packageSettings. It is made from the flag set, so it
// cannot drift from the flags (TestExampleConfig keeps the committed copy
// in step).
func exampleConfig(fs *pflag.FlagSet) []byte {
	var b bytes.Buffer
	b.WriteString(`# /etc/pivirt/pivirtd.yaml: pivirtd's configuration (pivirtd --config).
#
# Keys are pivirtd's flag names and values what the flag takes; a flag
# given on the command line wins over the file. Each commented-out line
# shows the default. After a change: systemctl restart pivirtd (the
# fast path, pinned programs and maps, keeps guests served meanwhile).
#
# Generated from pivirtd's flags (cmd/pivirtd/example.go); pivirtd --help
# and man 8 pivirtd say the same.
`)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "config" || f.Name == "help" || f.Name == "version" {
			return
		}
		b.WriteString("\n")
		for _, line := range wrap(f.Usage, 74) {
			b.WriteString("# " + line + "\n")
		}
		i := slices.IndexFunc(packageSettings, func(s struct{ name, value string }) bool { return s.name == f.Name })
		if i >= 0 {
			b.WriteString(configLine(f, packageSettings[i].value))
			return
		}
		b.WriteString("# " + configLine(f, f.DefValue))
	})
	return b.Bytes()
}

// configLine is "name: value\n" in the YAML that applyConfigFile reads.
func configLine(f *pflag.Flag, value string) string {
	var v any = value
	switch f.Value.Type() {
	case "stringSlice":
		items := []string{}
		if s := strings.Trim(value, "[]"); s != "" {
			items = strings.Split(s, ",")
		}
		v = items
	case "bool":
		if b, err := strconv.ParseBool(value); err == nil {
			v = b
		}
	case "int":
		if n, err := strconv.Atoi(value); err == nil {
			v = n
		}
	case "float64":
		if x, err := strconv.ParseFloat(value, 64); err == nil {
			v = x
		}
	}
	if f.Name == "node" {
		v = "NAME" // the default is the host's name, whichever host renders this
	}
	out, err := yaml.Marshal(map[string]any{f.Name: v})
	if err != nil {
		panic(fmt.Sprintf("rendering --%s: %v", f.Name, err)) // a string, bool or number always renders
	}
	return strings.ReplaceAll(strings.TrimSuffix(string(out), "\n"), "\n", "\n# ") + "\n"
}

// wrap breaks s into lines of at most width runes, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// genMan writes pivirtd(8) into dir (the hidden --gen-man DIR; the package
// build uses it).
func genMan(cmd *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	// Not this build host's name, which the default is.
	cmd.Flags().Lookup("node").DefValue = "the host's name"
	header := &doc.GenManHeader{Title: "PIVIRTD", Section: "8", Source: "pivirt " + version, Manual: "pivirt"}
	if err := doc.GenManTree(cmd, header, dir); err != nil {
		return fmt.Errorf("writing man pages to %s: %w", dir, err)
	}
	return nil
}
