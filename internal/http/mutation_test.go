package http

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
)

var mutations = flag.Int("mutations", 400, "requests TestMutatedRequests sends (the issue 14 check ran 10000)")

// TestMutatedRequests sends mutated requests to every operation of the
// spec — path ids, query parameters, headers and bodies replaced by junk,
// fields dropped, added, retyped, bodies truncated — and holds every answer
// to: no 5xx, and every error is a problem+json the spec's Problem schema
// accepts. The seed is logged, so a failure can be replayed.
func TestMutatedRequests(t *testing.T) {
	doc, _ := spec(t)
	w := setupWorldWith(t, []func(*Config){func(c *Config) { c.RateLimit = -1 }}, scriptedRoute("s", replying(nil)))
	root := w.rootSession(t)
	run := w.startRun(t, "spawn", root, map[string]any{})
	child := w.startChild(t, root, "hello", nil)
	w.settledTask(t, child.TaskID)
	fixtures := map[string]string{"id": root, "runId": run.RunID, "childId": child.ChildID, "taskId": child.TaskID, "name": "spawn", "file": "index.html", "asset": "app.js", "dir": "lib"}

	type op struct {
		method, path string
		op           *openapi3.Operation
	}
	var ops []op
	for path, item := range doc.Paths.Map() {
		for method, o := range item.Operations() {
			ops = append(ops, op{method, path, o})
		}
	}
	slices.SortFunc(ops, func(a, b op) int { return strings.Compare(a.method+a.path, b.method+b.path) })

	seed := time.Now().UnixNano()
	t.Logf("seed %d, %d requests over %d operations", seed, *mutations, len(ops))
	var (
		mu       sync.Mutex
		failures []string
		statuses = map[int]int{}
	)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for worker := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(worker)))
			for i := range jobs {
				o := ops[i%len(ops)]
				req := mutate(t.Context(), rng, w.ts.URL, o.method, o.path, o.op, fixtures, root)
				status, problem := send(req)
				mu.Lock()
				statuses[status]++
				if problem != "" && len(failures) < 20 {
					failures = append(failures, fmt.Sprintf("%s %s: %s", req.Method, req.URL.RequestURI(), problem))
				}
				mu.Unlock()
			}
		})
	}
	for i := range *mutations {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	t.Logf("statuses: %v", statuses)
	for _, f := range failures {
		t.Error(f)
	}
}

// send does req and returns its status and what is wrong with the answer
// ("" when nothing is). Event streams are closed once their headers came.
func send(req *http.Request) (int, string) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "transport error: " + err.Error()
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		return resp.StatusCode, ""
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.StatusCode, "reading the body: " + err.Error()
	}
	if resp.StatusCode >= 500 {
		return resp.StatusCode, fmt.Sprintf("status %d: %s", resp.StatusCode, body)
	}
	if resp.StatusCode < 400 {
		return resp.StatusCode, ""
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		return resp.StatusCode, fmt.Sprintf("status %d with Content-Type %q: %s", resp.StatusCode, ct, body)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return resp.StatusCode, fmt.Sprintf("problem is not JSON: %s", body)
	}
	doc, _ := loadSpec()
	if err := doc.Components.Schemas["Problem"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return resp.StatusCode, fmt.Sprintf("problem breaks the spec: %v: %s", err, body)
	}
	return resp.StatusCode, ""
}

// junk are values that break fields in many ways.
var junk = []any{
	nil, "", " ", "x", strings.Repeat("y", 300), strings.Repeat("z", 70000), "\u0000", "☃\u202e", "../../etc/passwd", "%FF%FE",
	-1, 0, 1, 1.5, 1e308, -1e308, 9007199254740993, true, false, []any{}, []any{nil}, map[string]any{}, map[string]any{"type": nil},
	[]any{map[string]any{"type": "text", "text": 3}}, []any{map[string]any{"type": strings.Repeat("t", 65), "text": "x"}},
	[]any{map[string]any{"type": "image"}}, map[string]any{"kind": "coordinator"}, "cancel", "continue",
}

// junkPath are path segments (already escaped) that break ids.
var junkPath = []string{"x", "%FF%FE", "%00", "%2F..%2F", strings.Repeat("a", 129), strings.Repeat("b", 5000), "%E2%98%83", "..", "%20", "-", "a.b"}

