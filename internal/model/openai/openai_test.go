package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/openai"
)

const (
	apiKey = "sk-test-0123456789abcdef"
	// secretPrompt is sent in every request; no error may repeat it.
	secretPrompt = "the user prompt that must never leak"
	// waitBound only bounds a wait that should end at once, so that a
	// regression fails instead of hanging; it never orders events.
	waitBound = 5 * time.Second
)

// fake is an OpenAI-compatible server: it records each request and hands it
// to the test's handler.
type fake struct {
	url      string
	requests atomic.Int32
	bodies   chan []byte
	headers  chan http.Header
}

func newFake(t *testing.T, handle http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{bodies: make(chan []byte, 8), headers: make(chan http.Header, 8)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		body, err := io.ReadAll(r.Body)
		if err != nil || r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		f.bodies <- body
		f.headers <- r.Header.Clone()
		handle(w, r)
	}))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func newModel(t *testing.T, f *fake) *openai.Model {
	t.Helper()
	m, err := openai.New(openai.Config{BaseURL: f.url + "/v1", APIKey: apiKey, DefaultModel: "m-default"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// sse answers with the given SSE text, flushing after each piece so that
// every piece reaches the client as its own write.
func sse(pieces ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, p := range pieces {
			io.WriteString(w, p)
			w.(http.Flusher).Flush()
		}
	}
}

// chunk is one byte-exact SSE event carrying a chat.completion.chunk with
// choice 0 holding delta and finish (a JSON value: null or a string).
func chunk(delta, finish string) string {
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m1","choices":[{"index":0,"delta":` +
		delta + `,"logprobs":null,"finish_reason":` + finish + `}]}` + "\n\n"
}

const done = "data: [DONE]\n\n"

func request() model.Request {
	return model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: []model.Block{model.TextBlock(secretPrompt)}}}}
}

// collect runs one step and returns its chunks and the error that ended it.
func collect(t *testing.T, ctx context.Context, m model.Model, req model.Request) ([]model.Chunk, error) {
	t.Helper()
	var out []model.Chunk
	for c, err := range m.Stream(ctx, req) {
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
	return out, nil
}

func text(s string) model.Chunk      { return model.Chunk{Kind: model.ChunkText, Text: s} }
func reasoning(s string) model.Chunk { return model.Chunk{Kind: model.ChunkReasoning, Text: s} }
func finish(r model.FinishReason) model.Chunk {
	return model.Chunk{Kind: model.ChunkFinish, FinishReason: r}
}
func call(id, name, args string) model.Chunk {
	return model.Chunk{Kind: model.ChunkToolCall, ToolCall: &model.ToolCall{ID: id, Name: name, Arguments: args}}
}
func usage(in, out int) model.Chunk {
	return model.Chunk{Kind: model.ChunkUsage, Usage: &model.Usage{InputTokens: in, OutputTokens: out}}
}

func assertChunks(t *testing.T, got, want []model.Chunk) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("chunks:\n got %s\nwant %s", dump(got), dump(want))
	}
}

func dump(cs []model.Chunk) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "\n  %s %q", c.Kind, c.Text)
		if c.ToolCall != nil {
			fmt.Fprintf(&b, " call=%+v", *c.ToolCall)
		}
		if c.Usage != nil {
			fmt.Fprintf(&b, " usage=%+v", *c.Usage)
		}
		if c.FinishReason != "" {
			fmt.Fprintf(&b, " finish=%s", c.FinishReason)
		}
	}
	return b.String()
}

func TestStream_TextInSeveralChunks(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(
		chunk(`{"role":"assistant","content":""}`, "null"),
		chunk(`{"content":"Hel"}`, "null"),
		chunk(`{"content":"lo, "}`, "null"),
		chunk(`{"content":"world"}`, "null"),
		chunk(`{}`, `"stop"`),
		done,
	))
	got, err := collect(t, t.Context(), newModel(t, f), request())
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	assertChunks(t, got, []model.Chunk{text("Hel"), text("lo, "), text("world"), finish(model.FinishStop)})
	if h := <-f.headers; h.Get("Authorization") != "Bearer "+apiKey {
		t.Errorf("Authorization = %q, want the bearer key", h.Get("Authorization"))
	}
}

