package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

func TestProvider_DescribesItself(t *testing.T) {
	t.Parallel()
	p, _ := setup(t, "text")
	if p.Name() != "fake" || p.Capabilities() != (subagent.Capabilities{}) || p.InheritsParentContext() {
		t.Fatalf("Name %q, Capabilities %+v, InheritsParentContext %v", p.Name(), p.Capabilities(), p.InheritsParentContext())
	}
	if c := p.Capabilities(); c.Steer || c.Resume || c.Local {
		t.Fatalf("runtime capabilities steer %v resume %v local %v, want none", c.Steer, c.Resume, c.Local)
	}
	if !strings.Contains(p.Description(), `"fakeagent"`) || strings.Contains(p.Description(), fakeAgent) {
		t.Fatalf("Description %q should name the program, not its path", p.Description())
	}
}

func TestStart_R12_PublishesAfterHandshakeAndStreamsIntoChildLog(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "text")
	image := model.Block{Type: "image", Raw: json.RawMessage(`{"type":"image","data":"AAAA","mimeType":"image/png"}`)}
	r := start(t, p, b, model.TextBlock("hello"), image, model.TextBlock("world"))

	if r.Local() {
		t.Fatal("an ACP run is not local")
	}
	res := result(t, r)
	// The agent echoes the prompt blocks it received: only the text ones.
	// The agent reports the usage of its answer: one call, known.
	want := subagent.Result{Output: textOutput("You said: text:hello | text:world"), StopReason: subagent.StopCompleted,
		Usage: store.Usage{InputTokens: 3, OutputTokens: 5, ModelCalls: 1, Reported: 1}, UsageKnown: true}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("result = %+v, want %+v", res, want)
	}

	sess, err := b.store.GetSession(context.Background(), r.ChildID())
	if err != nil {
		t.Fatalf("child session: %v", err)
	}
	wantSess := store.Session{ID: r.ChildID(), ParentID: parentID, RootID: parentID, Origin: "subagent", DelegationDepth: 1,
		Cwd: b.root, Label: "task", Provider: "fake", Mode: subagent.ModeOneShot, CreatedAt: sess.CreatedAt}
	if !reflect.DeepEqual(sess, wantSess) {
		t.Fatalf("child session = %+v, want %+v", sess, wantSess)
	}

	evs := events(t, b.store, r.ChildID())
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	wantTypes := []string{
		sessionlog.EventTurnStart, sessionlog.EventUserMessage, sessionlog.EventDescriptor, sessionlog.EventStepStart,
		sessionlog.EventAssistantChunk, // the thought, as reasoning
		sessionlog.EventACPToolCall, sessionlog.EventACPToolCallUpdate, sessionlog.EventACPPlan,
		sessionlog.EventAssistantChunk, sessionlog.EventAssistantChunk,
		sessionlog.EventAssistantMessage, sessionlog.EventStepEnd, sessionlog.EventTurnEnd,
	}
	if !reflect.DeepEqual(types, wantTypes) {
		t.Fatalf("child log types =\n%v\nwant\n%v", types, wantTypes)
	}
	wantData := map[int]string{
		1:  `{"id":"` + userMessageID(t, evs[1]) + `","role":"user","content":[{"type":"text","text":"hello"},{"type":"text","text":"world"}],"source":{"kind":"user"}}`,
		2:  `{"version":2,"mode":"one-shot","provider":"fake","label":"task"}`,
		4:  `{"turn":1,"step":1,"chunk":{"type":"reasoning-delta","text":"secret thoughts"}}`,
		5:  `{"turn":1,"toolCallId":"call-1","title":"Read notes.txt","kind":"read","status":"pending"}`,
		6:  `{"turn":1,"toolCallId":"call-1","status":"completed"}`,
		7:  `{"turn":1,"entries":[{"content":"answer","priority":"high","status":"completed"}]}`,
		8:  `{"turn":1,"step":1,"chunk":{"type":"text-delta","text":"You said: "}}`,
		10: `{"turn":1,"step":1,"message":{"role":"assistant","content":[{"type":"text","text":"You said: text:hello | text:world"}]},"usage":{"inputTokens":3,"outputTokens":5}}`,
		12: `{"turn":1,"reason":{"kind":"completed"}}`,
	}
	for i, want := range wantData {
		if got := compact(t, evs[i].Data); got != want {
			t.Errorf("event %d (%s) = %s\nwant %s", i, evs[i].Type, got, want)
		}
	}
	if got := sessionlog.OutcomeOf(evs).Output; len(got) != 1 || model.Text(got) != model.Text(res.Output) {
		t.Errorf("the log selects output %+v, the result holds %+v", got, res.Output)
	}
}

