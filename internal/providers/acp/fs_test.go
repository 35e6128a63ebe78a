package acp

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

func TestJail_KeepsAccessInsideTheWorkspace(t *testing.T) {
	t.Parallel()
	root, outside := t.TempDir(), t.TempDir()
	for _, d := range []string{"sub"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(root, "a.txt"), filepath.Join(outside, "secret")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"out":      outside,                           // a directory outside
		"secret":   filepath.Join(outside, "secret"),  // a file outside
		"dangling": filepath.Join(outside, "not-yet"), // a file outside, to be created
		"inside":   filepath.Join(root, "sub"),        // a directory inside
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path  string
		write bool
		want  string // "" refused
	}{
		{filepath.Join(root, "a.txt"), false, filepath.Join(root, "a.txt")},
		{filepath.Join(root, "sub", "..", "a.txt"), false, filepath.Join(root, "a.txt")},
		{filepath.Join(root, "sub", "new.txt"), true, filepath.Join(root, "sub", "new.txt")},
		{filepath.Join(root, "inside", "new.txt"), true, filepath.Join(root, "sub", "new.txt")},
		{filepath.Join(root, "sub", "new.txt"), false, ""},  // reading a file that does not exist
		{filepath.Join(root, "nodir", "new.txt"), true, ""}, // its directory must exist
		{"a.txt", false, ""},                          // relative
		{filepath.Join(root, "..", "x"), false, ""},   // .. out of the root
		{filepath.Join(outside, "secret"), false, ""}, // outside
		{filepath.Join(root, "secret"), false, ""},    // a symlink to a file outside
		{filepath.Join(root, "secret"), true, ""},
		{filepath.Join(root, "out", "secret"), false, ""}, // through a symlinked directory
		{filepath.Join(root, "out", "new"), true, ""},
		{filepath.Join(root, "dangling"), true, ""}, // a dangling symlink leading outside
	} {
		got, err := jail(root, tc.path, tc.write)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("jail(%q, write %v) = %q, want it refused", tc.path, tc.write, got)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("jail(%q, write %v) = %q, %v; want %q", tc.path, tc.write, got, err, tc.want)
		}
	}
}

// fsLines runs the fake agent's fs commands in one turn of a run under
// provider policy permission and returns what it said, line by line, with
// the run's child.
func fsLines(t *testing.T, p *Provider, b *bundle, cmds ...string) ([]string, string) {
	t.Helper()
	r := start(t, p, b, model.TextBlock(strings.Join(cmds, ";")))
	res := result(t, r)
	return strings.Split(strings.TrimSuffix(model.Text(res.Output), "\n"), "\n"), r.ChildID()
}

