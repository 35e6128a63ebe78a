package acp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/logtest"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// fakeAgent is the path of testdata/fakeagent, built once per test run.
var fakeAgent string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "acp-fakeagent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake agent:", err)
		os.Exit(1)
	}
	fakeAgent = filepath.Join(dir, "fakeagent")
	if out, err := exec.Command("go", "build", "-o", fakeAgent, "./testdata/fakeagent").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build fake agent: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if records, err := ownRecordDir(); err == nil {
		os.Remove(records) // empty once every agent was reaped
	}
	os.Exit(code)
}

// wait bounds every wait of the tests; nothing should take nearly as long.
const wait = 10 * time.Second

const parentID = "parent-1"

type bundle struct {
	store *memstore.Store
	root  string // the workspace root and the parent session's cwd
	marks string // where the fake agent leaves teardown marks
	logs  *logtest.Buffer
	// approvals take the permission requests of a provider that asks.
	approvals *governance.Approvals
}

// setup returns a provider running the fake agent in mode, with generous
// graces (a test that needs the ladder to escalate sets short ones).
func setup(t *testing.T, mode string, edit ...func(*config.ProviderConfig)) (*Provider, *bundle) {
	t.Helper()
	b := &bundle{store: memstore.New(), root: t.TempDir(), marks: t.TempDir(), logs: &logtest.Buffer{}}
	cfg := config.ProviderConfig{
		Name:            "fake",
		Type:            config.TypeACP,
		Command:         fakeAgent,
		Env:             map[string]string{"FAKE_MODE": mode, "FAKE_MARKS": b.marks},
		Permission:      config.PermissionReject,
		DisposeEOFGrace: wait,
		DisposeGrace:    wait,
	}
	for _, e := range edit {
		e(&cfg)
	}
	if err := b.store.CreateSession(context.Background(), store.Session{ID: parentID, Cwd: b.root}); err != nil {
		t.Fatal(err)
	}
	// The SDK logs from its own goroutines, possibly after a test ended, so
	// logs go to a buffer rather than to t.Log.
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	deps := Deps{Store: b.store, Logger: log, WorkspaceRoots: []string{b.root}}
	if cfg.MayAsk() {
		b.approvals = governance.NewApprovals(governance.ApprovalsConfig{Store: b.store, Owner: "test", Logger: log, Poll: time.Hour})
		deps.Approver = b.approvals
	}
	p, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}

func request(cwd string, prompt ...model.Block) subagent.ResolvedRequest {
	return subagent.ResolvedRequest{
		Request: subagent.Request{
			Label:  "task",
			Prompt: prompt,
			Parent: subagent.Parent{Session: store.Session{ID: parentID, Cwd: cwd}},
		},
		Descriptor: subagent.Descriptor{Mode: subagent.ModeOneShot, Provider: "fake", Label: "task"},
		ChildDepth: 1,
	}
}

// start starts a run and disposes it when the test ends.
func start(t *testing.T, p *Provider, b *bundle, prompt ...model.Block) subagent.Run {
	t.Helper()
	if len(prompt) == 0 {
		prompt = []model.Block{model.TextBlock("hello")}
	}
	r, err := p.Start(context.Background(), request(b.root, prompt...))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
		defer cancel()
		if err := r.Dispose(ctx); err != nil {
			t.Errorf("Dispose: %v", err)
		}
	})
	return r
}

func result(t *testing.T, r subagent.Run) subagent.Result {
	t.Helper()
	select {
	case <-r.Done():
	case <-time.After(wait):
		t.Fatal("the run did not settle")
	}
	res, err := r.Result()
	if err != nil {
		t.Fatalf("Result: %v", err)
	}
	return res
}

func dispose(t *testing.T, r subagent.Run) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	if err := r.Dispose(ctx); err != nil {
		t.Fatalf("Dispose: %v", err)
	}
}

// events reads a session's whole log.
func events(t *testing.T, st store.Store, sessionID string) []store.Event {
	t.Helper()
	evs, err := st.Events(context.Background(), sessionID, -1, 1000)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	return evs
}

// waitForEvent waits, on the store's wake-ups, until the session log holds
// an event that match accepts.
func waitForEvent(t *testing.T, st store.Store, sessionID string, match func(store.Event) bool) {
	t.Helper()
	woken, stop := st.Subscribe(store.SessionTopic(sessionID))
	defer stop()
	timeout := time.After(wait)
	for {
		for _, e := range events(t, st, sessionID) {
			if match(e) {
				return
			}
		}
		select {
		case <-woken:
		case <-timeout:
			t.Fatalf("no matching event in %s", sessionID)
		}
	}
}

func isTextChunk(text string) func(store.Event) bool {
	return func(e store.Event) bool {
		var d sessionlog.ChunkData
		return e.Type == sessionlog.EventAssistantChunk && json.Unmarshal(e.Data, &d) == nil &&
			d.Chunk.Type == string(model.ChunkText) && d.Chunk.Text == text
	}
}

func textOutput(text string) []model.Block { return []model.Block{model.TextBlock(text)} }

// alive reports whether pid is a live process; a zombie is dead.
func alive(t *testing.T, pid int) bool {
	t.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	state, _, ok := parseStat(stat)
	return ok && state != "Z"
}

// readyFIFO makes a FIFO for the fake agent's FAKE_READY signal and returns
// its path and a func that blocks until the agent wrote its pid to it.
func readyFIFO(t *testing.T) (string, func() int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ready")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, func() int {
		f, err := os.Open(path) // blocks until the agent opens it to write
		if err != nil {
			t.Errorf("open ready FIFO: %v", err)
			return 0
		}
		defer f.Close()
		line, err := bufio.NewReader(f).ReadString('\n')
		pid, convErr := strconv.Atoi(strings.TrimSpace(line))
		if err != nil || convErr != nil {
			t.Errorf("ready FIFO: %q, %v", line, err)
		}
		return pid
	}
}

func marked(b *bundle, name string) bool {
	_, err := os.Stat(filepath.Join(b.marks, name))
	return err == nil
}
