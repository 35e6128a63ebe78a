package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/subagentd/subagentd/internal/subagent"
)

// args are a tool call's arguments on their way to a REST request body.
// The face takes out what is its own (the route's path ids, waits), fills
// in what an MCP client may leave out (parentSessionId; a prompt as a
// plain string), and leaves every other field to the REST operation,
// which validates the body as its route does.
type args struct {
	fields map[string]json.RawMessage
	bad    map[string]string // invalid arguments: field → message
	failed error             // a failure that is not the arguments' (the root session)
}

// parseArgs reads raw, which must be a JSON object (or absent), holding
// only the fields named known.
func parseArgs(raw json.RawMessage, known []string) *args {
	a := &args{fields: map[string]json.RawMessage{}, bad: map[string]string{}}
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return a
	}
	if err := json.Unmarshal(raw, &a.fields); err != nil || a.fields == nil {
		a.fields = map[string]json.RawMessage{}
		a.failed = subagent.Errorf(subagent.EInvalidRequest, "the arguments must be a JSON object")
		return a
	}
	for name := range a.fields {
		if !slices.Contains(known, name) {
			a.bad[name] = "is not a known field"
		}
	}
	return a
}

// id takes the string argument name out of the body: an id the operation
// takes apart from it (as the REST route has it in its path).
func (a *args) id(name string) string {
	raw, ok := a.take(name)
	if !ok {
		a.bad[name] = "is required"
		return ""
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		a.bad[name] = "must be a string"
	}
	return v
}

// wait takes the argument wait, seconds from 0 to MaxWait, out of the
// body; def when it is absent.
func (a *args) wait(def int) time.Duration {
	raw, ok := a.take("wait")
	if !ok {
		return time.Duration(def) * time.Second
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil || n < 0 || n > MaxWait {
		a.bad["wait"] = fmt.Sprintf("must be an integer from 0 to %d", MaxWait)
	}
	return time.Duration(n) * time.Second
}

// flag takes the boolean argument name out of the body; false when it is
// absent.
func (a *args) flag(name string) bool {
	raw, ok := a.take(name)
	if !ok {
		return false
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		a.bad[name] = "must be a boolean"
	}
	return b
}

// content turns the argument name, when it is a string, into the one text
// block the REST body holds; "" becomes no block, which the route
// refuses. Anything else is left as given.
func (a *args) content(name string) {
	var text string
	if json.Unmarshal(a.fields[name], &text) != nil {
		return
	}
	blocks := []map[string]string{}
	if text != "" {
		blocks = append(blocks, map[string]string{"type": "text", "text": text})
	}
	a.fields[name], _ = json.Marshal(blocks) // strings always encode
}

// parent sets parentSessionId, when the arguments leave it out, to the
// tenant's root session labelled RootLabel. It does nothing once an
// argument is known to be invalid, so that a refused call creates nothing.
func (a *args) parent(ctx context.Context, api API) {
	if _, ok := a.fields["parentSessionId"]; ok || len(a.bad) > 0 || a.failed != nil {
		return
	}
	id, err := api.FaceRoot(ctx, RootLabel)
	if err != nil {
		a.failed = err
		return
	}
	a.fields["parentSessionId"], _ = json.Marshal(id)
}

// session takes the argument sessionId out of the body, the tenant's
// root session labelled RootLabel when it is absent.
func (a *args) session(ctx context.Context, api API) string {
	if raw, ok := a.fields["sessionId"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return a.id("sessionId")
	}
	delete(a.fields, "sessionId")
	if len(a.bad) > 0 || a.failed != nil {
		return ""
	}
	id, err := api.FaceRoot(ctx, RootLabel)
	if err != nil {
		a.failed = err
	}
	return id
}

// query turns every argument into the query parameter of that name, as
// a GET route reads it: strings as they are, numbers in decimal. Other
// values are invalid.
func (a *args) query() url.Values {
	q := url.Values{}
	for name, raw := range a.fields {
		var s string
		var n json.Number
		switch {
		case bytes.Equal(bytes.TrimSpace(raw), []byte("null")):
			continue
		case json.Unmarshal(raw, &s) == nil:
			q.Set(name, s)
		case json.Unmarshal(raw, &n) == nil:
			q.Set(name, n.String())
		default:
			a.bad[name] = "must be a string or a number"
		}
	}
	return q
}

// err returns what is wrong with the arguments: INVALID_REQUEST listing
// every invalid field, as a REST route's answer does, or the failure that
// stopped the face from completing them.
func (a *args) err() error {
	if a.failed != nil {
		return a.failed
	}
	if len(a.bad) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(a.bad))
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + ": " + a.bad[name]
	}
	return &subagent.Error{Code: subagent.EInvalidRequest, Message: "invalid request: " + strings.Join(parts, "; "), Fields: a.bad}
}

// body is the REST request body: the arguments that are left.
func (a *args) body() []byte {
	data, _ := json.Marshal(a.fields) // raw JSON values re-encode as they are
	return data
}

// take removes the argument name from the body; an explicit null counts
// as absent.
func (a *args) take(name string) (json.RawMessage, bool) {
	raw, ok := a.fields[name]
	delete(a.fields, name)
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, false
	}
	return raw, true
}
