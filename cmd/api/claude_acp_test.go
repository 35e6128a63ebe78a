package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/subagent"
)

// fakeMessages is a loopback fake of Anthropic's streaming Messages API
// for Claude Code: a request that offers the Write tool and carries no tool
// result yet is answered with a Write of content to path; every other
// request (the turn after the tool ran, Claude Code's side requests) with
// a short text. It keeps when the first Write tool result reached it.
type fakeMessages struct {
	*httptest.Server
	resulted atomic.Pointer[time.Time]
}

func newFakeMessages(t *testing.T, path, content string) *fakeMessages {
	t.Helper()
	f := &fakeMessages{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.HasSuffix(r.URL.Path, "/v1/messages") {
			// A token count or a probe: any small answer does.
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"input_tokens": 10}`)
			return
		}
		var req struct {
			Tools []struct{ Name string }
		}
		_ = json.Unmarshal(body, &req)
		offersWrite := false
		for _, tool := range req.Tools {
			offersWrite = offersWrite || tool.Name == "Write"
		}
		answered := strings.Contains(string(body), `"tool_result"`)
		if now := time.Now(); answered {
			f.resulted.CompareAndSwap(nil, &now)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(typ string, v map[string]any) {
			v["type"] = typ
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
		}
		send("message_start", map[string]any{"message": map[string]any{"id": "msg_1", "type": "message", "role": "assistant",
			"model": "claude-sonnet-4-5", "content": []any{}, "usage": map[string]int{"input_tokens": 120, "output_tokens": 1}}})
		if offersWrite && !answered {
			input, _ := json.Marshal(map[string]string{"file_path": path, "content": content})
			send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Write", "input": map[string]any{}}})
			send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
			send("content_block_stop", map[string]any{"index": 0})
			send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": "tool_use"}, "usage": map[string]int{"output_tokens": 30}})
		} else {
			send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
			send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": "Done with the file."}})
			send("content_block_stop", map[string]any{"index": 0})
			send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]int{"output_tokens": 5}})
		}
		send("message_stop", map[string]any{})
	}))
	t.Cleanup(f.Close)
	return f
}

// claudeServer starts subagentd (memstore) with the ACP provider "claude"
// — claude-agent-acp, Claude Code over ACP — under permission: ask, its
// model the fake at model and its workspace root work.
func claudeServer(t *testing.T, model, work string) *server {
	t.Helper()
	script, err := filepath.Abs("testdata/claude-acp/node_modules/@zed-industries/claude-agent-acp/dist/index.js")
	if err == nil {
		_, err = os.Stat(script)
	}
	if err != nil {
		t.Fatalf("this test runs claude-agent-acp; install it with scripts/test: %v", err)
	}
	home := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "subagentd.yaml")
	// IS_SANDBOX: Claude Code refuses to start as root outside a sandbox.
	yaml := fmt.Sprintf(`workspaceRoots: [%s]
providers:
  - name: claude
    command: node
    args: [%s]
    env: {ANTHROPIC_BASE_URL: %q, ANTHROPIC_API_KEY: sk-test, HOME: %s, DISABLE_TELEMETRY: "1",
          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1", CLAUDE_CODE_MAX_RETRIES: "0", IS_SANDBOX: "1"}
    permission: ask
`, work, script, model, home)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, map[string]string{"SUBAGENTD_CONFIG": cfg})
	t.Cleanup(func() {
		if err := s.stop(t, syscall.SIGTERM); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return s
}

// Claude Code over ACP, asked to write a file, waits on an approval that
// subagentd lists and streams: allowed, the file is written and the run
// completes with Claude Code's answer and its reported usage; rejected,
// Claude Code is told, nothing is written and the run still settles.
func TestClaudeCodeACP_ApprovalAllowsOrRejectsAWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		outcome string
		written bool
	}{{"allow", true}, {"reject", false}} {
		t.Run(tc.outcome, func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			target := filepath.Join(work, "notes.txt")
			model := newFakeMessages(t, target, "written by Claude Code\n")
			s := claudeServer(t, model.URL, work)
			events := s.follow(t, "/v1/events?after=0&types=approval/requested,approval/decided,subagent/end")
			var sess struct{ ID string }
			s.call(t, http.MethodPost, "/v1/sessions", fmt.Sprintf(`{"label":"claude","cwd":%q}`, work), http.StatusCreated, &sess)
			var run struct{ RunID string }
			s.call(t, http.MethodPost, "/v1/runs", fmt.Sprintf(`{"provider":"claude","parentSessionId":%q,"prompt":%s}`, sess.ID, prompt("write the notes")),
				http.StatusCreated, &run)
			req := events.wait(t, "approval/requested of "+run.RunID, approvalEvent("approval/requested", run.RunID, "pending"))
			id := req.data["approvalId"].(string)
			var listed struct {
				Approvals []struct {
					ID       string
					ToolCall struct {
						Title, Kind string
						Locations   []struct{ Path string }
					}
				}
			}
			s.call(t, http.MethodGet, "/v1/approvals?state=pending&rootSessionId="+sess.ID, "", http.StatusOK, &listed)
			if len(listed.Approvals) != 1 || listed.Approvals[0].ID != id || listed.Approvals[0].ToolCall.Kind != "edit" ||
				len(listed.Approvals[0].ToolCall.Locations) != 1 || listed.Approvals[0].ToolCall.Locations[0].Path != target {
				t.Fatalf("pending approvals %+v, want the Write of %s", listed, target)
			}
			if _, err := os.Stat(target); !os.IsNotExist(err) {
				t.Fatalf("%s exists before the decision (%v)", target, err)
			}
			decided := time.Now()
			s.call(t, http.MethodPost, "/v1/approvals/"+id+"/decision", fmt.Sprintf(`{"outcome":%q}`, tc.outcome), http.StatusOK, nil)
			end := events.end(t, "runId", run.RunID)
			if end.data["stopReason"] != subagent.StopCompleted {
				t.Fatalf("run ended %s", end.raw)
			}
			got, err := os.ReadFile(target)
			if tc.written != (err == nil) || (tc.written && string(got) != "written by Claude Code\n") {
				t.Fatalf("after %s: %s holds %q (%v)", tc.outcome, target, got, err)
			}
			at := model.resulted.Load()
			if at == nil {
				t.Fatalf("Claude Code never sent the model the Write's result")
			}
			t.Logf("%s: from the decision's request to Claude Code's model call with the Write's result: %v", tc.outcome, at.Sub(decided).Round(time.Millisecond))
			var settled struct {
				Result struct {
					Output []struct{ Text string }
					Usage  struct {
						InputTokens, OutputTokens int
						Known                     bool
					}
				}
			}
			s.call(t, http.MethodGet, "/v1/runs/"+run.RunID, "", http.StatusOK, &settled)
			if len(settled.Result.Output) == 0 || !strings.Contains(settled.Result.Output[0].Text, "Done with the file.") ||
				!settled.Result.Usage.Known || settled.Result.Usage.InputTokens == 0 {
				t.Fatalf("settled run %+v", settled.Result)
			}
			types, _ := s.childLog(t, end.data["id"].(string))
			if !strings.Contains(strings.Join(types, ","), "approval/requested,approval/decided,acp/permission") {
				t.Fatalf("child log %v", types)
			}
		})
	}
}
