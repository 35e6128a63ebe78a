package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

// specRules is the number of rules of the seam contract (R1…R135); R115a
// is the one lettered rule.
const specRules = 135

// maxRange bounds a cited range such as R45–R51: a longer one is a typo.
const maxRange = 60

// sources are the extensions of the files whose comments are checked: Go,
// the dashboard's JavaScript and the SQL migrations.
var sources = []string{".go", ".js", ".sql"}

// self is this file, as the walk of the repository names it: its patterns
// and fixtures spell the page citations it refuses, so pageCites does not
// read it (its rule citations are still checked).
const self = "docs/citations_test.go"

var (
	// ruleRE matches a rule number; cites checks what surrounds it.
	ruleRE = regexp.MustCompile(`R([0-9]+)([a-z]?)`)
	// rangeRE matches the rest of a range right after a rule: –R51, -51.
	rangeRE = regexp.MustCompile(`^[–-]R?([0-9]+)`)
	// anchorRE matches a rule's anchor and the bold label after it.
	anchorRE = regexp.MustCompile(`<a id="r([0-9]+[a-z]?)"></a>(\*\*R([0-9]+[a-z]?)\*\*)?`)
	// ruleLinkRE matches a link to a rule anchor: [R83](#r83).
	ruleLinkRE = regexp.MustCompile(`\]\((?:seam\.md)?#r([0-9]+[a-z]?)\)`)
	// fileLinkRE matches a relative link to a file: [x](../api/openapi.yaml).
	fileLinkRE = regexp.MustCompile(`\]\(([^)#:\s]+)(#[^)]*)?\)`)
	// foreignRE matches a citation of a document the repository does not
	// hold: the seam reference, the design notes, the style notes.
	foreignRE = regexp.MustCompile(`seam-spec|DESIGN ?§|DESIGN\.md|STYLE\.md|STYLE A\.`)
	// pageRE matches a citation of a page of docs/ and the sections it
	// names: docs/seam.md, docs/seam.md §14, docs/architecture.md §5–§6.
	pageRE = regexp.MustCompile(`docs/([A-Za-z0-9_-]+\.md)((?:(?:,| and|–|-)? ?§[0-9]+)*)`)
	// sectionRE matches one section number of a page citation.
	sectionRE = regexp.MustCompile(`§([0-9]+)`)
	// rfcRE matches a section of an RFC, the one other § a comment may use.
	rfcRE = regexp.MustCompile(`RFC ?[0-9]+,? §[0-9]+(?:\.[0-9]+)*`)
	// headingRE matches a numbered section heading of a page: ## 3. One-shot…
	headingRE = regexp.MustCompile(`(?m)^## ([0-9]+)\. `)
)

func isAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z'
}

// cites returns the rules line cites, as anchor ids ("12", "115a"), a range
// expanded to every rule in it. An R counts only as a whole word, where an
// underscore separates words (TestX_R69_Y), so identifiers and hex such as
// HR12, R2D2 or 0xR1 are not citations. A range that runs backwards or
// spans more than maxRange rules is an error.
func cites(line string) ([]string, error) {
	var out []string
	next := 0 // the end of the last range: its R51 is already counted
	for _, m := range ruleRE.FindAllStringSubmatchIndex(line, -1) {
		start, end := m[0], m[1]
		if start < next || start > 0 && isAlnum(line[start-1]) || end < len(line) && isAlnum(line[end]) {
			continue
		}
		id := line[m[2]:m[3]] + line[m[4]:m[5]]
		out = append(out, id)
		r := rangeRE.FindStringSubmatch(line[end:])
		if r == nil || m[4] != m[5] {
			continue
		}
		if tail := end + len(r[0]); tail < len(line) && isAlnum(line[tail]) {
			continue
		}
		from, _ := strconv.Atoi(id)
		to, err := strconv.Atoi(r[1])
		if err != nil || to <= from || to-from > maxRange {
			return nil, fmt.Errorf("range R%s%s is not a rule range", id, r[0])
		}
		for n := from + 1; n <= to; n++ {
			out = append(out, strconv.Itoa(n))
		}
		next = end + len(r[0])
	}
	return out, nil
}

