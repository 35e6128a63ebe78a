// Command fakeagent is a scripted ACP agent for the provider's tests. It
// speaks raw newline-delimited JSON-RPC 2.0 on stdio (no SDK, so the tests do
// not check the SDK against itself) and behaves according to its environment:
//
//	FAKE_MODE      what session/prompt does (see prompt); "hanginit" never
//	               answers initialize, "exitinit" exits on it, "nosession"
//	               answers session/new without a session id, "newerror" with
//	               a JSON-RPC error; "sleeper" is the grandchild that only waits
//	FAKE_READY     a FIFO the agent writes its pid to once it is in the state
//	               the test waits for (initialize received, for hanginit)
//	FAKE_TEARDOWN  what stdin EOF and SIGTERM do: "" exits on EOF; "eof"
//	               writes FAKE_MARKS/eof and exits; "ignoreeof" ignores EOF and
//	               on SIGTERM writes FAKE_MARKS/term and exits; "trapterm"
//	               ignores EOF and SIGTERM (writing FAKE_MARKS/term)
//	FAKE_MARKS     where marks go; session/cancel leaves FAKE_MARKS/cancel
//	FAKE_NO_ALLOW  with FAKE_MODE=permission, offer only a reject option
//	FAKE_ALWAYS    with FAKE_MODE=permission, offer an allow_always option too
//	FAKE_CAPS      session persistence advertised in initialize: "load"
//	               (loadSession), "resume" (sessionCapabilities.resume and
//	               loadSession), either with ",close" (sessionCapabilities.close,
//	               session/close leaves FAKE_MARKS/close)
//	FAKE_STATE     the directory where sessions persist, one file per
//	               session holding its prompts, one per line
//	FAKE_MODEL_URL with FAKE_MODE=model, the model API the prompt calls with
//	               the x-api-key FAKE_API_KEY; a failure is answered like
//	               codex does, "Internal error" with the reason in data
//
// FAKE_MODE=meta answers with the _meta of the session/prompt request.
//
// FAKE_MODE=fs runs the prompt's ";"-separated commands against the
// client's file system, saying each outcome on a line (agent.fs).
//
// FAKE_MODE=hang says "working", signals FAKE_READY when it is set, and
// ends the turn (cancelled) only on session/cancel.
//
// FAKE_MODE=orphan starts a sleeper child when FAKE_GRANDCHILD is set,
// signals FAKE_READY and works forever.
//
// FAKE_MODE=remember answers every prompt with the session's earlier
// prompts ("remembered: a | b"), so tests see that a resumed session kept
// its context (prompts are single words); a prompt "crash" exits, "wait" blocks until
// session/cancel, and one starting "block" until the test opens the FIFO
// FAKE_RELEASE; both signal FAKE_READY first. A prompt "flood<n>" first
// streams n chunks of floodChunk.
//
// FAKE_MODE=flood streams as many chunks of floodChunk as the prompt's
// number says, then ends its turn.
//
// FAKE_INIT_RELEASE, when set, makes initialize wait until the test opens
// that FIFO, after signalling FAKE_READY.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