func TestStream_ToolCallsAssembledAcrossChunks(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(
		chunk(`{"role":"assistant","content":"Looking."}`, "null"),
		chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":""}}]}`, "null"),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]}`, "null"),
		chunk(`{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"grep","arguments":"{\"pattern\":\"fo"}}]}`, "null"),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"a b.txt\"}"}}]}`, "null"),
		chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"o\\\"bar\"}"}}]}`, "null"),
		chunk(`{}`, `"tool_calls"`),
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m1","choices":[],"usage":{"prompt_tokens":31,"completion_tokens":12,"total_tokens":43}}`+"\n\n",
		done,
	))
	got, err := collect(t, t.Context(), newModel(t, f), request())
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	assertChunks(t, got, []model.Chunk{
		text("Looking."),
		call("call_a", "read", `{"path":"a b.txt"}`),
		call("call_b", "grep", `{"pattern":"foo\"bar"}`),
		usage(31, 12),
		finish(model.FinishToolCalls),
	})
}

// A server that reuses index 0 for parallel calls (or leaves the index
// out) still yields each call whole: a new id starts a new call.
func TestStream_ParallelCallsSharingAnIndex(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(
		chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":"{\"x\":1}"}}]}`, "null"),
		chunk(`{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"grep","arguments":"{\"y\":"}}]}`, "null"),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"2}"}}]}`, "null"),
		chunk(`{}`, `"tool_calls"`),
		done,
	))
	got, err := collect(t, t.Context(), newModel(t, f), request())
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	assertChunks(t, got, []model.Chunk{
		call("call_a", "read", `{"x":1}`),
		call("call_b", "grep", `{"y":2}`),
		finish(model.FinishToolCalls),
	})
}

// Some servers send no tool-call id, empty arguments for a call without
// parameters, and finish_reason "stop" after tool calls.
func TestStream_ToolCallLeniency(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(
		chunk(`{"tool_calls":[{"index":0,"function":{"name":"list","arguments":""}}]}`, "null"),
		chunk(`{}`, `"stop"`),
		done,
	))
	got, err := collect(t, t.Context(), newModel(t, f), request())
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if len(got) != 2 || got[0].Kind != model.ChunkToolCall {
		t.Fatalf("chunks: %s", dump(got))
	}
	tc := got[0].ToolCall
	if !strings.HasPrefix(tc.ID, "call_") || len(tc.ID) < len("call_")+8 || tc.Name != "list" || tc.Arguments != "{}" {
		t.Errorf("tool call = %+v, want a generated call_ id, name list, arguments {}", *tc)
	}
	assertChunks(t, got[1:], []model.Chunk{finish(model.FinishToolCalls)})
}

func TestStream_ReasoningDeltas(t *testing.T) {
	t.Parallel()
	for _, field := range []string{"reasoning_content", "reasoning"} {
		t.Run(field, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, sse(
				chunk(`{"role":"assistant","content":null,"`+field+`":"Let me "}`, "null"),
				chunk(`{"content":null,"`+field+`":"think."}`, "null"),
				chunk(`{"content":"Answer.","`+field+`":null}`, "null"),
				chunk(`{}`, `"stop"`),
				done,
			))
			got, err := collect(t, t.Context(), newModel(t, f), request())
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			assertChunks(t, got, []model.Chunk{reasoning("Let me "), reasoning("think."), text("Answer."), finish(model.FinishStop)})
		})
	}
}

func TestStream_UsageChunk(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(
		chunk(`{"content":"Hi"}`, "null"),
		chunk(`{}`, `"stop"`),
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":0}}}`+"\n\n",
		done,
	))
	got, err := collect(t, t.Context(), newModel(t, f), request())
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	assertChunks(t, got, []model.Chunk{text("Hi"), usage(9, 1), finish(model.FinishStop)})
}

func TestStream_FinishReasons(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		finish string
		want   model.FinishReason
	}{
		{`"stop"`, model.FinishStop},
		{`"length"`, model.FinishMaxTokens},
		{`"content_filter"`, model.FinishRefusal},
		{`"tool_calls"`, model.FinishToolCalls},
	} {
		t.Run(tc.finish, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, sse(chunk(`{"content":"partial"}`, "null"), chunk(`{}`, tc.finish), done))
			got, err := collect(t, t.Context(), newModel(t, f), request())
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			assertChunks(t, got, []model.Chunk{text("partial"), finish(tc.want)})
		})
	}
}

func TestStream_RefusalDelta(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(chunk(`{"content":null,"refusal":"I can't help with that."}`, "null"), chunk(`{}`, `"stop"`), done))
	got, err := collect(t, t.Context(), newModel(t, f), request())
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	assertChunks(t, got, []model.Chunk{text("I can't help with that."), finish(model.FinishRefusal)})
}