func userMessageID(t *testing.T, e store.Event) string {
	var m sessionlog.UserMessage
	if err := json.Unmarshal(e.Data, &m); err != nil || m.ID == "" {
		t.Fatalf("user/message %s: %v", e.Data, err)
	}
	return m.ID
}

// compact is event data without insignificant space, in its stored key order.
func compact(t *testing.T, data json.RawMessage) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		t.Fatalf("event data %s: %v", data, err)
	}
	return buf.String()
}

func TestStart_R21_PreAbortedNeverSpawns(t *testing.T) {
	t.Parallel()
	// A command that is gone since start-up: trying to start it would fail
	// differently.
	command := linkedAgent(t)
	p, b := setup(t, "text", func(c *config.ProviderConfig) { c.Command = command })
	if err := os.Remove(command); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Start(ctx, request(b.root, model.TextBlock("hello")))
	var se *subagent.Error
	if !errors.As(err, &se) || se.Code != subagent.EAborted ||
		se.Message != "subagent request was aborted before the ACP child started" {
		t.Fatalf("Start = %v, want the EAborted error", err)
	}
	assertNoChild(t, b)
}

// linkedAgent is a link to the fake agent, for tests that remove it.
func linkedAgent(t *testing.T) string {
	command := filepath.Join(t.TempDir(), "agent")
	if err := os.Symlink(fakeAgent, command); err != nil {
		t.Fatal(err)
	}
	return command
}

func assertNoChild(t *testing.T, b *bundle) {
	t.Helper()
	parent := parentID
	children, err := b.store.ListSessions(context.Background(), store.SessionFilter{ParentID: &parent})
	if err != nil || len(children) != 0 {
		t.Fatalf("children = %+v, %v; want none", children, err)
	}
}

func TestStart_R22_AbortDuringHandshakeReapsTheAgent(t *testing.T) {
	t.Parallel()
	fifo, waitReady := readyFIFO(t)
	p, b := setup(t, "hanginit", func(c *config.ProviderConfig) { c.Env["FAKE_READY"] = fifo })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pid := make(chan int, 1)
	go func() {
		pid <- waitReady() // initialize is pending in the agent
		cancel()
	}()
	_, err := p.Start(ctx, request(b.root, model.TextBlock("hello")))
	if subagent.ErrorCode(err) != subagent.EAborted {
		t.Fatalf("Start = %v, want EAborted", err)
	}
	if agentPID := <-pid; alive(t, agentPID) {
		t.Fatalf("agent %d still runs after the aborted start", agentPID)
	}
	assertNoChild(t, b)
}

func TestStart_R11_HandshakeFailuresReapAndPublishNothing(t *testing.T) {
	t.Parallel()
	tests := []struct{ mode, want string }{
		{"nosession", `ACP agent of provider "fake" is unavailable: session/new: the agent answered without a session id`},
		{"exitinit", `ACP agent of provider "fake" is unavailable: initialize: agent process exited (exit code 2)`},
		{"newerror", `ACP agent of provider "fake" is unavailable: session/new: Authentication required`},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			p, b := setup(t, tt.mode)
			_, err := p.Start(context.Background(), request(b.root, model.TextBlock("hello")))
			if subagent.ErrorCode(err) != subagent.EAgentUnavailable || subagent.ErrorMessage(err) != tt.want {
				t.Fatalf("Start = %v, want %s %q", err, subagent.EAgentUnavailable, tt.want)
			}
			assertNoChild(t, b)
		})
	}
}

func TestNew_MissingCommandIsAnError(t *testing.T) {
	t.Parallel()
	for _, command := range []string{filepath.Join(t.TempDir(), "absent"), "no-such-acp-agent-command"} {
		_, err := New(config.ProviderConfig{Name: "fake", Command: command}, Deps{Logger: slog.Default()})
		if err == nil || !strings.Contains(err.Error(), `ACP provider "fake"`) || !strings.Contains(err.Error(), command) {
			t.Fatalf("New(%q) = %v, want an error naming the provider and the command", command, err)
		}
	}
}