type message struct {
	JSONRPC string           `json:"jsonrpc"`
	ID      *json.RawMessage `json:"id,omitempty"`
	Method  string           `json:"method,omitempty"`
	Params  json.RawMessage  `json:"params,omitempty"`
	Result  any              `json:"result,omitempty"`
	Error   *rpcError        `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

type agent struct {
	mode string

	writeMu sync.Mutex

	mu         sync.Mutex
	sessionID  string
	sessionCwd string
	cancelled  chan struct{}
	cancelOnce sync.Once
	waiters    map[string]chan json.RawMessage // permission answers by request id
	initParams json.RawMessage                 // what initialize was sent
	calls      int                             // requests sent to the client, for their ids
}

func main() {
	a := &agent{mode: os.Getenv("FAKE_MODE"), cancelled: make(chan struct{}), waiters: map[string]chan json.RawMessage{}}
	if a.mode == "sleeper" {
		for {
			time.Sleep(time.Hour) // select{} alone would be a deadlock the runtime reports
		}
	}
	teardown := os.Getenv("FAKE_TEARDOWN")
	if teardown == "ignoreeof" || teardown == "trapterm" {
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			for range term {
				mark("term")
				if teardown == "ignoreeof" {
					os.Exit(0)
				}
			}
		}()
	}

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	for in.Scan() {
		var m struct {
			ID     *json.RawMessage `json:"id"`
			Method string           `json:"method"`
			Params json.RawMessage  `json:"params"`
			Result json.RawMessage  `json:"result"`
			Error  json.RawMessage  `json:"error"`
		}
		if err := json.Unmarshal(in.Bytes(), &m); err != nil {
			fmt.Fprintln(os.Stderr, "fakeagent: bad line:", err)
			continue
		}
		switch {
		case m.Method == "" && m.Error != nil:
			a.answered(string(*m.ID), json.RawMessage(`{"error":`+string(m.Error)+`}`))
		case m.Method == "":
			a.answered(string(*m.ID), m.Result)
		case m.ID == nil:
			if m.Method == "session/cancel" {
				mark("cancel")
				a.mu.Lock()
				a.cancelOnce.Do(func() { close(a.cancelled) })
				a.mu.Unlock()
			}
		default:
			go a.handle(*m.ID, m.Method, m.Params)
		}
	}
	switch teardown {
	case "eof":
		mark("eof")
	case "ignoreeof", "trapterm":
		select {}
	}
}

// mark creates FAKE_MARKS/name so the test can see which teardown rung ran.
func mark(name string) {
	if err := os.WriteFile(filepath.Join(os.Getenv("FAKE_MARKS"), name), nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "fakeagent: mark:", err)
	}
}

// ready tells the test, through the FAKE_READY FIFO, that the agent got here.
func ready() {
	f, err := os.OpenFile(os.Getenv("FAKE_READY"), os.O_WRONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeagent: ready:", err)
		return
	}
	fmt.Fprintln(f, os.Getpid())
	f.Close()
}

func (a *agent) send(m message) {
	m.JSONRPC = "2.0"
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

func (a *agent) reply(id json.RawMessage, result any) { a.send(message{ID: &id, Result: result}) }

func (a *agent) update(update map[string]any) {
	a.mu.Lock()
	sid := a.sessionID
	a.mu.Unlock()
	params, _ := json.Marshal(map[string]any{"sessionId": sid, "update": update})
	a.send(message{Method: "session/update", Params: params})
}

func (a *agent) say(text string) {
	a.update(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": text}})
}

func (a *agent) answered(id string, result json.RawMessage) {
	a.mu.Lock()
	ch := a.waiters[id]
	a.mu.Unlock()
	if ch != nil {
		ch <- result
	}
}

func (a *agent) handle(id json.RawMessage, method string, params json.RawMessage) {
	switch method {
	case "initialize":
		a.mu.Lock()
		a.initParams = params
		a.mu.Unlock()
		if release := os.Getenv("FAKE_INIT_RELEASE"); release != "" {
			ready()
			if f, err := os.Open(release); err == nil {
				f.Close() // opened once the test writes to the FIFO
			}
		}
		switch a.mode {
		case "hanginit":
			ready()
			select {}
		case "exitinit":
			os.Exit(2)
		}
		caps := map[string]any{"loadSession": false, "promptCapabilities": map[string]any{"image": false, "audio": false, "embeddedContext": false}}
		sessionCaps := map[string]any{}
		c := os.Getenv("FAKE_CAPS")
		if strings.HasPrefix(c, "load") || strings.HasPrefix(c, "resume") {
			caps["loadSession"] = true
		}
		if strings.HasPrefix(c, "resume") {
			sessionCaps["resume"] = map[string]any{}
		}
		if strings.HasSuffix(c, ",close") {
			sessionCaps["close"] = map[string]any{}
		}
		caps["sessionCapabilities"] = sessionCaps
		a.reply(id, map[string]any{"protocolVersion": 1, "agentCapabilities": caps, "authMethods": []any{}})
	case "session/new":
		var p struct {
			Cwd string `json:"cwd"`
		}
		json.Unmarshal(params, &p)
		sid := "sess-1"
		if a.mode == "remember" {
			sid = fmt.Sprintf("sess-%d-%d", os.Getpid(), time.Now().UnixNano())
			if err := os.WriteFile(a.statePath(sid), nil, 0o644); err != nil {
				a.send(message{ID: &id, Error: &rpcError{Code: -32603, Message: err.Error()}})
				return
			}
		}
		a.mu.Lock()
		a.sessionCwd = p.Cwd
		a.sessionID = sid
		a.mu.Unlock()
		switch a.mode {
		case "nosession":
			a.reply(id, map[string]any{})
			return
		case "newerror":
			a.send(message{ID: &id, Error: &rpcError{Code: -32000, Message: "Authentication required"}})
			return
		}
		a.reply(id, map[string]any{"sessionId": sid})
	case "session/load", "session/resume":
		var p struct {
			SessionID string `json:"sessionId"`
		}
		json.Unmarshal(params, &p)
		history, err := a.history(p.SessionID)
		if err != nil {
			a.send(message{ID: &id, Error: &rpcError{Code: -32002, Message: "Resource not found", Data: map[string]any{"message": err.Error()}}})
			return
		}
		mark(strings.TrimPrefix(method, "session/"))
		a.mu.Lock()
		a.sessionID = p.SessionID
		a.mu.Unlock()
		if method == "session/load" {
			// Replay the conversation, as session/load does.
			for _, h := range history {
				a.update(map[string]any{"sessionUpdate": "user_message_chunk", "content": map[string]any{"type": "text", "text": h}})
				a.say("replayed: " + h)
			}
		}
		a.reply(id, map[string]any{})
	case "session/close":
		mark("close")
		a.reply(id, map[string]any{})
	case "session/prompt":
		a.prompt(id, params)
	default:
		a.send(message{ID: &id, Error: &rpcError{Code: -32601, Message: "Method not found"}})
	}
}

func (a *agent) prompt(id json.RawMessage, params json.RawMessage) {
	var p struct {
		Prompt []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"prompt"`
		Meta json.RawMessage `json:"_meta"`
	}
	json.Unmarshal(params, &p)
	stop := func(reason string) { a.reply(id, map[string]any{"stopReason": reason}) }

	switch mode := a.mode; {
	case mode == "" || mode == "text":
		var texts []string
		for _, b := range p.Prompt {
			texts = append(texts, b.Type+":"+b.Text)
		}
		a.update(map[string]any{"sessionUpdate": "agent_thought_chunk", "content": map[string]any{"type": "text", "text": "secret thoughts"}})
		a.update(map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call-1", "title": "Read notes.txt", "kind": "read", "status": "pending", "rawInput": map[string]any{"path": "notes.txt"}})
		a.update(map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": "call-1", "status": "completed", "rawOutput": map[string]any{"content": "file body"}})
		a.update(map[string]any{"sessionUpdate": "plan", "entries": []any{map[string]any{"content": "answer", "priority": "high", "status": "completed"}}})
		a.say("You said: ")
		a.say(strings.Join(texts, " | "))
		a.reply(id, map[string]any{"stopReason": "end_turn", "usage": map[string]any{"inputTokens": 3, "outputTokens": 5, "totalTokens": 8}})
	case mode == "meta":
		a.say("_meta=" + string(p.Meta))
		stop("end_turn")
	case mode == "permission":
		a.askPermission(id)
	case mode == "fs":
		for _, b := range p.Prompt {
			for _, cmd := range strings.Split(b.Text, ";") {
				a.say(a.fs(strings.TrimSpace(cmd)) + "\n")
			}
		}
		stop("end_turn")
	case strings.HasPrefix(mode, "stop:"):
		a.say("partial")
		stop(strings.TrimPrefix(mode, "stop:"))
	case mode == "remember":
		a.remember(id, p.Prompt[0].Text)
	case mode == "model":
		a.callModel(id)
	case mode == "flood":
		a.flood(p.Prompt[0].Text)
		stop("end_turn")
	case mode == "autherror":
		a.send(message{ID: &id, Error: &rpcError{Code: -32000, Message: "Authentication required"}})
	case mode == "longerror":
		a.send(message{ID: &id, Error: &rpcError{Code: -32603, Message: strings.Repeat("é", 3000)}})
	case mode == "crash":
		a.say("partial")
		os.Exit(3)
	case mode == "hang":
		a.say("working")
		if os.Getenv("FAKE_READY") != "" {
			ready()
		}
		<-a.cancelled
		stop("cancelled")
	case mode == "longstderr":
		// One stderr line longer than a scanner's buffer, then more than a
		// pipe holds: the agent blocks unless the service keeps reading.
		os.Stderr.WriteString(strings.Repeat("x", 1<<20) + "\n")
		a.say("still here")
		stop("end_turn")
	case mode == "crashoncancel":
		a.say("working")
		<-a.cancelled
		os.Exit(4)
	case mode == "orphan":
		// Optionally a child process of its own, then ready and working
		// until killed.
		if os.Getenv("FAKE_GRANDCHILD") != "" {
			self, _ := os.Executable()
			cmd := exec.Command(self)
			cmd.Env = append(os.Environ(), "FAKE_MODE=sleeper")
			if err := cmd.Start(); err != nil {
				a.send(message{ID: &id, Error: &rpcError{Code: -32603, Message: err.Error()}})
				return
			}
		}
		a.say("working")
		ready()
		select {}
	case mode == "ignorecancel":
		a.say("working")
		select {}
	case mode == "grandchild":
		self, _ := os.Executable()
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), "FAKE_MODE=sleeper")
		if err := cmd.Start(); err != nil {
			a.send(message{ID: &id, Error: &rpcError{Code: -32603, Message: err.Error()}})
			return
		}
		a.say(fmt.Sprint(cmd.Process.Pid))
		stop("end_turn")
	case mode == "env":
		wd, _ := os.Getwd()
		a.mu.Lock()
		sessionCwd := a.sessionCwd
		a.mu.Unlock()
		a.say("cwd=" + wd + "\nsession-cwd=" + sessionCwd + "\n" + strings.Join(os.Environ(), "\n"))
		stop("end_turn")
	default:
		a.send(message{ID: &id, Error: &rpcError{Code: -32603, Message: "unknown FAKE_MODE " + mode}})
	}
}