// baseBodies are valid bodies by operationId, which mutations then break.
func baseBody(opID, root string) map[string]any {
	prompt := []any{map[string]any{"type": "text", "text": "m"}}
	switch opID {
	case "createSession":
		return map[string]any{"label": "m"}
	case "promptSession", "steerRun":
		return map[string]any{"content": prompt}
	case "createRun":
		return map[string]any{"provider": "spawn", "parentSessionId": root, "prompt": prompt}
	case "createSubagent":
		return map[string]any{"provider": "spawn", "parentSessionId": root, "label": "m", "prompt": prompt}
	case "followupSubagent":
		return map[string]any{"parentSessionId": root, "content": prompt}
	case "interruptSubagent":
		return map[string]any{"parentSessionId": root}
	case "signIn":
		return map[string]any{"token": "m"}
	}
	return nil
}

// mutate builds one request to the operation with some of its parts
// broken.
func mutate(ctx context.Context, rng *rand.Rand, base, method, path string, op *openapi3.Operation, fixtures map[string]string, root string) *http.Request {
	pick := func(n int) bool { return rng.IntN(n) == 0 }
	p := path
	for name, v := range fixtures {
		seg := url.PathEscape(v)
		if pick(2) {
			seg = junkPath[rng.IntN(len(junkPath))]
		}
		p = strings.ReplaceAll(p, "{"+name+"}", seg)
	}
	q := url.Values{}
	for _, pr := range op.Parameters {
		if pr.Value.In == "query" && pick(2) {
			q.Set(pr.Value.Name, fmt.Sprint(junk[rng.IntN(len(junk))]))
		}
	}
	var body []byte
	if b := baseBody(op.OperationID, root); b != nil || method == http.MethodPost {
		var v any = b
		for range 1 + rng.IntN(3) {
			v = mutateValue(rng, v)
		}
		body, _ = json.Marshal(v)
		if pick(6) && len(body) > 1 {
			body = body[:rng.IntN(len(body))]
		}
		if pick(10) {
			body = []byte{0xff, 0xfe, '{'}
		}
	}
	req, _ := http.NewRequestWithContext(ctx, method, base+p+"?"+q.Encode(), bytes.NewReader(body))
	if req == nil {
		req, _ = http.NewRequestWithContext(ctx, method, base+"/v1/"+url.PathEscape(p), bytes.NewReader(body))
	}
	ct := "application/json"
	if pick(5) {
		ct = []string{"", "text/plain", "application/x-www-form-urlencoded", "application/problem+json", "application/json; charset=latin1", "bogus/"}[rng.IntN(6)]
	}
	if ct != "" && body != nil {
		req.Header.Set("Content-Type", ct)
	}
	for _, h := range []struct{ name, value string }{
		{"Idempotency-Key", fmt.Sprintf("k%d", rng.IntN(50))}, {"Idempotency-Key", strings.Repeat("k", 256)},
		{"Last-Event-ID", headerSafe(fmt.Sprint(junk[rng.IntN(len(junk))]))}, {"Prefer", "wait=" + fmt.Sprint(rng.IntN(2))},
		{"Authorization", "Bearer nonsense"}, {"Origin", "https://evil.example"}, {"Cookie", sessionCookie + "=x"},
	} {
		if pick(8) {
			req.Header.Set(h.name, h.value)
		}
	}
	return req
}

// headerSafe drops the bytes no HTTP client sends in a header value.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// mutateValue breaks v once: a field dropped, added, retyped or nested
// deeper, or v replaced.
func mutateValue(rng *rand.Rand, v any) any {
	obj, ok := v.(map[string]any)
	if !ok || rng.IntN(8) == 0 {
		return junk[rng.IntN(len(junk))]
	}
	out := map[string]any{}
	for k, x := range obj {
		out[k] = x
	}
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	switch rng.IntN(4) {
	case 0:
		if len(keys) > 0 {
			delete(out, keys[rng.IntN(len(keys))])
		}
	case 1:
		out[[]string{"bogus", "agentOptions", "toolFilter", "outputSchema", "maxDepth", "persona", "childId", "source", "onDisconnect", "cwd"}[rng.IntN(10)]] = junk[rng.IntN(len(junk))]
	case 2:
		if len(keys) > 0 {
			out[keys[rng.IntN(len(keys))]] = junk[rng.IntN(len(junk))]
		}
	default:
		if len(keys) > 0 {
			k := keys[rng.IntN(len(keys))]
			out[k] = mutateValue(rng, out[k])
		}
	}
	return out
}
