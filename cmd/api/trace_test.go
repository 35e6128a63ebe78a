package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
)

// collector is an OTLP/HTTP trace receiver on a loopback listener: it
// decodes every export and keeps the spans with their service name.
type collector struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []span
	more  chan struct{} // closed and replaced on every export
}

// span is one received span, its ids hex as in a traceparent.
type span struct {
	service, name, traceID, spanID, parentID string
	kind                                     tracepb.Span_SpanKind
	attrs                                    map[string]*commonpb.AnyValue
}

func (s span) str(key string) string { return s.attrs[key].GetStringValue() }
func (s span) num(key string) int64  { return s.attrs[key].GetIntValue() }

func newCollector(t *testing.T) *collector {
	c := &collector{more: make(chan struct{})}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if r.URL.Path != "/v1/traces" || err != nil {
			t.Errorf("collector: %s %s: %v", r.Method, r.URL.Path, err)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					attrs := map[string]*commonpb.AnyValue{}
					for _, kv := range sp.GetAttributes() {
						attrs[kv.GetKey()] = kv.GetValue()
					}
					c.spans = append(c.spans, span{service: service, name: sp.GetName(), kind: sp.GetKind(), attrs: attrs,
						traceID: hex.EncodeToString(sp.GetTraceId()), spanID: hex.EncodeToString(sp.GetSpanId()),
						parentID: hex.EncodeToString(sp.GetParentSpanId())})
				}
			}
		}
		close(c.more)
		c.more = make(chan struct{})
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// wait returns the first span pred accepts, waiting for exports.
func (c *collector) wait(t *testing.T, what string, pred func(span) bool) span {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		c.mu.Lock()
		for _, s := range c.spans {
			if pred(s) {
				c.mu.Unlock()
				return s
			}
		}
		more := c.more
		c.mu.Unlock()
		select {
		case <-more:
		case <-timeout:
			t.Fatalf("no span %s was exported", what)
		}
	}
}