// askPermission asks with JSON-RPC id 0 (a valid id that careless clients
// drop) and reports the decision as text.
func (a *agent) askPermission(id json.RawMessage) {
	options := []any{map[string]any{"optionId": "yes", "name": "Allow", "kind": "allow_once"}}
	if os.Getenv("FAKE_NO_ALLOW") != "" {
		options = nil
	}
	if os.Getenv("FAKE_ALWAYS") != "" {
		options = append(options, map[string]any{"optionId": "always", "name": "Always allow", "kind": "allow_always"})
	}
	options = append(options, map[string]any{"optionId": "no", "name": "Reject", "kind": "reject_once"})
	answer := make(chan json.RawMessage, 1)
	a.mu.Lock()
	a.waiters["0"] = answer
	a.mu.Unlock()
	reqID := json.RawMessage("0")
	params, _ := json.Marshal(map[string]any{
		"sessionId": "sess-1",
		"toolCall":  map[string]any{"toolCallId": "call-9", "title": "Delete build/"},
		"options":   options,
	})
	a.send(message{ID: &reqID, Method: "session/request_permission", Params: params})
	var res struct {
		Outcome struct {
			Outcome  string `json:"outcome"`
			OptionID string `json:"optionId"`
		} `json:"outcome"`
	}
	json.Unmarshal(<-answer, &res)
	if res.Outcome.Outcome != "selected" {
		a.reply(id, map[string]any{"stopReason": "cancelled"})
		return
	}
	a.say("selected " + res.Outcome.OptionID)
	a.reply(id, map[string]any{"stopReason": "end_turn"})
}

