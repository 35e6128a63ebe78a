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

// anchors returns the rule anchors of the Markdown pages of dir, each with
// the page that holds it. Duplicate anchors and anchors whose bold label
// names another rule are errors.
func anchors(dir fs.FS) (map[string]string, []error) {
	pages, err := fs.Glob(dir, "*.md")
	if err != nil || len(pages) == 0 {
		return nil, []error{fmt.Errorf("no Markdown pages: %v", err)}
	}
	found := map[string]string{}
	var errs []error
	for _, p := range pages {
		b, err := fs.ReadFile(dir, p)
		if err != nil {
			errs = append(errs, err)
			continue
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
	return found, errs
}

// unresolved walks the Go files of root and returns one error per citation
// whose rule is not in have, naming file:line, and how many citations it
// read. Hidden directories, node_modules and vendor are skipped.
func unresolved(root fs.FS, have map[string]string) (errs []error, n int, err error) {
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
		if !strings.HasSuffix(p, ".go") {
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
			ids, err := cites(sc.Text())
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %v", p, line, err))
				continue
			}
			for _, id := range ids {
				n++
				if _, ok := have[id]; !ok {
					errs = append(errs, fmt.Errorf("%s:%d cites R%s, which has no anchor in docs/", p, line, id))
				}
			}
		}
		return sc.Err()
	})
	return errs, n, err
}

// TestEveryCitedRuleHasAnAnchor is the check of this package: every rule a
// Go file of the repository cites resolves to an anchor in docs/.
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
		if _, ok := have[id]; !ok {
			t.Errorf("rule R%s has no anchor in docs/", id)
		}
	}
	for id := range have {
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
		for _, m := range ruleLinkRE.FindAllStringSubmatch(string(b), -1) {
			if _, ok := have[m[1]]; !ok {
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

// TestUnresolvedNamesFileAndLine: a citation without an anchor is reported
// with its file and line, and files that are not Go or lie in skipped
// directories are not read.
func TestUnresolvedNamesFileAndLine(t *testing.T) {
	root := fstest.MapFS{
		"a/b.go":                {Data: []byte("package b\n\n// see R1 and R2.\n")},
		"a/notes.md":            {Data: []byte("R3\n")},
		"node_modules/x/y.go":   {Data: []byte("// R4\n")},
		".git/hooks/z.go":       {Data: []byte("// R5\n")},
		"c/range_test.go":       {Data: []byte("// R1" + "–R2\n")},
		"c/testdata/fixture.go": {Data: []byte("// R6\n")},
	}
	errs, n, err := unresolved(root, map[string]string{"1": "seam.md"})
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
	}
	if !slices.Equal(got, want) || n != 5 {
		t.Errorf("unresolved = %q (%d citations), want %q (5 citations)", got, n, want)
	}
}