// contract is what a citation in the code can resolve to.
type contract struct {
	// rules maps a rule's anchor id ("12", "115a") to the page holding it.
	rules map[string]string
	// sections maps each page of docs/ ("seam.md") to its numbered
	// sections ("3" for "## 3. One-shot start: …").
	sections map[string]map[string]bool
}

// anchors reads the Markdown pages of dir: their rule anchors, each with
// the page that holds it, and their numbered sections. Duplicate anchors
// and anchors whose bold label names another rule are errors.
func anchors(dir fs.FS) (contract, []error) {
	c := contract{rules: map[string]string{}, sections: map[string]map[string]bool{}}
	pages, err := fs.Glob(dir, "*.md")
	if err != nil || len(pages) == 0 {
		return c, []error{fmt.Errorf("no Markdown pages: %v", err)}
	}
	found := c.rules
	var errs []error
	for _, p := range pages {
		b, err := fs.ReadFile(dir, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.sections[p] = map[string]bool{}
		for _, m := range headingRE.FindAllStringSubmatch(string(b), -1) {
			c.sections[p][m[1]] = true
		}
		for _, m := range anchorRE.FindAllStringSubmatch(string(b), -1) {
			if prev, ok := found[m[1]]; ok {
				errs = append(errs, fmt.Errorf("%s: anchor r%s is also in %s", p, m[1], prev))
			}
			if m[2] != "" && m[3] != m[1] {
				errs = append(errs, fmt.Errorf("%s: anchor r%s is labelled R%s", p, m[1], m[3]))
			}
			found[m[1]] = p
		}
	}
	return c, errs
}

// pageCites returns an error for each citation on line that does not
// resolve: a document the repository does not hold, a page of docs/ that
// does not exist or a section it does not have, and a § that belongs to no
// page citation (nor to an RFC's section).
func pageCites(line string, have contract) []error {
	var errs []error
	covered := make([]bool, len(line))
	cover := func(span []int) {
		for i := span[0]; i < span[1]; i++ {
			covered[i] = true
		}
	}
	// A foreign citation is one error, its section numbers included.
	for i, m := range foreignRE.FindAllStringIndex(line, -1) {
		if i == 0 {
			errs = append(errs, fmt.Errorf("cites %q, a document outside the repository", line[m[0]:m[1]]))
		}
		end := m[1]
		for end < len(line) && strings.IndexByte(" 0123456789.,-\xc2\xa7\xe2\x80\x93", line[end]) >= 0 {
			end++
		}
		cover([]int{m[0], end})
	}
	for _, m := range pageRE.FindAllStringSubmatchIndex(line, -1) {
		cover(m)
		page, tail := line[m[2]:m[3]], line[m[4]:m[5]]
		sections, ok := have.sections[page]
		if !ok {
			errs = append(errs, fmt.Errorf("cites docs/%s, which does not exist", page))
			continue
		}
		for _, s := range sectionRE.FindAllStringSubmatch(tail, -1) {
			if !sections[s[1]] {
				errs = append(errs, fmt.Errorf("cites docs/%s §%s, which has no such section", page, s[1]))
			}
		}
	}
	for _, m := range rfcRE.FindAllStringIndex(line, -1) {
		cover(m)
	}
	for i := strings.Index(line, "§"); i >= 0; {
		if !covered[i] {
			errs = append(errs, fmt.Errorf("cites a section (%s) without naming its docs/ page", strings.TrimSpace(line[i:min(len(line), i+8)])))
			break
		}
		next := strings.Index(line[i+1:], "§")
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return errs
}

// unresolved walks the source files of root and returns one error per citation
// that does not resolve in have — a rule without an anchor, or a page
// citation pageCites refuses (except in self) — naming file:line, and how
// many rule citations it read. Hidden directories, node_modules and vendor
// are skipped.
func unresolved(root fs.FS, have contract) (errs []error, n int, err error) {
	err = fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != "." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "vendor") {
				return fs.SkipDir
			}
			return nil
		}
		if !slices.Contains(sources, path.Ext(p)) {
			return nil
		}
		f, err := root.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for line := 1; sc.Scan(); line++ {
			if p != self {
				for _, e := range pageCites(sc.Text(), have) {
					errs = append(errs, fmt.Errorf("%s:%d %v", p, line, e))
				}
			}
			ids, err := cites(sc.Text())
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %v", p, line, err))
				continue
			}
			for _, id := range ids {
				n++
				if _, ok := have.rules[id]; !ok {
					errs = append(errs, fmt.Errorf("%s:%d cites R%s, which has no anchor in docs/", p, line, id))
				}
			}
		}
		return sc.Err()
	})
	return errs, n, err
}

