package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3/packages/ssestream"
)

// ErrStreamEnded is wrapped by the error a Stream yields when the response
// stops (connection closed or broken) before the server sent a finish reason.
var ErrStreamEnded = errors.New("model stream ended unexpectedly")

// maxMessage caps the server message kept in an Error.
const maxMessage = 500

// Error is a failure the model server reported: an HTTP error status, or an
// error event inside a stream (StatusCode 0). Its fields come from the
// server's error object, with the API key redacted, so Error() is safe to show.
type Error struct {
	StatusCode int
	Type       string
	Code       string
	Message    string
}

// Error reads like "model request failed: 401 invalid_api_key: Incorrect API
// key provided" or "model stream failed: server_error: overloaded".
func (e *Error) Error() string {
	var b strings.Builder
	label := e.Code
	if label == "" {
		label = e.Type
	}
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, "model request failed: %d", e.StatusCode)
		if label == "" {
			label = http.StatusText(e.StatusCode)
		}
	} else {
		b.WriteString("model stream failed:")
		if label == "" && e.Message == "" {
			label = "error event"
		}
	}
	if label != "" {
		b.WriteString(" " + label)
	}
	if e.Message != "" {
		if label != "" {
			b.WriteString(":")
		}
		b.WriteString(" " + e.Message)
	}
	return b.String()
}

// httpError reads the error body of resp. The SDK has already read it and
// left a copy in resp.Body.
func httpError(resp *http.Response, apiKey string) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := parseError(body, apiKey)
	e.StatusCode = resp.StatusCode
	return e
}

// streamFailure describes an error that ended a stream after a successful
// response: an error event, a malformed chunk, or a broken connection.
func streamFailure(err error, apiKey string) error {
	if se, ok := errors.AsType[*ssestream.StreamError](err); ok {
		return parseError(se.Event.Data, apiKey)
	}
	if _, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Errorf("model stream failed: malformed chunk: %w", err)
	}
	return fmt.Errorf("%w: %w", ErrStreamEnded, err)
}

// parseError reads the error shapes OpenAI-compatible servers send:
// {"error":{"message","type","code"}} (OpenAI, DeepSeek, llama.cpp),
// {"error":"message"} (Ollama) and {"message","type","code"} (vLLM). Other
// bodies, such as a proxy's HTML page, yield an empty Error: they are not
// shown because nothing bounds what they contain.
func parseError(body []byte, apiKey string) *Error {
	type object struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	var env struct {
		Error json.RawMessage `json:"error"`
		object
	}
	if json.Unmarshal(body, &env) != nil {
		return &Error{}
	}
	obj := env.object
	if len(env.Error) > 0 {
		var msg string
		if json.Unmarshal(env.Error, &msg) == nil {
			obj = object{Message: msg}
		} else if json.Unmarshal(env.Error, &obj) != nil {
			obj = object{}
		}
	}
	// A numeric code only repeats the status; a string code is informative.
	var code string
	_ = json.Unmarshal(obj.Code, &code)
	return &Error{
		Type:    clean(obj.Type, apiKey),
		Code:    clean(code, apiKey),
		Message: clean(obj.Message, apiKey),
	}
}

// clean redacts apiKey from s, folds it onto one line and caps its length.
func clean(s, apiKey string) string {
	if apiKey != "" {
		s = strings.ReplaceAll(s, apiKey, "[redacted]")
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxMessage {
		s = strings.ToValidUTF8(s[:maxMessage], "") + "…"
	}
	return s
}