func TestStart_R11_UnstartableCommandIsAgentUnavailable(t *testing.T) {
	t.Parallel()
	command := linkedAgent(t)
	p, b := setup(t, "text", func(c *config.ProviderConfig) { c.Command = command })
	if err := os.Remove(command); err != nil {
		t.Fatal(err)
	}
	_, err := p.Start(context.Background(), request(b.root, model.TextBlock("hello")))
	if subagent.ErrorCode(err) != subagent.EAgentUnavailable || !strings.Contains(subagent.ErrorMessage(err), "no such file or directory") {
		t.Fatalf("Start = %v, want %s naming the exec error", err, subagent.EAgentUnavailable)
	}
	assertNoChild(t, b)
}

func TestStart_WorkdirRules(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "env")
	outside := t.TempDir()
	file := filepath.Join(b.root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, cwd, want string
	}{
		{"no cwd anywhere", "", `subagent-acp: no working directory for the child — the parent session has no cwd and provider "fake" configures none`},
		{"relative", "work", `subagent-acp: the parent session's cwd cannot be the child's working directory: "work" is not an absolute path`},
		{"missing", filepath.Join(b.root, "gone"), `subagent-acp: the parent session's cwd cannot be the child's working directory: "` + filepath.Join(b.root, "gone") + `" does not exist`},
		{"file", file, `subagent-acp: the parent session's cwd cannot be the child's working directory: "` + file + `" is not a directory`},
		{"outside the roots", outside, `subagent-acp: the parent session's cwd cannot be the child's working directory: "` + outside + `" is outside the workspace roots`},
	}
	for _, tt := range tests {
		_, err := p.Start(context.Background(), request(tt.cwd, model.TextBlock("hello")))
		var se *subagent.Error
		if !errors.As(err, &se) || se.Code != subagent.EInvalidRequest || se.Message != tt.want {
			t.Errorf("%s: Start = %v, want EInvalidRequest %q", tt.name, err, tt.want)
		}
	}
	assertNoChild(t, b)
}

func TestStart_ConfiguredCwdWinsAndIsTheSessionWorkspace(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "env")
	work := filepath.Join(b.root, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	p.cfg.Cwd = work
	r := start(t, p, b)
	out := model.Text(result(t, r).Output)
	if !strings.Contains(out, "cwd="+work+"\n") || !strings.Contains(out, "session-cwd="+work+"\n") {
		t.Fatalf("agent reports\n%s\nwant process and session cwd %s", out, work)
	}
}

// The agent gets the allowlisted variables and its configured env, nothing
// else of the service's environment: no credential, whatever its name.
func TestStart_EnvironmentIsAllowlisted(t *testing.T) {
	// Not parallel: it sets process environment variables.
	leaks := map[string]string{
		"GOOGLE_APPLICATION_CREDENTIALS": "/secrets/leak-1.json",
		"FOO_CREDENTIALS":                "leak-2",
		"SENTRY_DSN":                     "https://leak-3@sentry.example/1",
		"REDIS_URL":                      "redis://:leak-4@cache:6379/0",
		"ACP_TEST_API_KEY":               "leak-5",
		"DATABASE_URL":                   "postgres://u:leak-6@db/x",
		"SUBAGENTD_TOKENS":               "leak-7",
		"ACP_TEST_PLAIN":                 "leak-8", // harmless, but not allowlisted either
		"ACP_TEST_EXPLICIT_TOKEN":        "leak-9", // overridden by the config
		"LANG":                           "overridden-lang",
	}
	for name, value := range leaks {
		t.Setenv(name, value)
	}
	// TMPDIR keeps its value: the agent records live under it, once this
	// process started its first agent.
	inherited := map[string]string{"HOME": t.TempDir(), "TERM": "xterm-acp-test", "TMPDIR": os.TempDir()}
	for name, value := range inherited {
		t.Setenv(name, value)
	}
	inherited["PATH"] = os.Getenv("PATH")
	p, b := setup(t, "env", func(c *config.ProviderConfig) {
		c.Env["ACP_TEST_EXPLICIT_TOKEN"] = "kept-1"
		c.Env["LANG"] = "C.UTF-8"
	})
	out := model.Text(result(t, start(t, p, b)).Output)
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n")[2:] { // after cwd= and session-cwd=
		name, value, _ := strings.Cut(line, "=")
		got[name] = value
	}
	want := maps.Clone(inherited)
	maps.Copy(want, p.cfg.Env) // FAKE_MODE and FAKE_MARKS besides the two set here
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("agent environment\n%v\nwant\n%v", got, want)
	}
	if strings.Contains(out, "leak-") {
		t.Fatalf("a variable outside the allowlist reached the agent:\n%s", out)
	}
}

