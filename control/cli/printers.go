// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/tidwall/gjson"
	"sigs.k8s.io/yaml"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// Output formats of -o.
const (
	OutputTable = ""
	OutputWide  = "wide"
	OutputName  = "name"
	OutputYAML  = "yaml"
	OutputJSON  = "json"
)

// none is what kubectl prints for an empty cell.
const none = "<none>"

// PrintOptions say how objects are printed.
type PrintOptions struct {
	// Output is one of the Output* formats.
	Output string
	// NoHeaders drops the header row of tables.
	NoHeaders bool
	// ShowLabels adds a LABELS column.
	ShowLabels bool
	// WithKind prefixes names with "kind/" (objects of several kinds).
	WithKind bool
	// Now is the reference time of AGE and EXPIRES.
	Now time.Time
	// Event, when set, adds a leading EVENT column holding it (watch).
	Event string
}

// Item is one object to print: its decoded envelope and the JSON the server
// sent, which yaml and json output reproduce field for field.
type Item struct {
	Obj *pivirtv1.Object
	Raw []byte
}

// decodeItem decodes an object the server sent. Objects and the specs of
// table rows are decoded with goccy/go-json, not encoding/json: a table of
// 100,000 leases spent half of pivirtctl's CPU in encoding/json (1.45 s of
// user time, now 0.75 s; BENCHMARKS.md, "Lists of 100,000 leases").
func decodeItem(raw []byte) (Item, error) {
	var o pivirtv1.Object
	if err := gojson.Unmarshal(raw, &o); err != nil {
		return Item{}, fmt.Errorf("decoding object from server: %w", err)
	}
	return Item{Obj: &o, Raw: raw}, nil
}

// decodeName is decodeItem of an object a names_only list returned:
// its apiVersion, kind, name and resourceVersion alone, read without
// decoding the document (a third of `get -o name`'s time at 100,000).
func decodeName(raw []byte) (Item, error) {
	r := gjson.GetManyBytes(raw, "apiVersion", "kind", "metadata.name", "metadata.resourceVersion")
	if r[1].Str == "" || r[2].Str == "" {
		return Item{}, fmt.Errorf("decoding object from server: no kind or name in %.100s", raw)
	}
	return Item{Obj: &pivirtv1.Object{APIVersion: r[0].Str, Kind: r[1].Str,
		Metadata: pivirtv1.ObjectMeta{Name: r[2].Str, ResourceVersion: r[3].Str}}, Raw: raw}, nil
}

// kindLower is the lower-case kind name used in "kind/name" and messages.
func kindLower(kind string) string {
	if k, err := pivirtv1.LookupKind(kind); err == nil {
		return strings.ToLower(k.Kind)
	}
	return strings.ToLower(kind)
}

// ValidOutput reports whether format is a known -o value.
func ValidOutput(format string) bool {
	switch format {
	case OutputTable, OutputWide, OutputName, OutputYAML, OutputJSON:
		return true
	}
	return false
}

// PrintList prints items as a list: tables (one per kind), names, or a
// kind: List document for yaml and json.
func PrintList(w io.Writer, items []Item, o PrintOptions) error {
	// One write per 64 KiB, not per cell: a table of 100,000 leases
	// written through tabwriter straight to a terminal took seconds.
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := printList(bw, items, o); err != nil {
		return err
	}
	return bw.Flush()
}

