package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/subagent"
)

// rootsOnly is an API whose only working call is FaceRoot; it counts the
// calls.
type rootsOnly struct {
	API
	calls int
	err   error
}

func (r *rootsOnly) FaceRoot(ctx context.Context, label string) (string, error) {
	r.calls++
	return label + "~t", r.err
}

func TestArgs_BodyForTheRESTOperation(t *testing.T) {
	api := &rootsOnly{}
	a := parseArgs(json.RawMessage(`{"provider":"spawn","prompt":"hi","wait":5}`), []string{"provider", "prompt", "wait"})
	if wait := a.wait(DefaultDelegateWait); wait != 5*time.Second {
		t.Fatalf("wait = %v", wait)
	}
	a.content("prompt")
	a.parent(t.Context(), api)
	if err := a.err(); err != nil {
		t.Fatal(err)
	}
	want := `{"parentSessionId":"mcp~t","prompt":[{"text":"hi","type":"text"}],"provider":"spawn"}`
	if got := string(a.body()); got != want || api.calls != 1 {
		t.Fatalf("body = %s after %d root lookups, want %s after 1", got, api.calls, want)
	}
}

func TestArgs_InvalidCreatesNoRoot(t *testing.T) {
	api := &rootsOnly{}
	a := parseArgs(json.RawMessage(`{"prompt":"","wait":-1,"extra":true}`), []string{"prompt", "wait"})
	a.wait(0)
	a.content("prompt")
	a.parent(t.Context(), api)
	var se *subagent.Error
	if err := a.err(); !errors.As(err, &se) || se.Code != subagent.EInvalidRequest ||
		se.Message != "invalid request: extra: is not a known field; wait: must be an integer from 0 to 300" {
		t.Fatalf("err = %v", err)
	}
	if api.calls != 0 {
		t.Fatalf("invalid arguments looked up the root %d times", api.calls)
	}
	if got := string(a.body()); got != `{"extra":true,"prompt":[]}` {
		t.Fatalf("body = %s: an empty string prompt must become no block", got)
	}
}

func TestArgs_NotAnObject(t *testing.T) {
	for _, raw := range []string{`[1]`, `"x"`, `7`} {
		a := parseArgs(json.RawMessage(raw), nil)
		if err := a.err(); subagent.ErrorCode(err) != subagent.EInvalidRequest {
			t.Fatalf("arguments %s: err = %v, want INVALID_REQUEST", raw, err)
		}
	}
	if err := parseArgs(nil, nil).err(); err != nil {
		t.Fatalf("absent arguments: %v", err)
	}
}

func TestArgs_RootFailureIsTheAnswer(t *testing.T) {
	api := &rootsOnly{err: subagent.Errorf("UNAVAILABLE", "the database is unreachable")}
	a := parseArgs(json.RawMessage(`{"childId":"c"}`), []string{"childId"})
	a.id("childId")
	a.parent(t.Context(), api)
	if err := a.err(); subagent.ErrorCode(err) != "UNAVAILABLE" {
		t.Fatalf("err = %v, want the root lookup's", err)
	}
}