func TestChildEnv(t *testing.T) {
	t.Parallel()
	environ := []string{"PATH=/bin", "HOME=/root", "OPENAI_API_KEY=x", "GOOGLE_APPLICATION_CREDENTIALS=x",
		"SENTRY_DSN=x", "REDIS_URL=x", "SUBAGENTD_CONFIG=x", "LANG=C", "TERM=dumb", "TMPDIR=/tmp", "MY_TOKEN=ambient",
		"LC_ALL=C", "path=/lower"}
	got := childEnv(environ, map[string]string{"MY_TOKEN": "explicit", "B": "2", "A": "1", "TERM": "xterm"})
	want := []string{"PATH=/bin", "HOME=/root", "LANG=C", "TMPDIR=/tmp", "A=1", "B=2", "MY_TOKEN=explicit", "TERM=xterm"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("childEnv = %v, want %v", got, want)
	}
}

func TestRun_PermissionPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, policy string
		noAllow      bool
		wantText     string
		wantData     string
	}{
		{"reject picks the reject option", config.PermissionReject, false, "selected no",
			`{"turn":1,"toolCallId":"call-9","title":"Delete build/","outcome":"selected","optionId":"no","optionKind":"reject_once"}`},
		{"allow picks the allow option", config.PermissionAllow, false, "selected yes",
			`{"turn":1,"toolCallId":"call-9","title":"Delete build/","outcome":"selected","optionId":"yes","optionKind":"allow_once"}`},
		{"allow without an allow option", config.PermissionAllow, true, "",
			`{"turn":1,"toolCallId":"call-9","title":"Delete build/","outcome":"cancelled"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, b := setup(t, "permission", func(c *config.ProviderConfig) {
				c.Permission = tt.policy
				if tt.noAllow {
					c.Env["FAKE_NO_ALLOW"] = "1"
				}
			})
			r := start(t, p, b)
			res := result(t, r)
			if model.Text(res.Output) != tt.wantText {
				t.Fatalf("output %q, want %q", model.Text(res.Output), tt.wantText)
			}
			var got []string
			for _, e := range events(t, b.store, r.ChildID()) {
				if e.Type == sessionlog.EventACPPermission {
					got = append(got, compact(t, e.Data))
				}
			}
			if !reflect.DeepEqual(got, []string{tt.wantData}) {
				t.Fatalf("acp/permission events %v, want [%s]", got, tt.wantData)
			}
		})
	}
}

func TestRun_StopReasonMapping_4_8(t *testing.T) {
	t.Parallel()
	tests := []struct {
		stop, want, diagnostic, turnEnd string
	}{
		{"end_turn", subagent.StopCompleted, "", `{"kind":"completed"}`},
		{"max_tokens", subagent.StopMaxTokens, "", `{"kind":"max-tokens"}`},
		{"refusal", subagent.StopRefusal, "", `{"kind":"refusal"}`},
		{"cancelled", subagent.StopAborted, "", `{"kind":"aborted"}`},
		{"max_turn_requests", subagent.StopError, `agent stopped with reason "max_turn_requests"`,
			`{"kind":"error","message":"agent stopped with reason \"max_turn_requests\""}`},
		{"bored", subagent.StopError, `agent stopped with reason "bored"`,
			`{"kind":"error","message":"agent stopped with reason \"bored\""}`},
	}
	for _, tt := range tests {
		t.Run(tt.stop, func(t *testing.T) {
			t.Parallel()
			p, b := setup(t, "stop:"+tt.stop)
			r := start(t, p, b)
			res := result(t, r)
			// No usage reported: the prompt is one call whose usage is not known.
			want := subagent.Result{Output: textOutput("partial"), StopReason: tt.want, Diagnostic: tt.diagnostic, Usage: unreported}
			if !reflect.DeepEqual(res, want) {
				t.Fatalf("result %+v, want %+v", res, want)
			}
			evs := events(t, b.store, r.ChildID())
			if got := compact(t, evs[len(evs)-1].Data); got != `{"turn":1,"reason":`+tt.turnEnd+`}` {
				t.Fatalf("turn/end %s, want reason %s", got, tt.turnEnd)
			}
		})
	}
}

// unreported is the usage of a run whose one prompt reported none.
var unreported = store.Usage{ModelCalls: 1}

func TestRun_R27_JSONRPCErrorSettlesError(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "autherror")
	res := result(t, start(t, p, b))
	want := subagent.Result{Output: []model.Block{}, StopReason: subagent.StopError, Diagnostic: "Authentication required", Usage: unreported}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("result %+v, want %+v", res, want)
	}
}

func TestRun_R27_CrashSettlesErrorWithExitCode(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "crash")
	res := result(t, start(t, p, b))
	if res.StopReason != subagent.StopError || res.Diagnostic != "agent process exited (exit code 3)" {
		t.Fatalf("result %+v, want error with the exit code", res)
	}
}

func TestRun_DiagnosticIsBounded(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "longerror")
	res := result(t, start(t, p, b))
	d := res.Diagnostic
	if len(d) > subagent.MaxDiagnosticBytes || !strings.HasSuffix(d, subagent.DiagnosticSuffix) || !utf8.ValidString(d) {
		t.Fatalf("diagnostic of %d bytes, suffix %v, valid UTF-8 %v", len(d), strings.HasSuffix(d, subagent.DiagnosticSuffix), utf8.ValidString(d))
	}
}

func TestCancel_R26_SettlesWithoutAgent(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "ignorecancel")
	r := start(t, p, b)
	waitForEvent(t, b.store, r.ChildID(), isTextChunk("working"))
	r.Cancel()
	r.Cancel() // idempotent
	res := result(t, r)
	want := subagent.Result{Output: textOutput("working"), StopReason: subagent.StopAborted, Usage: unreported}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("result %+v, want %+v", res, want)
	}
	evs := events(t, b.store, r.ChildID())
	if got := compact(t, evs[len(evs)-1].Data); got != `{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"parent"}}}` {
		t.Fatalf("turn/end %s", got)
	}
	dispose(t, r) // the agent ignores session/cancel but not EOF
}

// An agent that crashes when asked to cancel still yields aborted (R26),
// not error, and leaves nothing behind.
func TestCancel_R26_CrashOnCancelStillAborted(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "crashoncancel")
	r := start(t, p, b)
	waitForEvent(t, b.store, r.ChildID(), isTextChunk("working"))
	r.Cancel()
	if res := result(t, r); res.StopReason != subagent.StopAborted || res.Diagnostic != "" {
		t.Fatalf("result %+v, want aborted without a diagnostic", res)
	}
	dispose(t, r)
	if pid := r.(*run).live.proc.pgid; alive(t, pid) {
		t.Fatalf("agent %d alive after Dispose", pid)
	}
}

// An agent that writes a stderr line too long to log is still read: it
// does not block on a full pipe and its run completes.
func TestRun_LongStderrLineDoesNotBlockTheAgent(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "longstderr")
	r := start(t, p, b)
	if res := result(t, r); res.StopReason != subagent.StopCompleted || model.Text(res.Output) != "still here" {
		t.Fatalf("result %+v, want completed", res)
	}
}

// Twenty runs at once all settle, and disposing them leaves no agent
// process behind.
func TestRun_TwentyConcurrentRunsSettleAndLeaveNoProcess(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "text")
	runs := make([]subagent.Run, 20)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() { runs[i] = start(t, p, b, model.TextBlock(fmt.Sprint("task ", i))) })
	}
	wg.Wait()
	for i, r := range runs {
		res := result(t, r)
		if res.StopReason != subagent.StopCompleted || !strings.Contains(model.Text(res.Output), fmt.Sprint("text:task ", i)) {
			t.Fatalf("run %d: %+v", i, res)
		}
	}
	for _, r := range runs {
		wg.Go(func() { dispose(t, r) })
	}
	wg.Wait()
	for i, r := range runs {
		if pid := r.(*run).live.proc.pgid; alive(t, pid) {
			t.Fatalf("run %d: agent %d alive after Dispose", i, pid)
		}
	}
}

func TestCancel_R25_CompletedStaysCompleted(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "text")
	r := start(t, p, b)
	before := result(t, r)
	r.Cancel()
	after := result(t, r)
	if after.StopReason != subagent.StopCompleted || !reflect.DeepEqual(before, after) {
		t.Fatalf("after Cancel: %+v, before: %+v", after, before)
	}
}

func TestDispose_R28_IdempotentAndR29SettlesAborted(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "hang")
	r := start(t, p, b)
	waitForEvent(t, b.store, r.ChildID(), isTextChunk("working"))
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- r.Dispose(context.Background()) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Dispose: %v", err)
		}
	}
	if err := r.Dispose(context.Background()); err != nil {
		t.Fatalf("third Dispose: %v", err)
	}
	if !marked(b, "cancel") {
		t.Fatal("the agent got EOF without session/cancel first")
	}
	res := result(t, r)
	if res.StopReason != subagent.StopAborted {
		t.Fatalf("stop reason %q, want aborted", res.StopReason)
	}
	evs := events(t, b.store, r.ChildID())
	if got := compact(t, evs[len(evs)-1].Data); got != `{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"disposed"}}}` {
		t.Fatalf("turn/end %s", got)
	}
	if pid := r.(*run).live.proc.pgid; alive(t, pid) {
		t.Fatalf("agent %d alive after Dispose", pid)
	}
}

func TestDispose_R29_KillsTheWholeProcessGroup(t *testing.T) {
	t.Parallel()
	// The agent exits on EOF but leaves its grandchild, which only SIGTERM
	// to the group reaches.
	p, b := setup(t, "grandchild", func(c *config.ProviderConfig) { c.DisposeEOFGrace = 100 * time.Millisecond })
	r := start(t, p, b)
	res := result(t, r)
	grandchild, err := strconv.Atoi(model.Text(res.Output))
	if err != nil {
		t.Fatalf("grandchild pid %q: %v", model.Text(res.Output), err)
	}
	dispose(t, r)
	if alive(t, grandchild) {
		t.Fatalf("grandchild %d survived Dispose", grandchild)
	}
}

func TestDispose_Ladder(t *testing.T) {
	t.Parallel()
	short := 100 * time.Millisecond
	tests := []struct {
		name, teardown string
		eofGrace       time.Duration
		termGrace      time.Duration
		wantEOF        bool // the agent exited by itself on EOF
		wantTerm       bool // the agent saw SIGTERM
	}{
		{"EOF is enough", "eof", wait, wait, true, false},
		{"SIGTERM after the EOF grace", "ignoreeof", short, wait, false, true},
		{"SIGKILL after the SIGTERM grace", "trapterm", short, short, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, b := setup(t, "text", func(c *config.ProviderConfig) {
				c.Env["FAKE_TEARDOWN"] = tt.teardown
				c.DisposeEOFGrace, c.DisposeGrace = tt.eofGrace, tt.termGrace
			})
			r := start(t, p, b)
			result(t, r)
			dispose(t, r)
			if marked(b, "eof") != tt.wantEOF || marked(b, "term") != tt.wantTerm {
				t.Fatalf("eof mark %v (want %v), term mark %v (want %v)", marked(b, "eof"), tt.wantEOF, marked(b, "term"), tt.wantTerm)
			}
			if pid := r.(*run).live.proc.pgid; alive(t, pid) {
				t.Fatalf("agent %d alive after Dispose", pid)
			}
		})
	}
}

func TestChoose(t *testing.T) {
	t.Parallel()
	opt := func(id string, kind sdk.PermissionOptionKind) sdk.PermissionOption {
		return sdk.PermissionOption{OptionId: sdk.PermissionOptionId(id), Kind: kind}
	}
	all := []sdk.PermissionOption{
		opt("aa", sdk.PermissionOptionKindAllowAlways), opt("ra", sdk.PermissionOptionKindRejectAlways),
		opt("ao", sdk.PermissionOptionKindAllowOnce), opt("ro", sdk.PermissionOptionKindRejectOnce),
	}
	tests := []struct {
		policy  string
		options []sdk.PermissionOption
		want    string // "" = cancelled
	}{
		{config.PermissionAllow, all, "ao"},
		{config.PermissionReject, all, "ro"},
		{config.PermissionAllow, all[:2], "aa"},
		{config.PermissionReject, all[:1], ""},
		{config.PermissionAllow, nil, ""},
	}
	for _, tt := range tests {
		got := ""
		if o := choose(tt.policy, tt.options); o != nil {
			got = string(o.OptionId)
		}
		if got != tt.want {
			t.Errorf("choose(%s, %d options) = %q, want %q", tt.policy, len(tt.options), got, tt.want)
		}
	}
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	state, pgrp, ok := parseStat([]byte("4242 (a (weird) name) S 1 4240 4240 0 -1 4194560"))
	if !ok || state != "S" || pgrp != 4240 {
		t.Fatalf("parseStat = %q, %d, %v", state, pgrp, ok)
	}
	if _, _, ok := parseStat([]byte("garbage")); ok {
		t.Fatal("parseStat accepted garbage")
	}
}

// longGrace is a configured teardown grace that a test must never wait
// out: longer than every bound of the tests' waits (dispose's included).
const longGrace = 10 * wait

// A settled run's agent is stopped at once, without waiting for disposal,
// and with short graces even when the configured ones are long: disposal
// of an agent that ignores EOF (or even SIGTERM) returns long before them.
func TestRun_SettledAgentIsStoppedPromptly(t *testing.T) {
	t.Parallel()
	for _, teardown := range []string{"ignoreeof", "trapterm"} {
		t.Run(teardown, func(t *testing.T) {
			t.Parallel()
			p, b := setup(t, "text", func(c *config.ProviderConfig) {
				c.Env["FAKE_TEARDOWN"] = teardown
				c.DisposeEOFGrace, c.DisposeGrace = longGrace, longGrace
			})
			r := start(t, p, b)
			result(t, r)
			select {
			case <-r.(*run).live.released:
			case <-time.After(wait):
				t.Fatal("the settled run's agent was not stopped")
			}
			if !marked(b, "term") {
				t.Fatal("the agent saw no SIGTERM")
			}
			dispose(t, r) // bounded well below longGrace
			if pid := r.(*run).live.proc.pgid; alive(t, pid) {
				t.Fatalf("agent %d alive after Dispose", pid)
			}
		})
	}
}

// Codex ignores stdin EOF: disposing of its settled run must not wait out
// the configured EOF grace.
func TestDispose_SettledRunOfEOFIgnoringAgentIsFast(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "text", func(c *config.ProviderConfig) {
		c.Env["FAKE_TEARDOWN"] = "ignoreeof"
		c.DisposeEOFGrace = longGrace
	})
	r := start(t, p, b)
	result(t, r)
	dispose(t, r) // bounded well below longGrace
}

func TestRun_SettledAgentGetsSessionCloseWhereOffered(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "text", func(c *config.ProviderConfig) { c.Env["FAKE_CAPS"] = "resume,close" })
	r := start(t, p, b)
	result(t, r)
	dispose(t, r)
	if !marked(b, "close") {
		t.Fatal("no session/close before the teardown")
	}
}

// A model's 401 behind the agent (codex answers "Internal error" and puts
// the reason in data.message) names the authentication failure, without
// the key.
func TestRun_ModelAuthFailureIsNamedWithoutTheKey(t *testing.T) {
	t.Parallel()
	const key = "sk-ant-test-0123456789abcdef"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":"invalid x-api-key"}`)
	}))
	t.Cleanup(srv.Close)
	p, b := setup(t, "model", func(c *config.ProviderConfig) {
		c.Env["FAKE_MODEL_URL"] = srv.URL
		c.Env["FAKE_API_KEY"] = key
	})
	res := result(t, start(t, p, b))
	d := res.Diagnostic
	for _, want := range []string{"Internal error", "401 Unauthorized", "invalid x-api-key"} {
		if !strings.Contains(d, want) {
			t.Errorf("diagnostic %q does not name %q", d, want)
		}
	}
	if res.StopReason != subagent.StopError || strings.Contains(d, key) || strings.Contains(d, "0123456789") {
		t.Fatalf("result %+v: want an error without the key", res)
	}
}