// TestEveryCitedRuleHasAnAnchor is the check of this package: every rule a
// source file of the repository cites resolves to an anchor in docs/,
// every page and section it cites exists, and no source file cites a
// document the repository does not hold.
func TestEveryCitedRuleHasAnAnchor(t *testing.T) {
	have, errs := anchors(os.DirFS("."))
	for _, err := range errs {
		t.Error(err)
	}
	missing, n, err := unresolved(os.DirFS(".."), have)
	if err != nil {
		t.Fatalf("walk the repository: %v", err)
	}
	for _, err := range missing {
		t.Error(err)
	}
	// The code cites hundreds of rules; finding few means the walk or the
	// matcher broke, not that the code stopped citing.
	if n < 100 {
		t.Errorf("found only %d rule citations in the repository's Go files; want at least 100", n)
	}
}

// TestEverySpecRuleHasAnAnchor: the contract anchors every rule of the
// spec, cited or not, so that a future citation resolves; and every link to
// a rule anchor or to a relative file in docs/ resolves too.
func TestEverySpecRuleHasAnAnchor(t *testing.T) {
	have, errs := anchors(os.DirFS("."))
	for _, err := range errs {
		t.Error(err)
	}
	want := []string{"115a"}
	for n := 1; n <= specRules; n++ {
		want = append(want, strconv.Itoa(n))
	}
	for _, id := range want {
		if _, ok := have.rules[id]; !ok {
			t.Errorf("rule R%s has no anchor in docs/", id)
		}
	}
	for id := range have.rules {
		if !slices.Contains(want, id) {
			t.Errorf("anchor r%s is not a rule of the spec (R1…R%d, R115a)", id, specRules)
		}
	}
	pages, err := fs.Glob(os.DirFS("."), "*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := foreignRE.FindString(string(b)); m != "" {
			t.Errorf("%s cites %q, a document outside the repository", p, m)
		}
		for _, m := range ruleLinkRE.FindAllStringSubmatch(string(b), -1) {
			if _, ok := have.rules[m[1]]; !ok {
				t.Errorf("%s links to #r%s, which is no anchor", p, m[1])
			}
		}
		for _, m := range fileLinkRE.FindAllStringSubmatch(string(b), -1) {
			if _, err := os.Stat(path.Clean(m[1])); err != nil {
				t.Errorf("%s links to %s: %v", p, m[1], err)
			}
		}
	}
}