// fs runs one command of FAKE_MODE=fs against the client and describes
// the outcome: "caps" (the client capabilities initialize was sent),
// "read <path>" or "write <path> <content>".
func (a *agent) fs(cmd string) string {
	verb, rest, _ := strings.Cut(cmd, " ")
	if verb == "caps" {
		var init struct {
			Caps json.RawMessage `json:"clientCapabilities"`
		}
		a.mu.Lock()
		json.Unmarshal(a.initParams, &init)
		a.mu.Unlock()
		return "caps " + string(init.Caps)
	}
	path, content, _ := strings.Cut(rest, " ")
	params := map[string]any{"sessionId": "sess-1", "path": path}
	method := "fs/read_text_file"
	if verb == "write" {
		method, params["content"] = "fs/write_text_file", content
	}
	answer := make(chan json.RawMessage, 1)
	a.mu.Lock()
	a.calls++
	key := fmt.Sprintf(`"fs-%d"`, a.calls)
	a.waiters[key] = answer
	a.mu.Unlock()
	reqID := json.RawMessage(key)
	raw, _ := json.Marshal(params)
	a.send(message{ID: &reqID, Method: method, Params: raw})
	var res struct {
		Error *struct {
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
		Content string `json:"content"`
	}
	json.Unmarshal(<-answer, &res)
	switch {
	case res.Error != nil:
		return "error " + res.Error.Message + " " + string(res.Error.Data)
	case verb == "write":
		return "wrote " + path
	}
	return "read " + res.Content
}

func (a *agent) statePath(sid string) string {
	return filepath.Join(os.Getenv("FAKE_STATE"), filepath.Base(sid))
}

// history is what session sid was prompted with so far.
func (a *agent) history(sid string) ([]string, error) {
	data, err := os.ReadFile(a.statePath(sid))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(data)), nil
}