func TestRPCMessage(t *testing.T) {
	t.Parallel()
	p := &Provider{cfg: config.ProviderConfig{Env: map[string]string{"MY_TOKEN": "hunter2hunter2", "MODE": "verbose"}}}
	long := strings.Repeat("x", 2*maxDetail)
	tests := []struct {
		name string
		re   sdk.RequestError
		want string
	}{
		{"message only", sdk.RequestError{Code: -32000, Message: "Authentication required"}, "Authentication required"},
		{"no message", sdk.RequestError{Code: -32000}, "JSON-RPC error -32000"},
		{"data strings", sdk.RequestError{Code: -32603, Message: "Internal error",
			Data: map[string]any{"message": "quota exceeded", "details": "retry later", "code": 7}},
			"Internal error: quota exceeded: retry later"},
		{"repeated message", sdk.RequestError{Message: "boom", Data: map[string]any{"message": "boom"}}, "boom"},
		{"non-string data", sdk.RequestError{Message: "boom", Data: "raw"}, "boom"},
		{"configured secret", sdk.RequestError{Message: "bad", Data: map[string]any{"message": "token hunter2hunter2 in verbose mode"}},
			"bad: token [redacted] in verbose mode"},
		{"bearer", sdk.RequestError{Message: "bad", Data: map[string]any{"details": "Authorization: Bearer abc.def"}},
			"bad: Authorization: Bearer [redacted]"},
		{"api key pair", sdk.RequestError{Message: "bad", Data: map[string]any{"details": `api_key="zzz" rejected`}},
			`bad: api_key="[redacted]" rejected`},
		{"bounded", sdk.RequestError{Message: "bad", Data: map[string]any{"details": long}},
			"bad: " + long[:maxDetail-len("…")] + "…"},
	}
	for _, tt := range tests {
		if got := p.rpcMessage(&tt.re); got != tt.want {
			t.Errorf("%s: rpcMessage = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestReapOrphans_KillsGroupsOfDeadOwnersOnly(t *testing.T) {
	// Not parallel: it reaps the records of every dead owner on the machine.
	t.Setenv("TMPDIR", t.TempDir())
	root := recordRoot()
	sleeper := exec.Command(fakeAgent)
	sleeper.Env = append(os.Environ(), "FAKE_MODE=sleeper")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = sleeper.Wait(); close(exited) }()
	t.Cleanup(func() { _ = sleeper.Process.Kill(); <-exited })
	pgid := strconv.Itoa(sleeper.Process.Pid)
	self, _ := procStart(os.Getpid())
	dead := filepath.Join(root, "999999999.1") // no such pid
	live := filepath.Join(root, fmt.Sprintf("%d.%d", os.Getpid(), self))
	for _, dir := range []string{dead, live} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	start, _ := procStart(sleeper.Process.Pid)
	startText := []byte(strconv.FormatUint(start, 10))
	if err := os.WriteFile(filepath.Join(live, pgid), startText, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := ReapOrphans(slog.Default())
	if err != nil || n != 0 || !alive(t, sleeper.Process.Pid) {
		t.Fatalf("ReapOrphans = %d, %v; it must not touch a live owner's agents", n, err)
	}
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	// A record whose leader runs with another start time: the id was
	// recycled, and the group is someone else's.
	if err := os.WriteFile(filepath.Join(dead, pgid), []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := ReapOrphans(slog.Default()); err != nil || n != 0 || !alive(t, sleeper.Process.Pid) {
		t.Fatalf("ReapOrphans = %d, %v; it must not kill a recycled group", n, err)
	}
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead, pgid), startText, 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := ReapOrphans(slog.Default()); err != nil || n != 1 {
		t.Fatalf("ReapOrphans = %d, %v; want the dead owner's group killed", n, err)
	}
	select {
	case <-exited:
	case <-time.After(wait):
		t.Fatal("the orphaned group survived")
	}
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead owner's records remain: %v", err)
	}
}
