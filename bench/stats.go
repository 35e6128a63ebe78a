package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// latencies are the durations of one measurement.
type latencies []time.Duration

// pct returns the p-th percentile (0 < p <= 100), nearest rank; 0 when
// empty.
func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// ms formats d in milliseconds.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

// rate formats n events over d as a per-second rate.
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// num formats a rate or count with thousands grouping and no decimals
// (one decimal below 100).
func num(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// ratio formats a/b as "2.3×", or "–" when b is 0.
func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// kib formats a byte count in KiB.
func kib(bytes float64) string {
	return fmt.Sprintf("%.1f KiB", bytes/1024)
}

// table is one scenario's markdown table with a title and notes below it,
// and the scenario's further tables, if it has several.
type table struct {
	title string
	head  []string
	rows  [][]string
	notes []string
	more  []*table
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// unavailable adds a row that says why a measurement could not be made.
func (t *table) unavailable(label, reason string) {
	row := make([]string, len(t.head))
	row[0] = label
	row[1] = "not available: " + oneLine(reason)
	for i := 2; i < len(row); i++ {
		row[i] = "–"
	}
	t.rows = append(t.rows, row)
}

func (t *table) note(format string, args ...any) {
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

func (t *table) write(w io.Writer) {
	fmt.Fprintf(w, "### %s\n\n", t.title)
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.head, " | "))
	seps := make([]string, len(t.head))
	for i := range seps {
		seps[i] = "---"
		if i > 0 {
			seps[i] = "---:"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
	for _, n := range t.notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	if len(t.notes) > 0 {
		fmt.Fprintln(w)
	}
	for _, m := range t.more {
		m.write(w)
	}
}

// oneLine makes s fit a table cell.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