// Errors carry the status and the server's type/code/message, never the key
// or the request body, and a failed request is sent exactly once.
func TestStream_HTTPErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"401", 401,
			`{"error":{"message":"Incorrect API key provided: ` + apiKey + `. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			"model request failed: 401 invalid_api_key: Incorrect API key provided: [redacted]. You can find your API key at https://platform.openai.com/account/api-keys."},
		{"429", 429,
			`{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			"model request failed: 429 rate_limit_exceeded: Rate limit reached for requests"},
		{"500", 500,
			`{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`,
			"model request failed: 500 server_error: The server had an error while processing your request."},
		{"ollama string error", 404, `{"error":"model \"llama9\" not found, try pulling it first"}`,
			`model request failed: 404 Not Found: model "llama9" not found, try pulling it first`},
		{"vllm flat error", 400, `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}`,
			"model request failed: 400 BadRequestError: max_tokens is too large"},
		{"html from a proxy", 502, "<html><body>" + secretPrompt + "</body></html>",
			"model request failed: 502 Bad Gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			got, err := collect(t, t.Context(), newModel(t, f), request())
			if err == nil || len(got) != 0 {
				t.Fatalf("Stream = %s, %v; want only an error", dump(got), err)
			}
			if err.Error() != tc.want {
				t.Errorf("error = %q\n want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), apiKey) || strings.Contains(err.Error(), secretPrompt) {
				t.Errorf("error %q leaks the API key or the request", err)
			}
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status {
				t.Errorf("error %#v is not an *openai.Error with status %d", err, tc.status)
			}
			if n := f.requests.Load(); n != 1 {
				t.Errorf("server saw %d requests, want 1 (no retries by default)", n)
			}
		})
	}
}

func TestStream_MaxRetriesRetriesServerErrors(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After-Ms", "1")
		http.Error(w, `{"error":{"message":"busy","type":"server_error"}}`, http.StatusServiceUnavailable)
	})
	m, err := openai.New(openai.Config{BaseURL: f.url + "/v1", DefaultModel: "m", MaxRetries: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = collect(t, t.Context(), m, request())
	if err == nil || err.Error() != "model request failed: 503 server_error: busy" {
		t.Fatalf("error = %v", err)
	}
	if n := f.requests.Load(); n != 3 {
		t.Errorf("server saw %d requests, want 3", n)
	}
}

func TestStream_ErrorEventMidStream(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(
		chunk(`{"content":"Hi"}`, "null"),
		`data: {"error":{"message":"The model is overloaded.","type":"server_error","code":null}}`+"\n\n",
	))
	got, err := collect(t, t.Context(), newModel(t, f), request())
	assertChunks(t, got, []model.Chunk{text("Hi")})
	if err == nil || err.Error() != "model stream failed: server_error: The model is overloaded." {
		t.Fatalf("error = %v", err)
	}
}

func TestStream_MalformedChunk(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(chunk(`{"content":"Hi"}`, "null"), "data: {not json\n\n"))
	_, err := collect(t, t.Context(), newModel(t, f), request())
	if err == nil || !strings.HasPrefix(err.Error(), "model stream failed: malformed chunk: ") {
		t.Fatalf("error = %v", err)
	}
}

// A connection broken mid-stream, or closed cleanly before any finish
// reason, ends the step with ErrStreamEnded.
func TestStream_CutMidway(t *testing.T) {
	t.Parallel()
	t.Run("connection closed", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			sse(chunk(`{"content":"Hel"}`, "null"))(w, r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			conn.Close()
		})
		got, err := collect(t, t.Context(), newModel(t, f), request())
		assertChunks(t, got, []model.Chunk{text("Hel")})
		if !errors.Is(err, openai.ErrStreamEnded) || !strings.HasPrefix(err.Error(), "model stream ended unexpectedly") {
			t.Fatalf("error = %v, want ErrStreamEnded", err)
		}
	})
	t.Run("clean end without finish", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, sse(chunk(`{"content":"Hel"}`, "null")))
		got, err := collect(t, t.Context(), newModel(t, f), request())
		assertChunks(t, got, []model.Chunk{text("Hel")})
		if err == nil || err.Error() != "model stream ended unexpectedly" {
			t.Fatalf("error = %v, want ErrStreamEnded", err)
		}
	})
}

// blockingFake streams one text chunk, then holds the response open until
// the client goes away, which it reports by closing the returned channel.
func blockingFake(t *testing.T) (*fake, <-chan struct{}) {
	gone := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		sse(chunk(`{"content":"Hel"}`, "null"))(w, r)
		<-r.Context().Done()
		close(gone)
	})
	return f, gone
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitBound):
		t.Fatalf("%s did not happen", what)
	}
}