func printList(w io.Writer, items []Item, o PrintOptions) error {
	switch o.Output {
	case OutputYAML, OutputJSON:
		raws := make([]json.RawMessage, len(items))
		for i, it := range items {
			raws[i] = it.Raw
		}
		list := struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Items      []json.RawMessage `json:"items"`
		}{pivirtv1.APIVersion, "List", raws}
		b, err := json.Marshal(list)
		if err != nil {
			return fmt.Errorf("encoding list: %w", err)
		}
		return printRaw(w, b, o.Output)
	case OutputName:
		for _, it := range items {
			fmt.Fprintf(w, "%s/%s\n", kindLower(it.Obj.Kind), it.Obj.Metadata.Name)
		}
		return nil
	}
	// One table per kind, in the registry's order, separated by a blank line.
	groups := map[string][]Item{}
	var order []string
	for _, it := range items {
		k := kindLower(it.Obj.Kind)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], it)
	}
	sort.SliceStable(order, func(i, j int) bool { return kindRank(order[i]) < kindRank(order[j]) })
	for i, k := range order {
		if i > 0 {
			fmt.Fprintln(w)
		}
		tw := newTabWriter(w)
		PrintTable(tw, groups[k], o, !o.NoHeaders)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func kindRank(lower string) int {
	for i, k := range pivirtv1.Kinds {
		if strings.ToLower(k.Kind) == lower {
			return i
		}
	}
	return len(pivirtv1.Kinds)
}

// PrintObject prints one object: its YAML or JSON, its name, or a table row.
func PrintObject(w io.Writer, it Item, o PrintOptions) error {
	switch o.Output {
	case OutputYAML, OutputJSON:
		return printRaw(w, it.Raw, o.Output)
	}
	return PrintList(w, []Item{it}, o)
}

// printRaw prints a JSON document as YAML or as kubectl's 4-space JSON.
func printRaw(w io.Writer, raw []byte, format string) error {
	if format == OutputYAML {
		y, err := yaml.JSONToYAML(raw)
		if err != nil {
			return fmt.Errorf("encoding yaml: %w", err)
		}
		_, err = w.Write(y)
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "    "); err != nil {
		return fmt.Errorf("encoding json: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// newTabWriter aligns columns the way kubectl's printers do (cli-runtime
// printers.GetNewTabWriter: minwidth 6, tabwidth 4, padding 3).
func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
}

// column is one table column; wide columns appear only with -o wide.
type column struct {
	name  string
	wide  bool
	value func(r row) string
}

// row is what a column reads: the object, its typed spec and its status.
type row struct {
	obj    *pivirtv1.Object
	spec   any
	status json.RawMessage // read field by field (gjson): decoding it whole was a third of a table's time
	now    time.Time
}

// statusField is one field of the status (gjson path).
func (r row) statusField(path string) gjson.Result { return gjson.GetBytes(r.status, path) }

// phase is the PHASE cell.
func (r row) phase() string {
	if p := r.statusField("phase"); p.Type == gjson.String && p.Str != "" {
		return p.Str
	}
	return none
}

// PrintTable writes the rows of items to tw, with a header row (of the
// first item's kind) when header is true. Items are expected to be of one
// kind; each row still uses its own kind's columns. The caller flushes tw;
// watch keeps one writer across calls.
func PrintTable(tw io.Writer, items []Item, o PrintOptions, header bool) {
	if len(items) == 0 {
		return
	}
	if header {
		shown := shownColumns(items[0].Obj.Kind, o)
		names := make([]string, 0, len(shown)+2)
		if o.Event != "" {
			names = append(names, "EVENT")
		}
		for _, c := range shown {
			names = append(names, c.name)
		}
		if o.ShowLabels {
			names = append(names, "LABELS")
		}
		fmt.Fprintln(tw, strings.Join(names, "\t"))
	}
	shownOf := map[string][]column{}
	for _, it := range items {
		shown, ok := shownOf[it.Obj.Kind]
		if !ok {
			shown = shownColumns(it.Obj.Kind, o)
			shownOf[it.Obj.Kind] = shown
		}
		r := newRow(it.Obj, o.Now)
		cells := make([]string, 0, len(shown)+2)
		if o.Event != "" {
			cells = append(cells, o.Event)
		}
		for i, c := range shown {
			v := c.value(r)
			if i == 0 && o.WithKind {
				v = kindLower(it.Obj.Kind) + "/" + v
			}
			if v == "" {
				v = none
			}
			cells = append(cells, v)
		}
		if o.ShowLabels {
			cells = append(cells, labelString(it.Obj.Metadata.Labels))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
}

// shownColumns are the columns of kind that the output format shows.
func shownColumns(kind string, o PrintOptions) []column {
	var shown []column
	for _, c := range columnsOf(kind) {
		if !c.wide || o.Output == OutputWide {
			shown = append(shown, c)
		}
	}
	return shown
}

func newRow(o *pivirtv1.Object, now time.Time) row {
	r := row{obj: o, now: now}
	if k, err := pivirtv1.LookupKind(o.Kind); err == nil && len(o.Spec) > 0 {
		// Lenient on purpose: a newer server may know fields this client
		// does not, and printing must not fail over them.
		spec := k.NewSpec()
		if gojson.Unmarshal(o.Spec, spec) == nil {
			r.spec = spec
		}
	}
	r.status = o.Status
	return r
}

// labelString renders labels as k=v,k=v sorted, or <none>.
func labelString(labels map[string]string) string {
	if len(labels) == 0 {
		return none
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}

func joinOrNone(s []string) string {
	if len(s) == 0 {
		return none
	}
	return strings.Join(s, ",")
}

func boolDefault(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

var (
	colName  = column{name: "NAME", value: func(r row) string { return r.obj.Metadata.Name }}
	colPhase = column{name: "PHASE", value: row.phase}
	colAge   = column{name: "AGE", value: func(r row) string { return age(r.obj.Metadata.CreationTimestamp, r.now) }}
)

// columnsOf returns the table columns of a kind; unknown kinds get NAME,
// PHASE and AGE.
func columnsOf(kind string) []column {
	switch kindLower(kind) {
	case "networksegment":
		return segmentColumns
	case "dhcplease":
		return leaseColumns
	case "portsecurity":
		return portSecurityColumns
	case "externalip":
		return externalIPColumns
	case "vpcrouter":
		return routerColumns
	case "overlaynetwork":
		return overlayColumns
	case "network":
		return networkColumns
	}
	return []column{colName, colPhase, colAge}
}

func segmentSpec(r row) *pivirtv1.NetworkSegmentSpec {
	if s, ok := r.spec.(*pivirtv1.NetworkSegmentSpec); ok {
		return s
	}
	return &pivirtv1.NetworkSegmentSpec{}
}

var segmentColumns = []column{
	colName,
	{name: "BRIDGE", value: func(r row) string { return segmentSpec(r).Bridge }},
	{name: "HOSTIP", value: func(r row) string { return segmentSpec(r).HostIP }},
	{name: "RANGE", value: func(r row) string {
		d := segmentSpec(r).DHCP
		if d.DelegatedRangeStart == "" && d.DelegatedRangeEnd == "" {
			return none
		}
		return d.DelegatedRangeStart + "-" + d.DelegatedRangeEnd
	}},
	{name: "DHCP", value: func(r row) string { return strconv.FormatBool(segmentSpec(r).DHCP.IsEnabled()) }},
	colPhase,
	colAge,
	{name: "LEASE-TIME", wide: true, value: func(r row) string {
		if t := segmentSpec(r).DHCP.DefaultLeaseTime; t != nil && *t > 0 {
			return strconv.FormatInt(*t, 10) + "s"
		}
		return none
	}},
	{name: "DNS", wide: true, value: func(r row) string { return joinOrNone(segmentSpec(r).DHCP.DNSServers) }},
}

func leaseSpec(r row) *pivirtv1.DHCPLeaseSpec {
	if s, ok := r.spec.(*pivirtv1.DHCPLeaseSpec); ok {
		return s
	}
	return &pivirtv1.DHCPLeaseSpec{}
}

var leaseColumns = []column{
	colName,
	{name: "NETWORK", value: func(r row) string { return leaseSpec(r).Network }},
	{name: "MAC", value: func(r row) string { return leaseSpec(r).MACAddress }},
	{name: "IP", value: func(r row) string { return leaseSpec(r).IPAddress }},
	{name: "TYPE", value: func(r row) string {
		if t := leaseSpec(r).Type; t != "" {
			return t
		}
		return pivirtv1.LeaseStatic
	}},
	{name: "EXPIRES", value: func(r row) string {
		e := leaseSpec(r).ExpiresAt
		switch {
		case e == nil:
			return none
		case !e.After(r.now):
			return "expired"
		}
		return "in " + HumanDuration(e.Sub(r.now))
	}},
	// The node that serves it (label pivirt.hu/node): dynamic leases are
	// stamped by the pivirtd that ACKed them, reservations may be placed.
	{name: "NODE", value: func(r row) string {
		if n := r.obj.Metadata.Labels[pivirtv1.NodeLabel]; n != "" {
			return n
		}
		return none
	}},
	// Another MAC that holds the address too, as MAC@node (its Conflict
	// condition, control/collision).
	{name: "CONFLICT", value: func(r row) string {
		if c := pivirtv1.ConflictSummary(r.obj.Status); c != "" {
			return c
		}
		return none
	}},
	colPhase,
	colAge,
	{name: "HOSTNAME", wide: true, value: func(r row) string { return leaseSpec(r).Hostname }},
}

func portSecuritySpec(r row) *pivirtv1.PortSecuritySpec {
	if s, ok := r.spec.(*pivirtv1.PortSecuritySpec); ok {
		return s
	}
	return &pivirtv1.PortSecuritySpec{}
}

var portSecurityColumns = []column{
	colName,
	{name: "INTERFACE", value: func(r row) string {
		s := portSecuritySpec(r)
		if s.Interface == "" && s.VMRef != nil {
			return fmt.Sprintf("vm:%s/nic%d", s.VMRef.Name, s.VMRef.NIC)
		}
		return s.Interface
	}},
	{name: "MAC", value: func(r row) string { return portSecuritySpec(r).MACAddress }},
	{name: "IPS", value: func(r row) string {
		s := portSecuritySpec(r)
		return joinOrNone(append(append([]string{}, s.IPAddresses...), s.IPv6Addresses...))
	}},
	colPhase,
	colAge,
	{name: "GUARDS", wide: true, value: func(r row) string {
		s := portSecuritySpec(r)
		var g []string
		if boolDefault(s.DHCPGuard, true) {
			g = append(g, "dhcp")
		}
		if boolDefault(s.ARPGuard, true) {
			g = append(g, "arp")
		}
		if boolDefault(s.RAGuard, true) {
			g = append(g, "ra")
		}
		if !boolDefault(s.AllowTunnels, false) {
			g = append(g, "tunnel")
		}
		if s.ACL != nil {
			g = append(g, "acl")
		}
		return joinOrNone(g)
	}},
	{name: "ATTACH", wide: true, value: func(r row) string {
		// Reported by the daemon in status.attach (e.g. "xdp/driver", "tcx").
		if a := r.statusField("attach"); a.Type == gjson.String {
			return a.Str
		}
		return none
	}},
}

func externalIPSpec(r row) *pivirtv1.ExternalIPSpec {
	if s, ok := r.spec.(*pivirtv1.ExternalIPSpec); ok {
		return s
	}
	return &pivirtv1.ExternalIPSpec{}
}

var externalIPColumns = []column{
	colName,
	{name: "ADDRESS", value: func(r row) string { return externalIPSpec(r).Address }},
	{name: "TARGET", value: func(r row) string {
		s := externalIPSpec(r)
		if s.Mode != pivirtv1.ModePortForward || len(s.Ports) == 0 {
			return s.Target
		}
		ports := make([]string, len(s.Ports))
		for i, p := range s.Ports {
			tp := p.TargetPort
			if tp == 0 {
				tp = p.Port
			}
			ports[i] = fmt.Sprintf("%d->%d/%s", p.Port, tp, p.Protocol)
		}
		return s.Target + ":" + strings.Join(ports, ",")
	}},
	{name: "MODE", value: func(r row) string {
		if m := externalIPSpec(r).Mode; m != "" {
			return m
		}
		return pivirtv1.ModeOneToOne
	}},
	{name: "VIA", value: func(r row) string {
		s := externalIPSpec(r)
		if s.Router != "" {
			return "router/" + s.Router
		}
		return s.Interface
	}},
	colPhase,
	colAge,
}

func routerSpec(r row) *pivirtv1.VPCRouterSpec {
	if s, ok := r.spec.(*pivirtv1.VPCRouterSpec); ok {
		return s
	}
	return &pivirtv1.VPCRouterSpec{}
}

func routerSide(s pivirtv1.RouterSide) string {
	switch {
	case s.Bridge == "" && s.IP == "":
		return none
	case s.Bridge == "":
		return s.IP
	case s.IP == "":
		return s.Bridge
	}
	return s.Bridge + ":" + s.IP
}

var routerColumns = []column{
	colName,
	{name: "INSIDE", value: func(r row) string { return routerSide(routerSpec(r).Inside) }},
	{name: "UPLINK", value: func(r row) string { return routerSide(routerSpec(r).Uplink) }},
	{name: "MASQ", value: func(r row) string { return strconv.FormatBool(routerSpec(r).Masquerade) }},
	colPhase,
	colAge,
}

func overlaySpec(r row) *pivirtv1.OverlayNetworkSpec {
	if s, ok := r.spec.(*pivirtv1.OverlayNetworkSpec); ok {
		return s
	}
	return &pivirtv1.OverlayNetworkSpec{}
}

// overlayColumns: VTEPS counts the nodes whose segment on the overlay
// published its tunnel endpoint (status.vteps).
var overlayColumns = []column{
	colName,
	{name: "TYPE", value: func(r row) string { return overlaySpec(r).Type }},
	{name: "VNI", value: func(r row) string { return strconv.Itoa(overlaySpec(r).VNI) }},
	{name: "MTU", value: func(r row) string { return strconv.Itoa(overlaySpec(r).MTU) }},
	{name: "PORT", value: func(r row) string { return strconv.Itoa(overlaySpec(r).Port) }},
	{name: "VTEPS", value: func(r row) string {
		return strconv.Itoa(len(r.statusField("vteps").Array()))
	}},
	colPhase,
	colAge,
}

func networkSpec(r row) *pivirtv1.NetworkSpec {
	if s, ok := r.spec.(*pivirtv1.NetworkSpec); ok {
		return s
	}
	return &pivirtv1.NetworkSpec{}
}

// networkColumns: SEGMENTS counts the segments of this node riding the
// network (status.segments).
var networkColumns = []column{
	colName,
	{name: "TYPE", value: func(r row) string { return networkSpec(r).Type }},
	{name: "BRIDGE", value: func(r row) string { return networkSpec(r).Bridge }},
	{name: "UPLINK", value: func(r row) string { return orNone(networkSpec(r).Uplink) }},
	{name: "CIDR", value: func(r row) string { return orNone(networkSpec(r).CIDR) }},
	{name: "GATEWAY", wide: true, value: func(r row) string { return orNone(networkSpec(r).Gateway) }},
	{name: "MTU", wide: true, value: func(r row) string {
		if m := networkSpec(r).MTU; m != 0 {
			return strconv.Itoa(m)
		}
		return "<kernel>"
	}},
	{name: "VLANS", wide: true, value: func(r row) string {
		vs := networkSpec(r).VLANs
		if len(vs) == 0 {
			return "<none>"
		}
		s := make([]string, len(vs))
		for i, v := range vs {
			s[i] = strconv.Itoa(v)
		}
		return strings.Join(s, ",")
	}},
	{name: "SEGMENTS", wide: true, value: func(r row) string {
		return strconv.Itoa(len(r.statusField("segments").Array()))
	}},
	colPhase,
	colAge,
}
