package web_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestDashboard_CopyRunAsCurlAndExportTree: a run's "Copy as curl" gives a
// command whose body the API accepts and that names the run's provider,
// parent, label and prompt; "Export tree" downloads every session of the
// tree with its runs and whole log, as the API serves them.
func TestDashboard_CopyRunAsCurlAndExportTree(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	root, child, grand, childRun, _ := seedDelegation(t, srv)
	b := newBrowser(t)
	openDashboard(b, srv.URL+"/#s="+child)
	b.waitFor("the run card is shown", fmt.Sprintf(`document.querySelector('[data-testid="run-card"][data-run=%s]')`, jsString(childRun)))
	b.click("copying the run as curl", `[data-testid="run-copy-curl"]`)
	b.waitFor("the command is shown", `document.querySelector('[data-testid="run-curl"]')?.textContent.startsWith('curl -X POST')`)
	cmd := eval[string](b, "reading the command", `document.querySelector('[data-testid="run-curl"]').textContent`)
	m := regexp.MustCompile(`(?s)^curl -X POST '([^']+)' \\\n  -H 'Content-Type: application/json' \\\n  -d '(.*)'$`).FindStringSubmatch(cmd)
	if m == nil || m[1] != srv.URL+"/v1/runs" {
		t.Fatalf("curl command:\n%s", cmd)
	}
	var body struct {
		Provider, ParentSessionID, Label string
		Prompt                           []map[string]string
	}
	if err := json.Unmarshal([]byte(strings.ReplaceAll(m[2], `'\''`, `'`)), &body); err != nil {
		t.Fatalf("body of %s: %v", cmd, err)
	}
	if body.Provider != "spawn" || body.ParentSessionID != root || body.Label != "researcher" || len(body.Prompt) != 1 || body.Prompt[0]["text"] != "Find it" {
		t.Fatalf("body %+v", body)
	}
	var again struct {
		RunID string `json:"runId"`
	}
	srv.postJSON(t, "/v1/runs", json.RawMessage(m[2]), &again)
	if again.RunID == "" {
		t.Fatal("the API did not start the copied run")
	}

	b.click("exporting the tree", `[data-testid="action-export"]`)
	b.waitFor("the export is ready", `document.querySelector('[data-testid="export-link"]')`)
	got := eval[string](b, "reading the exported file", `fetch(document.querySelector('[data-testid="export-link"]').href).then(r => r.text())`)
	var file struct {
		Format        string `json:"format"`
		RootSessionID string `json:"rootSessionId"`
		Sessions      []struct {
			Session struct {
				ID string `json:"id"`
			} `json:"session"`
			Runs   []json.RawMessage `json:"runs"`
			Events []json.RawMessage `json:"events"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(got), &file); err != nil {
		t.Fatalf("exported file: %v", err)
	}
	if file.Format != "subagentd-tree/1" || file.RootSessionID != root || len(file.Sessions) < 3 || file.Sessions[0].Session.ID != root {
		t.Fatalf("exported %s with %d sessions", file.RootSessionID, len(file.Sessions))
	}
	for _, s := range file.Sessions {
		if n := len(srv.eventSeqs(t, s.Session.ID)); n != len(s.Events) {
			t.Errorf("session %s: %d events exported, the API has %d", s.Session.ID, len(s.Events), n)
		}
		if (s.Session.ID == child || s.Session.ID == grand) && len(s.Runs) != 1 {
			t.Errorf("session %s: %d runs exported, want 1", s.Session.ID, len(s.Runs))
		}
	}
}
