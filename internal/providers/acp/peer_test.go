package acp

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The peer tests run a third-party agent: the example agent shipped with
// the ACP TypeScript SDK. It streams text, reports tool calls, asks
// session/request_permission with JSON-RPC id 0, and honours session/cancel.
// They need Node.js, and npm to install the SDK once into the user cache;
// without them they fail, saying so.
const tsSDK = "@agentclientprotocol/sdk@1.9.0"

func TestPeer_TypeScriptExampleAgent_PermissionPolicy(t *testing.T) {
	t.Parallel()
	node, script := tsExampleAgent(t)
	tests := []struct {
		policy, option, says string
	}{
		{config.PermissionReject, "reject", "I'll skip the configuration update."},
		{config.PermissionAllow, "allow", "I've successfully updated the configuration."},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			t.Parallel()
			p, b := setup(t, "", func(c *config.ProviderConfig) {
				c.Command, c.Args, c.Permission = node, []string{script}, tt.policy
			})
			r := start(t, p, b)
			res := result(t, r)
			text := model.Text(res.Output)
			if res.StopReason != subagent.StopCompleted || !strings.HasPrefix(text, "I'll help you with that.") ||
				!strings.Contains(text, tt.says) {
				t.Fatalf("result %+v, want completed text ending with %q", res, tt.says)
			}
			var permission sessionlog.ACPPermissionData
			toolCalls := 0
			for _, e := range events(t, b.store, r.ChildID()) {
				switch e.Type {
				case sessionlog.EventACPToolCall:
					toolCalls++
				case sessionlog.EventACPPermission:
					if err := json.Unmarshal(e.Data, &permission); err != nil {
						t.Fatal(err)
					}
				}
			}
			if toolCalls != 2 || permission.OptionID != tt.option || permission.ToolCallID != "call_2" {
				t.Fatalf("%d tool calls, permission %+v; want 2 and option %q for call_2", toolCalls, permission, tt.option)
			}
			dispose(t, r)
		})
	}
}

func TestPeer_TypeScriptExampleAgent_R26_Cancel(t *testing.T) {
	t.Parallel()
	node, script := tsExampleAgent(t)
	p, b := setup(t, "", func(c *config.ProviderConfig) {
		c.Command, c.Args = node, []string{script}
		c.DisposeEOFGrace = 2 * time.Second
	})
	r := start(t, p, b)
	first := "I'll help you with that. Let me start by reading some files to understand the current situation."
	waitForEvent(t, b.store, r.ChildID(), isTextChunk(first))
	r.Cancel()
	res := result(t, r)
	if res.StopReason != subagent.StopAborted || model.Text(res.Output) != first {
		t.Fatalf("result %+v, want aborted with the first chunk", res)
	}
	dispose(t, r)
	if alive(t, r.(*run).live.proc.pgid) {
		t.Fatal("the agent outlived Dispose")
	}
}

// peerFixture is where the TypeScript SDK is installed for these tests:
// .ci/run installs it there before `go test`, and the test installs it
// itself on a machine where that has not happened yet. It is gitignored.
const peerFixture = "testdata/peer/acp-sdk-1.9.0"

// tsExampleAgent returns node and the example agent's script, installing the
// SDK into peerFixture on first use.
func tsExampleAgent(t *testing.T) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("the ACP peer tests need Node.js (node on PATH) to run the TypeScript SDK example agent: %v", err)
	}
	dir, err := filepath.Abs(peerFixture)
	if err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(dir, "node_modules", "@agentclientprotocol", "sdk", "dist", "examples", "agent.js")
	if _, err := os.Stat(script); err == nil {
		return node, script
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("the ACP peer tests need npm to install %s: %v", tsSDK, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// Install beside the final place and rename, so that concurrent test
	// processes never see a half-installed package.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	out, err := exec.Command(npm, "install", "--no-audit", "--no-fund", "--prefix", tmp, tsSDK).CombinedOutput()
	if err != nil {
		t.Fatalf("npm install %s failed (the ACP peer tests need it): %v\n%s", tsSDK, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) {
		if _, statErr := os.Stat(script); statErr != nil {
			t.Fatalf("install %s into %s: %v", tsSDK, dir, err)
		}
	}
	return node, script
}

// The example agent advertises loadSession false and no session/resume:
// its provider learns that from initialize and stays one-shot.
func TestPeer_TypeScriptExampleAgent_CannotResumeSoStaysOneShot(t *testing.T) {
	t.Parallel()
	node, script := tsExampleAgent(t)
	p, b := setup(t, "", func(c *config.ProviderConfig) { c.Command, c.Args = node, []string{script} })
	_, err := p.PrepareContinuable(t.Context(), subagent.ContinuableCreateRequest{SessionID: "c1"})
	if subagent.ErrorCode(err) != subagent.EUnsupportedCapability || p.CanResume() {
		t.Fatalf("PrepareContinuable = %v, CanResume %v; want %s and false", err, p.CanResume(), subagent.EUnsupportedCapability)
	}
	assertNoChild(t, b)
}