func TestCites(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"// published (R12).", []string{"12"}},
		{"// the order of R9, hands", []string{"9"}},
		{"// R45–R51: composition", []string{"45", "46", "47", "48", "49", "50", "51"}},
		{"// R14-R16 and R86–88", []string{"14", "15", "16", "86", "87", "88"}},
		{"func TestActivation_R69_EpochStopReason(t *testing.T) {", []string{"69"}},
		{"func TestNotice_R67_R74_R77_Root(t *testing.T) {", []string{"67", "74", "77"}},
		{`{"R5 unknown provider", body("codex", nil), 404},`, []string{"5"}},
		{"// R115a: no manager", []string{"115a"}},
		{"// R101, R104.", []string{"101", "104"}},
		{"HR12 R2D2 0xR1 R12b3 Rx xR7 r12 R", nil},
		{"// R9-style, R12-x", []string{"9", "12"}},
	} {
		got, err := cites(tc.line)
		if err != nil {
			t.Errorf("cites(%q): %v", tc.line, err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("cites(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
	// Built by concatenation so that this file itself cites no bad range.
	for _, line := range []string{"R16" + "–R14", "R1" + "–R" + "99"} {
		if got, err := cites(line); err == nil {
			t.Errorf("cites(%q) = %q, want a range error", line, got)
		}
	}
}

// TestUnresolvedNamesFileAndLine: a citation that does not resolve is
// reported with its file and line, and files that are not Go or lie in
// skipped directories are not read.
func TestUnresolvedNamesFileAndLine(t *testing.T) {
	// Built by concatenation so that this file itself cites nothing bad.
	root := fstest.MapFS{
		"a/b.go":                {Data: []byte("package b\n\n// see R1 and R2.\n")},
		"a/notes.md":            {Data: []byte("R3 seam" + "-spec §1\n")},
		"node_modules/x/y.go":   {Data: []byte("// R4\n")},
		".git/hooks/z.go":       {Data: []byte("// R5\n")},
		"c/range_test.go":       {Data: []byte("// R1" + "–R2\n")},
		"c/testdata/fixture.go": {Data: []byte("// R6\n")},
		self:                    {Data: []byte("// docs/other.md §1\n")},
		"e/schema.sql":          {Data: []byte("-- see R2\n")},
		"d/pages.go": {Data: []byte("// docs/seam.md §3, docs/other.md §1, docs/seam.md §4–§9\n" +
			"// seam" + "-spec §1.5 and DESIGN" + " §2\n")},
	}
	have := contract{rules: map[string]string{"1": "seam.md"}, sections: map[string]map[string]bool{"seam.md": {"3": true, "4": true}}}
	errs, n, err := unresolved(root, have)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	want := []string{
		"a/b.go:3 cites R2, which has no anchor in docs/",
		"c/range_test.go:1 cites R2, which has no anchor in docs/",
		"c/testdata/fixture.go:1 cites R6, which has no anchor in docs/",
		"d/pages.go:1 cites docs/other.md, which does not exist",
		"d/pages.go:1 cites docs/seam.md §9, which has no such section",
		"d/pages.go:2 cites \"seam" + "-spec\", a document outside the repository",
		"e/schema.sql:1 cites R2, which has no anchor in docs/",
	}
	if !slices.Equal(got, want) || n != 6 {
		t.Errorf("unresolved = %q (%d citations), want %q (6 citations)", got, n, want)
	}
}

func TestPageCites(t *testing.T) {
	have := contract{sections: map[string]map[string]bool{
		"seam.md":         {"3": true, "14": true, "15": true},
		"architecture.md": {"5": true},
	}}
	for _, tc := range []struct {
		line string
		bad  int
	}{
		{"// the admission order (docs/seam.md §3).", 0},
		{"// docs/seam.md §14, §15 and docs/architecture.md §5", 0},
		{"// docs/seam.md §14–§15; docs/architecture.md", 0},
		{"// RFC 6750 §3: a 401 names the scheme it wants.", 0},
		{"// (docs/seam.md §2)", 1},
		{"// docs/missing.md", 1},
		{"// §1.8 snapshot rules", 1},
		{"// docs/seam.md §3 and then §4", 1},
		{"// " + "DESIGN" + ".md, " + "STYLE" + ".md", 1},
		{"// " + "STYLE" + " A.2", 1},
		{"// (seam" + "-spec §1.5, §3.4) and DESIGN" + " §2", 1},
		{"// " + "DESIGN" + " §3", 1},
	} {
		if got := pageCites(tc.line, have); len(got) != tc.bad {
			t.Errorf("pageCites(%q) = %v, want %d errors", tc.line, got, tc.bad)
		}
	}
}