func TestStream_CancelMidStream(t *testing.T) {
	t.Parallel()
	f, gone := blockingFake(t)
	m := newModel(t, f)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	type result struct {
		chunks []model.Chunk
		err    error
	}
	res := make(chan result, 1)
	go func() {
		var r result
		for c, err := range m.Stream(ctx, request()) {
			if err != nil {
				r.err = err
				break
			}
			r.chunks = append(r.chunks, c)
			cancel() // the server is now blocked until the client leaves
		}
		res <- r
	}()
	select {
	case r := <-res:
		assertChunks(t, r.chunks, []model.Chunk{text("Hel")})
		if r.err != context.Canceled {
			t.Errorf("error = %v, want context.Canceled itself", r.err)
		}
	case <-time.After(waitBound):
		t.Fatal("Stream did not return after cancellation")
	}
	waitClosed(t, gone, "server seeing the disconnect")
}

func TestStream_ConsumerStopsEarly(t *testing.T) {
	t.Parallel()
	f, gone := blockingFake(t)
	for c, err := range newModel(t, f).Stream(t.Context(), request()) {
		if err != nil || c.Kind != model.ChunkText {
			t.Fatalf("first yield = %s, %v", dump([]model.Chunk{c}), err)
		}
		break
	}
	waitClosed(t, gone, "server seeing the disconnect")
}

func TestStream_CancelledBeforeRequest(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(done))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := collect(t, ctx, newModel(t, f), request())
	if err != context.Canceled {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
}

func TestStream_Timeout(t *testing.T) {
	t.Parallel()
	f, gone := blockingFake(t)
	// The first chunk must arrive within the timeout: generous for a
	// loaded machine, while the test still waits it out.
	m, err := openai.New(openai.Config{BaseURL: f.url + "/v1", DefaultModel: "m", Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got, err := collect(t, t.Context(), m, request())
	assertChunks(t, got, []model.Chunk{text("Hel")})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "model request timed out after 3s") {
		t.Fatalf("error = %v", err)
	}
	waitClosed(t, gone, "server seeing the disconnect")
}

func TestStream_TransportErrorHidesURL(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(done))
	m, err := openai.New(openai.Config{
		BaseURL: f.url + "/v1?token=" + apiKey, DefaultModel: "m",
		HTTPClient: &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
			return nil, errors.New("dial refused")
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = collect(t, t.Context(), m, request())
	if err == nil || err.Error() != "model request failed: dial refused" {
		t.Fatalf("error = %v", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func assertJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("request body:\n got %s\nwant %s", got, want)
	}
}

func TestStream_RequestBody(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(chunk(`{}`, `"stop"`), done))
	req := model.Request{
		Model:  "gpt-test",
		System: "You are terse.",
		Messages: []model.Message{
			{Role: model.RoleUser, Content: []model.Block{model.TextBlock("Read "), model.TextBlock("a.txt"), {Type: "image", Raw: json.RawMessage(`{"type":"image"}`)}}},
			{Role: model.RoleAssistant, Content: []model.Block{model.TextBlock("Reading.")}, ToolCalls: []model.ToolCall{
				{ID: "call_1", Name: "read", Arguments: `{"path":"a.txt"}`},
				{ID: "call_2", Name: "list"},
			}},
			{Role: model.RoleTool, ToolCallID: "call_1", Content: []model.Block{model.TextBlock("contents")}},
			{Role: model.RoleTool, ToolCallID: "call_2", IsError: true, Content: []model.Block{model.TextBlock("error: denied")}},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "call_3", Name: "list", Arguments: "{}"}}},
			{Role: model.RoleTool, ToolCallID: "call_3", Content: []model.Block{model.TextBlock("[]")}},
			{Role: model.RoleAssistant},
		},
		Tools: []model.ToolSpec{
			{Name: "read", Description: "Read a file.", Parameters: json.RawMessage(
				`{"type":"object","properties":{"path":{"type":"string","maxLength":4096}},"required":["path"],"additionalProperties":false}`)},
			{Name: "list", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
		},
		MaxTokens: 1024,
	}
	if _, err := collect(t, t.Context(), newModel(t, f), req); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	assertJSON(t, <-f.bodies, `{
		"model": "gpt-test",
		"stream": true,
		"stream_options": {"include_usage": true},
		"max_tokens": 1024,
		"messages": [
			{"role": "system", "content": "You are terse."},
			{"role": "user", "content": "Read a.txt"},
			{"role": "assistant", "content": "Reading.", "tool_calls": [
				{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}},
				{"id": "call_2", "type": "function", "function": {"name": "list", "arguments": "{}"}}
			]},
			{"role": "tool", "tool_call_id": "call_1", "content": "contents"},
			{"role": "tool", "tool_call_id": "call_2", "content": "error: denied"},
			{"role": "assistant", "tool_calls": [
				{"id": "call_3", "type": "function", "function": {"name": "list", "arguments": "{}"}}
			]},
			{"role": "tool", "tool_call_id": "call_3", "content": "[]"},
			{"role": "assistant", "content": ""}
		],
		"tools": [
			{"type": "function", "function": {"name": "read", "description": "Read a file.", "parameters":
				{"type":"object","properties":{"path":{"type":"string","maxLength":4096}},"required":["path"],"additionalProperties":false}}},
			{"type": "function", "function": {"name": "list", "parameters": {"type":"object","properties":{}}}}
		]
	}`)
}

