package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/subagent"
)

// askReplicas starts replicas A and B on one database with the ACP
// provider "peer" — the TypeScript SDK's example agent, which asks
// permission in its turn — under permission: ask, and returns them with
// the workspace root.
func askReplicas(t *testing.T) (a, b *server, root string) {
	t.Helper()
	script, err := filepath.Abs("../../internal/providers/acp/testdata/peer/acp-sdk-1.9.0/node_modules/@agentclientprotocol/sdk/dist/examples/agent.js")
	if err == nil {
		_, err = os.Stat(script)
	}
	if err != nil {
		t.Fatalf("the approval replica tests run the ACP TypeScript SDK's example agent; install it with scripts/test: %v", err)
	}
	root = t.TempDir()
	cfg := filepath.Join(t.TempDir(), "subagentd.yaml")
	yaml := fmt.Sprintf("workspaceRoots: [%s]\nproviders:\n  - name: peer\n    command: node\n    args: [%s]\n    permission: ask\n", root, script)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	db := pgtest.URL(t)
	envA, envB := replicaEnv(db, "replica-a"), replicaEnv(db, "replica-b")
	envA["SUBAGENTD_CONFIG"], envB["SUBAGENTD_CONFIG"] = cfg, cfg
	return startServer(t, envA), startServer(t, envB), root
}

// askOn starts a run of the peer on s under a new root session and
// returns the run id.
func askOn(t *testing.T, s *server, root string) string {
	t.Helper()
	var sess struct{ ID string }
	s.call(t, http.MethodPost, "/v1/sessions", fmt.Sprintf(`{"label":"approvals","cwd":%q}`, root), http.StatusCreated, &sess)
	var run struct{ RunID string }
	s.call(t, http.MethodPost, "/v1/runs", fmt.Sprintf(`{"provider":"peer","parentSessionId":%q,"prompt":%s}`, sess.ID, prompt("update the config")),
		http.StatusCreated, &run)
	return run.RunID
}

func approvalEvent(typ, runID, state string) func(frame) bool {
	return func(fr frame) bool { return fr.event == typ && fr.data["runId"] == runID && fr.data["state"] == state }
}

// A decision posted to replica B reaches the agent replica A drives: A
// sees B's commit through the lifecycle wake-ups (NOTIFY), answers the
// agent, and its turn completes as the agent says it does when allowed.
func TestReplicas_ApprovalDecidedOnAnotherReplica(t *testing.T) {
	t.Parallel()
	a, b, root := askReplicas(t)
	events := b.follow(t, "/v1/events?after=0&types=approval/requested,approval/decided,subagent/end")
	runID := askOn(t, a, root)
	req := events.wait(t, "approval/requested of "+runID, approvalEvent("approval/requested", runID, "pending"))
	id := req.data["approvalId"].(string)
	var decided struct {
		State    string
		Decision struct{ OptionID, By string }
	}
	b.call(t, http.MethodPost, "/v1/approvals/"+id+"/decision", `{"outcome":"allow"}`, http.StatusOK, &decided)
	sent := time.Now()
	if decided.State != "decided" || decided.Decision.OptionID != "allow" {
		t.Fatalf("decided on B: %+v", decided)
	}
	b.call(t, http.MethodPost, "/v1/approvals/"+id+"/decision", `{"outcome":"reject"}`, http.StatusConflict, nil)
	end := events.end(t, "runId", runID)
	if end.data["stopReason"] != subagent.StopCompleted || !strings.Contains(end.raw, "successfully updated the configuration") {
		t.Fatalf("run ended %s", end.raw)
	}
	t.Logf("decision on B to the end of A's turn: %v", end.at.Sub(sent).Round(time.Millisecond))
	types, _ := a.childLog(t, end.data["id"].(string))
	if !strings.Contains(strings.Join(types, ","), "approval/requested,approval/decided,acp/permission") {
		t.Fatalf("child log %v", types)
	}
	for _, s := range []*server{a, b} {
		if err := s.stop(t, syscall.SIGTERM); err != nil {
			t.Fatalf("stop: %v", err)
		}
	}
}

// A SIGKILL of the replica whose agent waits leaves nothing pending: once
// A's lease lapses, B closes A's run "owner lost" and cancels the approval.
func TestReplicas_SIGKILLWhilePendingCancelsTheApproval(t *testing.T) {
	t.Parallel()
	a, b, root := askReplicas(t)
	events := b.follow(t, "/v1/events?after=0&types=approval/requested,approval/decided,subagent/end")
	runID := askOn(t, a, root)
	req := events.wait(t, "approval/requested of "+runID, approvalEvent("approval/requested", runID, "pending"))
	if err := a.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("A survived SIGKILL")
	}
	killed := time.Now()
	end := events.end(t, "runId", runID)
	if end.data["stopReason"] != subagent.StopError {
		t.Fatalf("run ended %s, want owner lost", end.raw)
	}
	// The sweep runs every lease period after the run's close.
	closed := events.wait(t, "approval/decided of "+runID, approvalEvent("approval/decided", runID, "cancelled"))
	if took := closed.at.Sub(killed); took > takeoverBound+replicaTTL {
		t.Fatalf("approval cancelled %v after the SIGKILL, want within %v", took, takeoverBound+replicaTTL)
	}
	var ap struct{ State string }
	b.call(t, http.MethodGet, "/v1/approvals/"+req.data["approvalId"].(string), "", http.StatusOK, &ap)
	if ap.State != "cancelled" {
		t.Fatalf("approval %+v", ap)
	}
	var run struct{ Result struct{ Diagnostic string } }
	b.call(t, http.MethodGet, "/v1/runs/"+runID, "", http.StatusOK, &run)
	if !strings.Contains(run.Result.Diagnostic, "owner lost") {
		t.Fatalf("run %+v, want owner lost", run)
	}
	if err := b.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("stop B: %v", err)
	}
}
