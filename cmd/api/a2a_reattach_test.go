package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Two replicas on one database; A drives a continuable A2A child whose
// remote task waits at a gate the test holds, and is SIGKILLed mid-task.
// A's activation is closed as owner lost, and B, which takes the child
// over, rejoins the remote task without waiting for a followup: once the
// gate opens, B's activation of the child ends completed with the task's
// text, the child's log holds each piece of it once and the turn's real
// end, and a followup through B is a message in the same context.
func TestReplicas_A2AChildReattachesAfterSIGKILL(t *testing.T) {
	t.Parallel()
	rm, a, b, events := a2aReplicas(t)
	parent, childID, taskID := a.remoteChild(t, "remote", "gate after")
	first := events.start(t, "taskId", taskID)
	b.waitChildEvent(t, childID, func(typ, data string) bool { return typ == "assistant/chunk" && strings.Contains(data, `"before"`) })

	killed := time.Now()
	if err := a.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("the SIGKILLed replica exited cleanly")
	}
	// A's activation ends as owner lost (R130)…
	lost := events.end(t, "taskId", taskID)
	var run struct {
		Result struct{ StopReason, Diagnostic string }
	}
	b.call(t, http.MethodGet, "/v1/runs/"+first.data["runId"].(string), "", http.StatusOK, &run)
	if lost.data["stopReason"] != subagent.StopError || !strings.HasPrefix(run.Result.Diagnostic, "owner lost") {
		t.Fatalf("A's activation ended %s, %+v; want error, owner lost", lost.raw, run.Result)
	}
	// …and B starts one that follows the remote task, before any followup.
	again := events.wait(t, "B's activation of the child", func(fr frame) bool {
		return fr.event == subagent.EventStart && fr.data["id"] == childID && fr.data["taskId"] != taskID
	})
	took := again.at.Sub(killed)
	if took > takeoverBound {
		t.Fatalf("B rejoined the task %v after the SIGKILL, want within %v", took, takeoverBound)
	}
	t.Logf("B rejoined the remote task %v after the SIGKILL (lease %v)", took, replicaTTL)
	close(rm.Gate)
	end := events.end(t, "taskId", again.data["taskId"].(string))
	if end.data["stopReason"] != subagent.StopCompleted {
		t.Fatalf("B's activation ended %s, want completed", end.raw)
	}

	types, data := b.childLog(t, childID)
	var text, ends []string
	for i, typ := range types {
		var d struct {
			Turn   int
			Chunk  struct{ Type, Text string }
			Reason struct{ Kind string }
		}
		if err := json.Unmarshal([]byte(data[i]), &d); err != nil {
			t.Fatal(err)
		}
		switch {
		case typ == "assistant/chunk" && d.Chunk.Type == "text-delta":
			text = append(text, d.Chunk.Text)
		case typ == "turn/end":
			ends = append(ends, fmt.Sprintf("%d %s", d.Turn, d.Reason.Kind))
		}
	}
	if strings.Join(text, "|") != "before|after" || strings.Join(ends, ",") != "1 completed" {
		t.Fatalf("child log text %q, turn ends %v; want the task's text once and its completion", text, ends)
	}

	fu := b.followup(t, parent, childID, "echo next")
	if got := taskText(t, b, fu.TaskID); got != "echo: next" {
		t.Fatalf("followup through B: %q", got)
	}
	contexts, _ := rm.Seen()
	if len(contexts) != 2 || contexts[1][0] != contexts[0][1] {
		t.Fatalf("remote contexts %v, want the followup in the first task's context", contexts)
	}
	if err := b.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("replica B: %v", err)
	}
}

// A remote task waiting for a person's answer outlives its replica too:
// after a SIGKILL of A, whose child's task was input-required, A's
// approval is cancelled as its owner's, and B, rejoining the task, asks
// again; B's approval decided, the decision goes into the task and the
// child's turn completes with the agent's answer.
func TestReplicas_A2AInputRequiredIsAskedAgainAfterSIGKILL(t *testing.T) {
	t.Parallel()
	rm, a, b, events := a2aReplicas(t)
	_, childID, taskID := a.remoteChild(t, "asker", "input which file?")
	asked := func(other string) received {
		return events.wait(t, "approval/requested", func(fr frame) bool {
			return fr.event == "approval/requested" && fr.data["sessionId"] == childID && fr.data["approvalId"] != other
		})
	}
	firstID := asked("").data["approvalId"].(string)
	if err := a.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("the SIGKILLed replica exited cleanly")
	}
	events.wait(t, "A's approval cancelled", func(fr frame) bool {
		return fr.event == "approval/decided" && fr.data["approvalId"] == firstID && fr.data["state"] == "cancelled"
	})
	again := asked(firstID)
	b.call(t, http.MethodPost, "/v1/approvals/"+again.data["approvalId"].(string)+"/decision", `{"outcome":"allow","reason":"main.go"}`, http.StatusOK, nil)
	end := events.wait(t, "B's activation's end", func(fr frame) bool {
		return fr.event == subagent.EventEnd && fr.data["id"] == childID && fr.data["taskId"] != taskID
	})
	if end.data["stopReason"] != subagent.StopCompleted || !strings.Contains(end.raw, "answered: main.go") {
		t.Fatalf("B's activation ended %s, want completed with the agent's answer", end.raw)
	}
	_, tasks := rm.Seen()
	if len(tasks) != 2 || tasks[1] != tasks[0] {
		t.Fatalf("remote tasks %v, want the decision in the asking task", tasks)
	}
	if err := b.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("replica B: %v", err)
	}
}

// a2aReplicas starts a remote A2A agent and two replicas, A and B, on one
// database, each with the agent as provider "remote", and follows B's
// lifecycle events from the start.
func a2aReplicas(t *testing.T) (rm *a2aRemote, a, b *server, events *feed) {
	t.Helper()
	rm = newA2ARemote(t)
	db := pgtest.URL(t)
	env := func(name string) map[string]string {
		e := replicaEnv(db, name)
		e["SUBAGENTD_CONFIG"], e["SUBAGENTD_A2A_ALLOW_PRIVATE"] = rm.config(t), "true"
		return e
	}
	a = startServer(t, env("replica-a"))
	b = startServer(t, env("replica-b"))
	return rm, a, b, b.follow(t, "/v1/events?after=0")
}