// delegatingModel is an OpenAI-compatible server scripted by the last
// message: ROOT asks for a background delegation with the subagent tool;
// a tool result is answered "delegated"; CHILD streams "working" and holds
// until the client goes away — until release is called, after which it
// and everything else is answered "done". Every answer reports usage.
func delegatingModel(t *testing.T) (srv *httptest.Server, release func()) {
	var released atomic.Bool
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role    string
				Content json.RawMessage
			}
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		var last struct {
			Role    string
			Content json.RawMessage
		}
		if n := len(req.Messages); n > 0 {
			last = req.Messages[n-1]
		}
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(delta, finish string) {
			fmt.Fprint(w, `data: {"id":"1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`+delta+`,"finish_reason":`+finish+`}]}`+"\n\n")
			w.(http.Flusher).Flush()
		}
		end := func(finish string) {
			chunk(`{}`, finish)
			fmt.Fprint(w, `data: {"id":"1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`+"\n\n")
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
		text := string(last.Content)
		switch {
		case last.Role == "tool":
			chunk(`{"role":"assistant","content":"delegated"}`, "null")
			end(`"stop"`)
		case strings.Contains(text, "ROOT"):
			args, _ := json.Marshal(`{"description":"worker","prompt":"CHILD first","run_in_background":true}`)
			chunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"subagent","arguments":`+string(args)+`}}]}`, "null")
			end(`"tool_calls"`)
		case strings.Contains(text, "CHILD") && !released.Load():
			chunk(`{"role":"assistant","content":"working"}`, "null")
			<-r.Context().Done()
		default:
			chunk(`{"role":"assistant","content":"done"}`, "null")
			end(`"stop"`)
		}
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return srv, func() { released.Store(true) }
}

// TestTraces_DelegationTreeIsOneTraceAcrossARestart: with
// OTEL_EXPORTER_OTLP_ENDPOINT set, a root's turn that delegates to a
// continuable child exports, over OTLP/HTTP, the root's invoke_agent span
// with its chat and execute_tool spans, and the HTTP request spans named
// by route. The child is stalled, handed a followup and the process
// SIGKILLed; the restarted process resumes the child, and its activation's
// invoke_agent span, with its chat span, continues the same trace as the
// child of the tool call that started the child (the run row's
// traceparent).
func TestTraces_DelegationTreeIsOneTraceAcrossARestart(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	mdl, release := delegatingModel(t)
	cfg := filepath.Join(t.TempDir(), "subagentd.yaml")
	yaml := fmt.Sprintf("models:\n  - name: m\n    baseURL: %s\n    model: m\ndefaultModel: m\n", mdl.URL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"DATABASE_URL": pgtest.URL(t), "SUBAGENTD_CONFIG": cfg, "SUBAGENTD_REPLICA_ID": "replica-" + t.Name(),
		"OTEL_EXPORTER_OTLP_ENDPOINT": col.srv.URL, "OTEL_BSP_SCHEDULE_DELAY": "50",
	}
	a := startServer(t, env)
	var root struct{ ID string }
	a.call(t, http.MethodPost, "/v1/sessions", `{"label":"traced"}`, http.StatusCreated, &root)
	a.call(t, http.MethodPost, "/v1/sessions/"+root.ID+"/messages", `{"content":[{"type":"text","text":"ROOT"}]}`, http.StatusAccepted, nil)

	// The root's turn: invoke_agent root, its chat spans and the tool call.
	rootSpan := col.wait(t, "invoke_agent root", func(s span) bool {
		return s.name == "invoke_agent root" && s.str("gen_ai.conversation.id") == root.ID
	})
	if rootSpan.service != "subagentd" || rootSpan.kind != tracepb.Span_SPAN_KIND_INTERNAL ||
		rootSpan.str("gen_ai.operation.name") != "invoke_agent" || rootSpan.str("gen_ai.agent.name") != "root" {
		t.Errorf("root span %+v", rootSpan)
	}
	tool := col.wait(t, "execute_tool subagent", func(s span) bool {
		return s.name == "execute_tool subagent" && s.traceID == rootSpan.traceID
	})
	if tool.parentID != rootSpan.spanID || tool.str("gen_ai.operation.name") != "execute_tool" || tool.str("gen_ai.tool.name") != "subagent" {
		t.Errorf("tool span %+v, want a child of the root span %s", tool, rootSpan.spanID)
	}
	chat := col.wait(t, "chat m of the root", func(s span) bool { return s.name == "chat m" && s.parentID == rootSpan.spanID })
	if chat.kind != tracepb.Span_SPAN_KIND_CLIENT || chat.str("gen_ai.operation.name") != "chat" ||
		chat.str("gen_ai.provider.name") != "openai" || chat.str("gen_ai.request.model") != "m" ||
		chat.num("gen_ai.usage.input_tokens") != 7 || chat.num("gen_ai.usage.output_tokens") != 3 {
		t.Errorf("root chat span %+v", chat)
	}
	col.wait(t, "POST /v1/sessions/{id}/messages", func(s span) bool {
		return s.name == "POST /v1/sessions/{id}/messages" && s.kind == tracepb.Span_SPAN_KIND_SERVER &&
			s.str("http.route") == "/v1/sessions/{id}/messages"
	})

	// The child stalls in its first turn; a followup is accepted into it
	// but never admitted, and the process dies.
	var childID string
	a.waitStream(t, "/v1/events?after=0&types=subagent/start", func(_, data string) bool {
		var e struct{ ID, ParentSessionID string }
		if json.Unmarshal([]byte(data), &e) != nil || e.ParentSessionID != root.ID {
			return false
		}
		childID = e.ID
		return true
	})
	a.waitChildEvent(t, childID, func(typ, data string) bool { return typ == "assistant/chunk" && strings.Contains(data, "working") })
	go func() {
		body := fmt.Sprintf(`{"parentSessionId":%q,"content":[{"type":"text","text":"CHILD second"}]}`, root.ID)
		resp, err := http.Post(a.base+"/v1/subagents/"+childID+"/followup", "application/json", strings.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
	}()
	a.waitChildEvent(t, childID, func(typ, data string) bool {
		return typ == "agent/inbox/spliced" && strings.Contains(data, "CHILD second")
	})
	if err := a.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("SIGKILL: process exited cleanly")
	}

	// The restarted process resumes the child under the same trace.
	release()
	b := startServer(t, env)
	b.waitStream(t, "/v1/events?after=0&types=subagent/end", func(_, data string) bool {
		return strings.Contains(data, `"id":"`+childID+`"`) && strings.Contains(data, "done")
	})
	if err := b.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	child := col.wait(t, "invoke_agent spawn of the resumed child", func(s span) bool {
		return s.name == "invoke_agent spawn" && s.str("gen_ai.conversation.id") == childID
	})
	if child.traceID != rootSpan.traceID || child.parentID != tool.spanID {
		t.Fatalf("resumed child's span is in trace %s under %s, want trace %s under the tool call %s",
			child.traceID, child.parentID, rootSpan.traceID, tool.spanID)
	}
	if child.kind != tracepb.Span_SPAN_KIND_INTERNAL || child.str("gen_ai.operation.name") != "invoke_agent" ||
		child.str("gen_ai.agent.name") != "spawn" || child.str("gen_ai.provider.name") != "openai" ||
		child.str("subagentd.run_id") == "" || child.num("gen_ai.usage.input_tokens") < 7 || child.num("gen_ai.usage.output_tokens") < 3 {
		t.Errorf("child span %+v", child)
	}
	col.wait(t, "chat m of the resumed child", func(s span) bool { return s.name == "chat m" && s.parentID == child.spanID })
}
