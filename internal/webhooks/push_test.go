package webhooks

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// fakePushBody stands in for the A2A face's payload: it shows the event.
func fakePushBody(e PushEvent) ([]byte, error) {
	m := map[string]any{"task": e.TaskID, "context": e.ContextID, "stop": e.StopReason, "at": timestamp(e.At)}
	if e.Approval != nil {
		m["approval"] = e.Approval
	}
	if e.Decided {
		m["decided"] = true
	}
	return json.Marshal(m)
}

// TestPush_ApprovalsOfItsTask: the approval events of a push config's
// task are deliveries too — the approval it waits on, then its close —
// and another task's are not.
func TestPush_ApprovalsOfItsTask(t *testing.T) {
	t.Parallel()
	b := setup(t, withPush)
	rc := newReceiver(t, nil)
	if _, err := b.svc.CreatePush(t.Context(), PushParams{TaskID: "task-1", URL: rc.srv.URL}); err != nil {
		t.Fatal(err)
	}
	approval := func(typ, task, id string) {
		t.Helper()
		payload := fmt.Sprintf(`{"approvalId":%q,"state":"pending","runId":"run-1","taskId":%q,"sessionId":"child","rootSessionId":"root","provider":"acp","toolCall":{"id":"call-9","title":"Delete build/","kind":"delete"}}`, id, task)
		if _, err := b.st.AppendLifecycle(t.Context(), store.LifecycleEvent{Type: typ, RunID: "run-1", Payload: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
	}
	approval("approval/requested", "task-2", "ap-0")
	approval("approval/requested", "task-1", "ap-1")
	approval("approval/decided", "task-1", "ap-1")
	req, dec := rc.next(t), rc.next(t)
	var got struct {
		Context  string
		Approval *PushApproval
		Decided  bool
	}
	if err := json.Unmarshal(req.body, &got); err != nil || got.Context != "child" || got.Approval == nil ||
		*got.Approval != (PushApproval{ID: "ap-1", ToolCallID: "call-9", Title: "Delete build/", ToolKind: "delete"}) || got.Decided {
		t.Fatalf("the request's delivery %s: want approval ap-1 of context child", req.body)
	}
	got.Approval = nil
	if err := json.Unmarshal(dec.body, &got); err != nil || got.Approval != nil || !got.Decided {
		t.Fatalf("the decision's delivery %s: want decided", dec.body)
	}
	rc.none(t)
}

func withPush(c *Config) { c.PushBody = fakePushBody }

// TestPush_OnlyItsTaskSignedWithItsToken: a push config gets its own
// task's settlement and nothing else, as PushBody's body, with the
// config's Authorization, signed with its token (verified by the Standard
// Webhooks reference library), and is done once the task settled.
func TestPush_OnlyItsTaskSignedWithItsToken(t *testing.T) {
	t.Parallel()
	b := setup(t, withPush)
	rc := newReceiver(t, nil)
	w, err := b.svc.CreatePush(t.Context(), PushParams{TaskID: "task-1", ConfigID: "cfg", URL: rc.srv.URL, Scheme: "Bearer", Credentials: "s3cret", Token: "the token"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Push == nil || w.Push.Authorization != "Bearer s3cret" || w.Push.ConfigID != "cfg" || !w.Enabled {
		t.Fatalf("created %+v", w)
	}
	b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-2", TaskID: "task-2"})
	b.event(t, subagent.Event{Type: subagent.EventEnd, RunID: "run-0"}) // a one-shot run
	b.event(t, subagent.Event{Type: subagent.EventEnd, RunID: "run-2", TaskID: "task-2", StopReason: "completed"})
	end := b.event(t, subagent.Event{Type: subagent.EventEnd, RunID: "run-1", TaskID: "task-1", StopReason: "completed"})

	r := rc.next(t)
	verify(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("the token")), r)
	if got := r.header.Get("Authorization"); got != "Bearer s3cret" {
		t.Fatalf("Authorization %q, want the config's", got)
	}
	if r.header.Get("webhook-id") != eventID(end) || strings.Contains(fmt.Sprint(r.header), "the token") {
		t.Fatalf("headers %v: want the settlement's id and no token", r.header)
	}
	want := fmt.Sprintf(`{"at":%q,"context":"child","stop":"completed","task":"task-1"}`, timestamp(end.Time))
	if string(r.body) != want {
		t.Fatalf("body %s, want %s", r.body, want)
	}
	page := waitDeliveries(t, b.svc, w.ID, 1)
	if len(page) != 1 || page[0].Type != TaskSettled || page[0].Status != store.DeliverySucceeded {
		t.Fatalf("delivery log %+v", page)
	}
	got, err := b.svc.GetPush(t.Context(), "task-1", "cfg")
	if err != nil || got.Enabled || got.DisabledReason != settledReason {
		t.Fatalf("after the settlement the config is %+v, %v; want it disabled %q", got, err, settledReason)
	}
	rc.none(t)
}

// TestPush_ListGetReplaceDelete: configs are per task and tenant, a
// config of an id the task has replaces it, a task has at most
// MaxPushPerTask, and the REST listing never shows them.
func TestPush_ListGetReplaceDelete(t *testing.T) {
	t.Parallel()
	b := setup(t, withPush)
	ctx := t.Context()
	mk := func(task, id, url string) store.Webhook {
		t.Helper()
		w, err := b.svc.CreatePush(ctx, PushParams{TaskID: task, ConfigID: id, URL: url})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	a := mk("task-1", "a", "https://a.example/1")
	gen := mk("task-1", "", "https://a.example/2")
	if !strings.HasPrefix(gen.Push.ConfigID, "pc_") {
		t.Fatalf("a config without an id got %q", gen.Push.ConfigID)
	}
	mk("task-2", "a", "https://b.example/")
	repl := mk("task-1", "a", "https://a.example/new")
	if repl.ID == a.ID {
		t.Fatal("a replaced config kept its endpoint")
	}
	list, err := b.svc.TaskPush(ctx, "task-1")
	if err != nil || len(list) != 2 || list[0].Push.ConfigID != gen.Push.ConfigID || list[1].URL != "https://a.example/new" {
		t.Fatalf("TaskPush(task-1) = %+v, %v", list, err)
	}
	if l, _ := b.svc.List(ctx); len(l) != 0 {
		t.Fatalf("the REST listing shows %+v", l)
	}
	if _, err := b.svc.GetPush(store.WithTenant(ctx, "other"), "task-1", "a"); subagent.ErrorCode(err) != EPushNotFound {
		t.Fatalf("GetPush from another tenant = %v, want %s", err, EPushNotFound)
	}
	if err := b.svc.DeletePush(ctx, "task-1", "a"); err != nil {
		t.Fatal(err)
	}
	if err := b.svc.DeletePush(ctx, "task-1", "a"); subagent.ErrorCode(err) != EPushNotFound {
		t.Fatalf("second delete = %v, want %s", err, EPushNotFound)
	}
	for i := range MaxPushPerTask - 1 {
		mk("task-1", fmt.Sprint("n", i), "https://a.example/")
	}
	if _, err := b.svc.CreatePush(ctx, PushParams{TaskID: "task-1", URL: "https://a.example/"}); subagent.ErrorCode(err) != ETooMany {
		t.Fatalf("config %d = %v, want %s", MaxPushPerTask+1, err, ETooMany)
	}
	mk("task-1", "n0", "https://a.example/replaced") // a replacement is not one more
}

// TestPush_RejectsBadInput: every field is bounded and checked.
func TestPush_RejectsBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, withPush)
	good := PushParams{TaskID: "task-1", URL: "https://x.example/"}
	for field, p := range map[string]PushParams{
		"taskId":                     {URL: good.URL},
		"url":                        {TaskID: "t", URL: "ftp://x.example/"},
		"id":                         {TaskID: "t", URL: good.URL, ConfigID: "a/b"},
		"id too long":                {TaskID: "t", URL: good.URL, ConfigID: strings.Repeat("a", MaxPushID+1)},
		"authentication.scheme":      {TaskID: "t", URL: good.URL, Scheme: "Bea rer", Credentials: "x"},
		"authentication.credentials": {TaskID: "t", URL: good.URL, Scheme: "Bearer", Credentials: "x\r\nX-Evil: 1"},
		"credentials missing":        {TaskID: "t", URL: good.URL, Scheme: "Bearer"},
		"token":                      {TaskID: "t", URL: good.URL, Token: "\xff"},
		"token too long":             {TaskID: "t", URL: good.URL, Token: strings.Repeat("a", MaxPushCredential+1)},
	} {
		if _, err := b.svc.CreatePush(t.Context(), p); subagent.ErrorCode(err) != subagent.EInvalidRequest {
			t.Errorf("%s: create %+v = %v, want INVALID_REQUEST", field, p, err)
		}
	}
	if _, err := setup(t, nil).svc.CreatePush(t.Context(), good); subagent.ErrorCode(err) != subagent.EUnsupportedCapability {
		t.Errorf("without a PushBody: %v, want UNSUPPORTED_CAPABILITY", err)
	}
}