// With no model in the request the route's default is sent; without tools
// and max tokens neither field is sent.
func TestStream_RequestBodyDefaults(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(chunk(`{}`, `"stop"`), done))
	if _, err := collect(t, t.Context(), newModel(t, f), request()); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	assertJSON(t, <-f.bodies, `{
		"model": "m-default",
		"stream": true,
		"stream_options": {"include_usage": true},
		"messages": [{"role": "user", "content": "`+secretPrompt+`"}]
	}`)
}

// api.openai.com gets max_completion_tokens, which its newer models require.
func TestStream_OpenAIMaxCompletionTokens(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(chunk(`{}`, `"stop"`), done))
	target, _ := url.Parse(f.url)
	toFake := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host != "api.openai.com" {
			return nil, fmt.Errorf("request to %s", r.URL.Host)
		}
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host = target.Scheme, target.Host
		return http.DefaultTransport.RoundTrip(r)
	})
	m, err := openai.New(openai.Config{APIKey: apiKey, DefaultModel: "gpt-5", HTTPClient: &http.Client{Transport: toFake}})
	if err != nil {
		t.Fatal(err)
	}
	req := request()
	req.MaxTokens = 77
	if _, err := collect(t, t.Context(), m, req); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	assertJSON(t, <-f.bodies, `{
		"model": "gpt-5",
		"stream": true,
		"stream_options": {"include_usage": true},
		"max_completion_tokens": 77,
		"messages": [{"role": "user", "content": "`+secretPrompt+`"}]
	}`)
}

// OPENAI_* variables must not change a configured route: the SDK client would
// otherwise pick up the base URL, organization, project and headers.
func TestNew_IgnoresEnvironment(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-env")
	t.Setenv("OPENAI_PROJECT_ID", "proj-env")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Env: yes")
	f := newFake(t, sse(chunk(`{}`, `"stop"`), done))
	m, err := openai.New(openai.Config{BaseURL: f.url + "/v1", DefaultModel: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collect(t, t.Context(), m, request()); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	h := <-f.headers
	for _, k := range []string{"Authorization", "OpenAI-Organization", "OpenAI-Project", "X-Env"} {
		if v := h.Get(k); v != "" {
			t.Errorf("header %s = %q, want none", k, v)
		}
	}
}

func TestNew_Validation(t *testing.T) {
	t.Parallel()
	for _, cfg := range []openai.Config{
		{BaseURL: "127.0.0.1:8000/v1"},
		{BaseURL: "ftp://host/v1"},
		{BaseURL: "http://host/v1", MaxRetries: -1},
		{BaseURL: "http://host/v1", Timeout: -time.Second},
	} {
		if _, err := openai.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", cfg)
		}
	}
}

func TestStream_InvalidRequest(t *testing.T) {
	t.Parallel()
	f := newFake(t, sse(done))
	m, err := openai.New(openai.Config{BaseURL: f.url + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]model.Request{
		"no model":     request(),
		"bad role":     {Model: "m", Messages: []model.Message{{Role: "system"}}},
		"tool no id":   {Model: "m", Messages: []model.Message{{Role: model.RoleTool}}},
		"schema array": {Model: "m", Tools: []model.ToolSpec{{Name: "t", Parameters: json.RawMessage(`[]`)}}},
	} {
		if _, err := collect(t, t.Context(), m, req); err == nil {
			t.Errorf("%s: Stream succeeded, want an error", name)
		}
	}
	if n := f.requests.Load(); n != 0 {
		t.Errorf("server saw %d requests for invalid requests", n)
	}
}
