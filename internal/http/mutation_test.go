package http

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/subagentd/subagentd/internal/store"
)

var (
	// The suite sends 2,000 per store to keep CI's time; -mutations 5000
	// is the 10,000-request run over both stores.
	mutations = flag.Int("mutations", 2000, "requests TestMutatedRequests sends to each store")
	seedFlag  = flag.Uint64("seed", 0, "seed of TestMutatedRequests (0: a fresh one, printed)")
)

// Bounds of TestMutatedRequests: how many clients send at once, and how
// long one answer may take (a request's own waits, Prefer: wait=1 and
// ?wait=1, included).
const (
	mutationClients = 8
	maxAnswerTime   = 5 * time.Second
)

// TestMutatedRequests sends mutated requests to every operation of the
// spec, from mutationClients concurrent clients, on each store — path
// ids, query parameters, headers and bodies replaced by junk (raw bytes
// that are no UTF-8 too, not only percent-encoded ones), fields dropped,
// added, retyped, bodies truncated — and holds every answer to: no 5xx,
// within maxAnswerTime, and every error is a problem+json the spec's
// Problem schema accepts. Request i is built from the seed and i alone, so
// the seed printed replays the same requests:
//
//	go test ./internal/http -run TestMutatedRequests -seed N -mutations M
func TestMutatedRequests(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	replay := fmt.Sprintf("go test ./internal/http -run 'TestMutatedRequests' -seed %d -mutations %d", seed, *mutations)
	t.Logf("seed %d; replay with: %s", seed, replay)
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			mutateStore(t, sc.open(t), seed, replay)
		})
	}
}

// mutateStore runs TestMutatedRequests against a server over st.
func mutateStore(t *testing.T, st store.Store, seed uint64, replay string) {
	doc, _ := spec(t)
	w := setupWorldWith(t, []func(*Config){func(c *Config) { c.RateLimit = -1; c.Store = st }}, scriptedRoute("s", replying(nil)))
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

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: mutationClients}}
	t.Cleanup(client.CloseIdleConnections)
	var (
		mu       sync.Mutex
		failures []string
		failed   int
		slowest  time.Duration
		statuses = map[int]int{}
	)
	jobs := make(chan int)
	var wg sync.WaitGroup
	began := time.Now()
	for range mutationClients {
		wg.Go(func() {
			for i := range jobs {
				rng := rand.New(rand.NewPCG(seed, uint64(i)))
				o := ops[i%len(ops)]
				req := mutate(t.Context(), rng, w.ts.URL, o.method, o.path, o.op, fixtures, root)
				sent := time.Now()
				status, problem := send(client, req)
				took := time.Since(sent)
				if problem == "" && took > maxAnswerTime {
					problem = fmt.Sprintf("answered %d after %v, more than %v", status, took.Round(time.Millisecond), maxAnswerTime)
				}
				mu.Lock()
				statuses[status]++
				slowest = max(slowest, took)
				if problem != "" {
					failed++
					if len(failures) < 20 {
						failures = append(failures, fmt.Sprintf("request %d: %s %q: %s", i, req.Method, req.URL.RequestURI(), problem))
					}
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
	t.Logf("%d requests over %d operations in %v (slowest answer %v); statuses: %v",
		*mutations, len(ops), time.Since(began).Round(time.Millisecond), slowest.Round(time.Millisecond), statuses)
	for _, f := range failures {
		t.Error(f)
	}
	if failed > 0 {
		t.Errorf("%d of %d requests failed; replay with: %s", failed, *mutations, replay)
	}
}

// send does req and returns its status and what is wrong with the answer
// ("" when nothing is). Event streams are closed once their headers came.
func send(client *http.Client, req *http.Request) (int, string) {
	resp, err := client.Do(req)
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
var junkPath = []string{"x", "%FF%FE", "%00", "%2F..%2F", strings.Repeat("a", 129), strings.Repeat("b", 5000), "%E2%98%83", "..", "%20", "-", "a.b", "%C3%28", "%ED%A0%80", "%C0%AF"}

// junkBytes are byte strings that are no UTF-8 (a lone continuation
// byte, a truncated sequence, an encoded surrogate, an overlong '/', a
// code point past U+10FFFF), sent raw: in the request line, in header
// values and inside JSON strings.
var junkBytes = []string{"\xff\xfe", "a\xc3\x28", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "\x80"}

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
	rawBytes := func() string { return junkBytes[rng.IntN(len(junkBytes))] }
	p := path
	for _, name := range slices.Sorted(maps.Keys(fixtures)) {
		seg := url.PathEscape(fixtures[name])
		switch rng.IntN(6) {
		case 0, 1, 2:
		case 3:
			seg = rawBytes()
		default:
			seg = junkPath[rng.IntN(len(junkPath))]
		}
		p = strings.ReplaceAll(p, "{"+name+"}", seg)
	}
	q := url.Values{}
	var rawQuery []string
	for _, pr := range op.Parameters {
		if pr.Value.In != "query" || !pick(2) {
			continue
		}
		switch rng.IntN(4) {
		case 0:
			rawQuery = append(rawQuery, pr.Value.Name+"="+rawBytes()) // not escaped
		case 1:
			q.Set(pr.Value.Name, rawBytes()) // percent-encoded
		default:
			q.Set(pr.Value.Name, fmt.Sprint(junk[rng.IntN(len(junk))]))
		}
	}
	query := strings.Join(append(rawQuery, q.Encode()), "&")
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
		if i := bytes.IndexByte(body, '"'); i >= 0 && pick(4) {
			// Raw bytes inside the first string (a key or a value).
			body = slices.Concat(body[:i+1], []byte(rawBytes()), body[i+1:])
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, base+"/", bytes.NewReader(body))
	if err != nil {
		panic(err) // base is the test server's URL
	}
	// Opaque is sent as it is: raw bytes reach the server unescaped.
	req.URL.Opaque, req.URL.RawQuery = p, query
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
		{"Idempotency-Key", rawBytes()}, {"Last-Event-ID", rawBytes()}, {"Prefer", "wait=" + rawBytes()},
		{"Authorization", "Bearer " + rawBytes()}, {"Origin", "http://" + rawBytes()}, {"X-Junk", rawBytes()},
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