// remember answers with the session's earlier prompts and records text.
func (a *agent) remember(id json.RawMessage, text string) {
	a.mu.Lock()
	sid, cancelled := a.sessionID, a.cancelled
	a.mu.Unlock()
	switch {
	case text == "crash":
		os.Exit(3)
	case text == "wait":
		ready()
		a.say("waiting")
		<-cancelled
		a.mu.Lock()
		a.cancelled, a.cancelOnce = make(chan struct{}), sync.Once{}
		a.mu.Unlock()
		a.reply(id, map[string]any{"stopReason": "cancelled"})
		return
	case strings.HasPrefix(text, "flood"):
		a.flood(strings.TrimPrefix(text, "flood"))
	case strings.HasPrefix(text, "block"):
		ready()
		f, err := os.Open(os.Getenv("FAKE_RELEASE"))
		if err == nil {
			f.Close() // opened once the test writes to the FIFO
		}
	}
	history, err := a.history(sid)
	if err == nil {
		var f *os.File
		f, err = os.OpenFile(a.statePath(sid), os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, err = fmt.Fprintln(f, text)
			f.Close()
		}
	}
	if err != nil {
		a.send(message{ID: &id, Error: &rpcError{Code: -32603, Message: err.Error()}})
		return
	}
	a.say("remembered: " + strings.Join(history, " | "))
	a.reply(id, map[string]any{"stopReason": "end_turn"})
}

// callModel calls the model API and fails the prompt the way codex does.
func (a *agent) callModel(id json.RawMessage) {
	key := os.Getenv("FAKE_API_KEY")
	req, err := http.NewRequest(http.MethodPost, os.Getenv("FAKE_MODEL_URL"), strings.NewReader("{}"))
	if err != nil {
		a.send(message{ID: &id, Error: &rpcError{Code: -32603, Message: err.Error()}})
		return
	}
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.send(message{ID: &id, Error: &rpcError{Code: -32603, Message: "Internal error", Data: map[string]any{"message": err.Error()}}})
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		a.send(message{ID: &id, Error: &rpcError{Code: -32603, Message: "Internal error", Data: map[string]any{
			"message": fmt.Sprintf("unexpected status %s: %s", resp.Status, strings.TrimSpace(string(body))),
			"details": "request sent with x-api-key " + key,
		}}})
		return
	}
	a.say(string(body))
	a.reply(id, map[string]any{"stopReason": "end_turn"})
}

// floodChunk is the text of each chunk flood streams: 1000 bytes, so
// that a few hundred chunks, fewer than the client SDK queues, exceed what
// a turn keeps of its output.
var floodChunk = strings.Repeat("0123456789", 100)

// flood streams n chunks of floodChunk, n given in decimal.
func (a *agent) flood(n string) {
	var count int
	fmt.Sscan(n, &count)
	for range count {
		a.say(floodChunk)
	}
}