func TestFS_ReadsAndWritesInsideTheWorkspaceByPolicy(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "fs", func(c *config.ProviderConfig) {
		c.Permission = config.PermissionAllow
		c.Rules = []config.PermissionRule{{Kind: "edit", Decision: config.PermissionReject}}
	})
	if err := os.WriteFile(filepath.Join(b.root, "notes.txt"), []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(b.root, "host")); err != nil {
		t.Fatal(err)
	}
	notes, host := filepath.Join(b.root, "notes.txt"), filepath.Join(b.root, "host")
	lines, child := fsLines(t, p, b, "caps", "read "+notes, "read "+host, "read /etc/hostname", "write "+filepath.Join(b.root, "new.txt")+" hi")
	var caps struct {
		Fs       map[string]bool `json:"fs"`
		Terminal *bool           `json:"terminal"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[0], "caps ")), &caps); err != nil ||
		!caps.Fs["readTextFile"] || !caps.Fs["writeTextFile"] || caps.Terminal != nil && *caps.Terminal {
		t.Fatalf("said %q, want the fs capability advertised and terminal not", lines[0])
	}
	said := strings.Join(lines, "\n")
	if !strings.Contains(said, "read one\ntwo\nthree\n") {
		t.Fatalf("said %q, want the notes read", said)
	}
	if got := strings.Count(said, "must be an absolute path inside the workspace"); got != 2 {
		t.Fatalf("said %q, want both paths outside refused alike", said)
	}
	if !strings.Contains(said, "error Permission denied") {
		t.Fatalf("said %q, want the write denied by the edit rule", said)
	}
	if _, err := os.Stat(filepath.Join(b.root, "new.txt")); err == nil {
		t.Fatal("a denied write happened")
	}
	var titles []string
	for _, e := range events(t, b.store, child) {
		if e.Type == sessionlog.EventACPPermission {
			var d sessionlog.ACPPermissionData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			titles = append(titles, d.Title+" "+d.OptionID)
		}
	}
	if wantTitles := []string{"Read " + notes + " allow", "Write " + filepath.Join(b.root, "new.txt") + " reject"}; strings.Join(titles, "|") != strings.Join(wantTitles, "|") {
		t.Fatalf("acp/permission records %q, want %q", titles, wantTitles)
	}
}

// A write the policy asks about waits for a person: the approval is of
// kind edit, titled with the path, with the content as its input.
func TestFS_AskedWriteWaitsForAPerson(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "fs", func(c *config.ProviderConfig) {
		c.Permission = config.PermissionAllow
		c.Rules = []config.PermissionRule{{Kind: "edit", Decision: config.PermissionAsk}}
	})
	target := filepath.Join(b.root, "out.txt")
	r := start(t, p, b, model.TextBlock("write "+target+" hello there;read "+target))
	publish(t, b, r)
	ap := awaitApproval(t, b.store, r.ChildID(), store.ApprovalPending)
	if ap.ToolCall.Kind != "edit" || ap.ToolCall.Title != "Write "+target || !strings.Contains(string(ap.ToolCall.RawInput), "hello there") ||
		!strings.Contains(string(ap.ToolCall.Locations), target) {
		t.Fatalf("approval %+v", ap)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("written before the decision")
	}
	if _, err := b.approvals.Decide(context.Background(), ap.ID, governance.Decision{Outcome: "allow"}); err != nil {
		t.Fatal(err)
	}
	res := result(t, r)
	if got, want := model.Text(res.Output), "wrote "+target+"\nread hello there\n"; got != want {
		t.Fatalf("said %q, want %q", got, want)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "hello there" {
		t.Fatalf("file %q, %v", b, err)
	}
}

func TestReadText_LineAndLimit(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("1\n2\n3\n4"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := func(i int) *int { return &i }
	for _, tc := range []struct {
		line, limit *int
		want        string
	}{
		{nil, nil, "1\n2\n3\n4"},
		{n(2), nil, "2\n3\n4"},
		{n(2), n(2), "2\n3\n"},
		{nil, n(1), "1\n"},
		{n(9), n(1), ""},
		{n(0), n(0), ""},
	} {
		if got, err := readText(path, tc.line, tc.limit); err != nil || got != tc.want {
			t.Errorf("readText(line %v, limit %v) = %q, %v; want %q", tc.line, tc.limit, got, err, tc.want)
		}
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, maxFileBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readText(big, nil, nil); err == nil {
		t.Fatal("a file over the bound was read")
	}
}

// A continuable child's agent writes in one activation and reads it back
// in the next, each access allowed by the policy and recorded in the
// child's log.
func TestFS_ContinuableChild(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "fs", func(c *config.ProviderConfig) {
		c.Env["FAKE_CAPS"], c.Env["FAKE_STATE"] = "resume", t.TempDir()
		c.Permission, c.IdleTimeout = config.PermissionAllow, wait
	})
	w, _ := world(t, p, b)
	target := filepath.Join(b.root, "c.txt")
	started := w.start(t, b, "write "+target+" from the child")
	if e := w.end(t, started.TaskID); lastText(e) != "wrote "+target+"\n" {
		t.Fatalf("first activation said %q", lastText(e))
	}
	res := w.followup(t, started.ChildID, "read "+target)
	if e := w.end(t, res.TaskID); lastText(e) != "read from the child\n" {
		t.Fatalf("followup said %q", lastText(e))
	}
	n := 0
	for _, e := range events(t, b.store, started.ChildID) {
		if e.Type == sessionlog.EventACPPermission {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d acp/permission records, want the write and the read", n)
	}
}
