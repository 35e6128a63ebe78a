package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/subagent"
)

// holdingModel is an OpenAI-compatible server that answers "done" at once,
// except a request whose last message says HOLD: that one streams one
// delta and holds until the client goes away — until release is called,
// after which every request is answered.
func holdingModel(t *testing.T) (srv *httptest.Server, release func()) {
	var released atomic.Bool
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Messages []json.RawMessage }
		_ = json.NewDecoder(r.Body).Decode(&req)
		hold := len(req.Messages) > 0 && bytes.Contains(req.Messages[len(req.Messages)-1], []byte("HOLD"))
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(delta, finish string) {
			fmt.Fprint(w, `data: {"id":"1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`+delta+`,"finish_reason":`+finish+`}]}`+"\n\n")
			w.(http.Flusher).Flush()
		}
		if hold && !released.Load() {
			chunk(`{"role":"assistant","content":"working"}`, "null")
			<-r.Context().Done()
			return
		}
		chunk(`{"role":"assistant","content":"done"}`, "null")
		chunk(`{}`, `"stop"`)
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return srv, func() { released.Store(true) }
}

// post sends one JSON request from a load goroutine (which must not fail
// the test) and returns the status and body; err once the server is gone.
func post(base, path, body string) (int, []byte, error) {
	resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// accepted records the messages the server accepted (answered 2xx), by
// session, and closes reached once it holds n.
type accepted struct {
	mu      sync.Mutex
	ids     map[string][]string
	total   int
	n       int
	reached chan struct{}
}

func (a *accepted) add(sessionID, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids[sessionID] = append(a.ids[sessionID], id)
	a.total++
	if a.total == a.n {
		close(a.reached)
	}
}

// Under load — root sessions receiving prompts while busy, continuable
// children receiving followups, runs settling and sending notices — a
// SIGKILL at a random moment loses no accepted message: after the restart
// every prompt and followup answered 2xx is in its session's log exactly
// once, no log holds any message twice, every child's settlement notices
// reached its parent, and every run has exactly one subagent/end.
func TestRestart_SIGKILL_UnderLoadEveryAcceptedMessageIsLoggedOnce(t *testing.T) {
	t.Parallel()
	mdl, release := holdingModel(t)
	cfg := filepath.Join(t.TempDir(), "subagentd.yaml")
	yaml := fmt.Sprintf("models:\n  - name: m\n    baseURL: %s\n    model: m\ndefaultModel: m\n", mdl.URL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "SUBAGENTD_CONFIG": cfg, "SUBAGENTD_REPLICA_ID": "replica-" + t.Name()}
	a := startServer(t, env)

	// Three roots: two held busy by a turn that never ends, one free.
	roots := make([]string, 3)
	for i := range roots {
		var sess struct{ ID string }
		a.call(t, http.MethodPost, "/v1/sessions", fmt.Sprintf(`{"label":"root %d"}`, i), http.StatusCreated, &sess)
		roots[i] = sess.ID
	}
	for _, root := range roots[:2] {
		a.call(t, http.MethodPost, "/v1/sessions/"+root+"/messages", `{"content":[{"type":"text","text":"HOLD"}]}`, http.StatusAccepted, nil)
		a.waitStream(t, "/v1/sessions/"+root+"/stream?after=-1", func(typ, data string) bool {
			return typ == "assistant/chunk" && strings.Contains(data, "working")
		})
	}
	// Two continuable children under every root; their settlements notify
	// the roots, busy or not.
	var children []struct{ id, parent string }
	for _, root := range roots {
		for j := range 2 {
			var c struct{ ChildID string }
			a.call(t, http.MethodPost, "/v1/subagents", fmt.Sprintf(
				`{"provider":"spawn","parentSessionId":%q,"label":"worker %d","prompt":[{"type":"text","text":"task"}]}`, root, j),
				http.StatusCreated, &c)
			children = append(children, struct{ id, parent string }{c.ChildID, root})
		}
	}

	k := 20 + rand.IntN(40)
	t.Logf("SIGKILL after %d accepted messages", k)
	acc := &accepted{ids: map[string][]string{}, n: k, reached: make(chan struct{})}
	var load sync.WaitGroup
	for i, root := range roots {
		load.Go(func() {
			for n := 0; ; n++ {
				status, data, err := post(a.base, "/v1/sessions/"+root+"/messages",
					fmt.Sprintf(`{"content":[{"type":"text","text":"prompt %d.%d"}]}`, i, n))
				if err != nil {
					return
				}
				var ans struct{ MessageID string }
				if status == http.StatusAccepted && json.Unmarshal(data, &ans) == nil {
					acc.add(root, ans.MessageID)
				}
			}
		})
	}
	for i, c := range children {
		load.Go(func() {
			for n := 0; ; n++ {
				status, data, err := post(a.base, "/v1/subagents/"+c.id+"/followup",
					fmt.Sprintf(`{"parentSessionId":%q,"content":[{"type":"text","text":"followup %d.%d"}]}`, c.parent, i, n))
				if err != nil {
					return
				}
				var ans struct{ MessageID string }
				if status == http.StatusOK && json.Unmarshal(data, &ans) == nil {
					acc.add(c.id, ans.MessageID)
				}
			}
		})
	}
	load.Go(func() {
		for n := 0; ; n++ {
			body := fmt.Sprintf(`{"provider":"spawn","parentSessionId":%q,"prompt":[{"type":"text","text":"run %d"}]}`, roots[2], n)
			if _, _, err := post(a.base, "/v1/runs", body); err != nil {
				return
			}
		}
	})
	<-acc.reached
	if err := a.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("SIGKILL: process exited cleanly")
	}
	load.Wait()

	// The next process recovers; every accepted message reaches its log.
	release()
	b := startServer(t, env)
	acc.mu.Lock()
	want := acc.ids
	acc.mu.Unlock()
	for sessionID, ids := range want {
		missing := map[string]bool{}
		for _, id := range ids {
			missing[id] = true
		}
		b.waitStream(t, "/v1/sessions/"+sessionID+"/stream?after=-1", func(typ, data string) bool {
			if typ == "user/message" {
				for id := range missing {
					if strings.Contains(data, `"id":"`+id+`"`) {
						delete(missing, id)
					}
				}
			}
			return len(missing) == 0
		})
	}
	if err := b.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}

	pool, err := pgxpool.New(t.Context(), env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// No log holds a message twice, and each accepted one is there once.
	var dups int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM (SELECT 1 FROM session_events
		WHERE type = 'user/message' GROUP BY session_id, data->>'id' HAVING count(*) > 1) d`).Scan(&dups); err != nil {
		t.Fatal(err)
	}
	if dups != 0 {
		t.Fatalf("%d messages appear more than once in their log", dups)
	}
	// Every child's notices reached its parent: one per activation that
	// settled in its process (an activation whose owner was lost sends
	// none; one killed between its notice and its end sends one more).
	// A notice reached the parent once it is in the parent's durable
	// inbox: one that settled just before the SIGTERM may still wait there,
	// queued behind a turn the shutdown stopped, for the next start — so
	// a notice counts when its id is in the parent's log or its inbox.
	for _, c := range children {
		var notices, settled int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM (
			SELECT data->>'id' FROM session_events WHERE session_id = $1
				AND type = 'user/message' AND data->'source'->>'kind' = $2 AND data->'source'->>'senderSessionId' = $3
			UNION
			SELECT id FROM inbox WHERE child_id = $1
				AND source->>'kind' = $2 AND source->>'senderSessionId' = $3) n`,
			c.parent, subagent.SourceSubagentSettled, c.id).Scan(&notices); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM runs WHERE child_id = $1 AND kind = 'activation'
			AND diagnostic NOT LIKE '%owner lost%'`, c.id).Scan(&settled); err != nil {
			t.Fatal(err)
		}
		if notices < settled {
			t.Fatalf("child %s: %d notices in its parent's log for %d settled activations", c.id, notices, settled)
		}
	}
	// Every run has exactly one start and one end.
	var runs, bad int
	if err := pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE starts <> 1 OR ends <> 1 OR state = 'running') FROM (
		SELECT r.id, r.state,
			(SELECT count(*) FROM lifecycle_events l WHERE l.run_id = r.id AND l.type = $1) AS starts,
			(SELECT count(*) FROM lifecycle_events l WHERE l.run_id = r.id AND l.type = $2) AS ends
		FROM runs r) x`, subagent.EventStart, subagent.EventEnd).Scan(&runs, &bad); err != nil {
		t.Fatal(err)
	}
	if runs == 0 || bad != 0 {
		t.Fatalf("%d of %d runs lack exactly one subagent/start and one subagent/end", bad, runs)
	}
}
