// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"io"
	"strings"
)

// widthWriter aligns tab-separated lines like the table tabwriter, but
// remembers column widths across flushes so rows printed later by watch
// line up under the first table (kubectl's tabwriter.RememberWidths).
type widthWriter struct {
	w      io.Writer
	widths []int
	buf    []byte
}

func newWidthWriter(w io.Writer) *widthWriter { return &widthWriter{w: w} }

func (ww *widthWriter) Write(p []byte) (int, error) {
	ww.buf = append(ww.buf, p...)
	return len(p), nil
}

// reserve makes column col at least wide enough for a cell of n bytes.
func (ww *widthWriter) reserve(col, n int) {
	for len(ww.widths) <= col {
		ww.widths = append(ww.widths, 0)
	}
	ww.widths[col] = max(ww.widths[col], n+3)
}

// Flush writes the complete lines buffered so far.
func (ww *widthWriter) Flush() error {
	end := bytes.LastIndexByte(ww.buf, '\n')
	if end < 0 {
		return nil
	}
	lines := strings.Split(string(ww.buf[:end]), "\n")
	ww.buf = ww.buf[end+1:]
	rows := make([][]string, len(lines))
	for i, l := range lines {
		rows[i] = strings.Split(l, "\t")
		for j, cell := range rows[i][:len(rows[i])-1] {
			for len(ww.widths) <= j {
				ww.widths = append(ww.widths, 0)
			}
			// Same cell width as newTabWriter: minwidth 6, padding 3.
			ww.widths[j] = max(ww.widths[j], len(cell)+3, 6)
		}
	}
	var out strings.Builder
	for _, r := range rows {
		for j, cell := range r {
			out.WriteString(cell)
			if j < len(r)-1 {
				out.WriteString(strings.Repeat(" ", ww.widths[j]-len(cell)))
			}
		}
		out.WriteByte('\n')
	}
	_, err := io.WriteString(ww.w, out.String())
	return err
}
