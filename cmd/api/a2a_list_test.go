package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
)

// TestA2A_ListTasksPages: tasks/list pages through a context's tasks
// oldest first with a stable token, lists every context's under the a2a
// root without one, filters by status, and carries artifacts only when
// asked — over both bindings, each on a server of its own (the listing
// without a context is the tenant's).
func TestA2A_ListTasksPages(t *testing.T) {
	t.Parallel()
	for _, tp := range a2aTransports {
		t.Run(string(tp), func(t *testing.T) {
			t.Parallel()
			base := wiredServer(t, map[string]string{"SUBAGENTD_TOKENS": "a2a:" + a2aToken})
			c, _ := a2aClient(t, base, "spawn", tp, a2aToken)
			send := func(text, contextID string, immediately bool) *a2a.Task {
				t.Helper()
				req := textMessage(text, contextID, "")
				req.Config = &a2a.SendMessageConfig{ReturnImmediately: immediately}
				res, err := c.SendMessage(t.Context(), req)
				if err != nil {
					t.Fatal(err)
				}
				return res.(*a2a.Task)
			}
			a1 := send("one", "", false)
			a2 := send("two", a1.ContextID, false)
			a3 := send("three", a1.ContextID, false)
			b1 := send("other", "", false)
			slow := send("/sleep 60s\nslow", b1.ContextID, true)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if _, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: slow.ID}); err != nil {
					t.Errorf("cancel the slow task: %v", err)
				}
			})

			page := list(t, c, &a2a.ListTasksRequest{ContextID: a1.ContextID, PageSize: 2})
			if ids(page.Tasks) != ids([]*a2a.Task{a1, a2}) || page.NextPageToken == "" || page.PageSize != 2 {
				t.Fatalf("first page %s next %q, want %s with a token", ids(page.Tasks), page.NextPageToken, ids([]*a2a.Task{a1, a2}))
			}
			if len(page.Tasks[0].Artifacts) != 0 {
				t.Fatalf("artifacts without includeArtifacts: %+v", page.Tasks[0].Artifacts)
			}
			send("four", "", false) // a task of another context in between changes no page
			next := list(t, c, &a2a.ListTasksRequest{ContextID: a1.ContextID, PageSize: 2, PageToken: page.NextPageToken, IncludeArtifacts: true})
			if ids(next.Tasks) != ids([]*a2a.Task{a3}) || next.NextPageToken != "" || artifactText(next.Tasks[0]) != "echo: three" {
				t.Fatalf("second page %s next %q (%+v), want %s and no token", ids(next.Tasks), next.NextPageToken, next.Tasks, a3.ID)
			}

			all := list(t, c, &a2a.ListTasksRequest{})
			if len(all.Tasks) != 6 || all.Tasks[0].ID != a1.ID || all.Tasks[4].ID != slow.ID {
				t.Fatalf("every task: %s, want the 6 in start order", ids(all.Tasks))
			}
			working := list(t, c, &a2a.ListTasksRequest{Status: a2a.TaskStateWorking})
			if len(working.Tasks) == 0 || working.Tasks[0].ID != slow.ID {
				t.Fatalf("working tasks %s, want %s first", ids(working.Tasks), slow.ID)
			}
			done := list(t, c, &a2a.ListTasksRequest{Status: a2a.TaskStateCompleted, ContextID: a1.ContextID})
			if ids(done.Tasks) != ids([]*a2a.Task{a1, a2, a3}) {
				t.Fatalf("completed tasks of %s: %s", a1.ContextID, ids(done.Tasks))
			}

			if _, err := c.ListTasks(t.Context(), &a2a.ListTasksRequest{PageSize: 101}); !errors.Is(err, a2a.ErrInvalidParams) {
				t.Errorf("pageSize 101: %v, want InvalidParams", err)
			}
			if _, err := c.ListTasks(t.Context(), &a2a.ListTasksRequest{PageToken: "no-such-run"}); !errors.Is(err, a2a.ErrInvalidParams) {
				t.Errorf("an unknown page token: %v, want InvalidParams", err)
			}
		})
	}
}

func list(t *testing.T, c *a2aclient.Client, req *a2a.ListTasksRequest) *a2a.ListTasksResponse {
	t.Helper()
	out, err := c.ListTasks(t.Context(), req)
	if err != nil {
		t.Fatalf("ListTasks(%+v): %v", req, err)
	}
	return out
}

// ids joins the ids of tasks.
func ids(tasks []*a2a.Task) string {
	s := ""
	for _, t := range tasks {
		s += string(t.ID) + " "
	}
	return s
}
