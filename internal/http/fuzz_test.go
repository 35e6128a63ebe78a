package http

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The fuzz targets run their seeds with every `go test`; run one with
// `go test -fuzz=FuzzDecode ./internal/http` to search further.

// fuzzServer is a server for calling decoders and parsers directly.
func fuzzServer() *Server {
	return NewServer(Config{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler), Service: subagent.NewService(subagent.Config{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})})
}

// decoders are every request body the API decodes, by name.
var decoders = []func() any{
	func() any { return &createSessionRequest{} },
	func() any { return &createRunRequest{} },
	func() any { return &steerRequest{} },
	func() any { return &promptRequest{} },
	func() any { return &createSubagentRequest{} },
	func() any { return &followupRequest{} },
	func() any { return &interruptRequest{} },
	func() any { return &signinRequest{} },
}

// FuzzDecode feeds any body to every request decoder: each either accepts
// it or answers a client error (400 or 413) — never a panic, never an
// internal error.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{}`, `null`, `[]`, `"x"`, `{"label":"x","cwd":"/tmp"}`, `{"agentOptions":{"provider":"","maxTokens":0}}`,
		`{"provider":"spawn","parentSessionId":"p","prompt":[{"type":"text","text":"hi"}]}`,
		`{"provider":"spawn","parentSessionId":"p","label":"l","prompt":[{"type":"image","url":"x"}],"childId":""}`,
		`{"content":[{"type":"` + strings.Repeat("t", 65) + `","text":"x"}]}`,
		`{"content":[{"type":"text"}]}`, `{"content":[null]}`, `{"content":[1]}`,
		`{"parentSessionId":"p","content":[{"type":"text","text":"x"}],"source":{"kind":"coordinator"}}`,
		`{"toolFilter":{"allow":[]},"outputSchema":{"type":"object"},"maxDepth":-1}`,
		`{"token":"x"}`, `{"a":1} {}`, `{"label":"\u0000"}`, `{"label":"\ud800"}`, "\xff\xfe", `{"label":`,
		`{"maxDepth":1e309}`, `{"prompt":{"type":"text"}}`,
	} {
		f.Add([]byte(seed))
	}
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, newReq := range decoders {
			dst := newReq()
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(body)))
			err := s.decode(w, r, dst)
			if err == nil {
				continue
			}
			var se *subagent.Error
			if !errors.As(err, &se) {
				t.Fatalf("%T: %q: not a client error: %v", dst, body, err)
			}
			switch se.Code {
			case subagent.EInvalidRequest, subagent.EPayloadTooLarge:
			default:
				t.Fatalf("%T: %q: code %s", dst, body, se.Code)
			}
		}
	})
}

// FuzzResume feeds any Last-Event-ID and ?after= to the stream resume
// parser and the query parsers beside it: a value is either taken (and in
// range) or a listed field error, never a panic.
func FuzzResume(f *testing.F) {
	for _, seed := range []struct{ header, query string }{
		{"", ""}, {"5", ""}, {"", "after=5"}, {"-1", ""}, {"", "after=-2"}, {"9223372036854775807", ""},
		{"99999999999999999999", ""}, {"1e3", ""}, {" 5", ""}, {"result", ""}, {"", "after=&after=3"},
		{"", "after=%zz"}, {"", "types=a,,b&parentSessionId=&limit=0&wait=x&state=nope"}, {"\x00", "limit=1001&root=yes"},
	} {
		f.Add(seed.header, seed.query)
	}
	f.Fuzz(func(t *testing.T, header, query string) {
		r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/v1/events", RawQuery: query}, Header: http.Header{}}
		if header != "" {
			r.Header.Set("Last-Event-ID", header)
		}
		for _, lo := range []int64{-1, 0} {
			p := newParams(r)
			after, given := p.resume(lo, lo)
			if err := p.err(); err != nil {
				if subagent.ErrorCode(err) != subagent.EInvalidRequest {
					t.Fatalf("%q %q: %v", header, query, err)
				}
				continue
			}
			if after < lo || (!given && after != lo) {
				t.Fatalf("%q %q: after %d (given %v), lo %d", header, query, after, given, lo)
			}
		}
		p := newParams(r)
		_ = p.limit()
		_ = p.bool("root")
		_ = p.str("types", maxTypes*(maxTypeLength+1))
		_ = p.int("wait", 0, 0, 300)
		if err := p.err(); err != nil && subagent.ErrorCode(err) != subagent.EInvalidRequest {
			t.Fatalf("%q: %v", query, err)
		}
	})
}

// FuzzPreferWait feeds any Prefer header to its parser: the wait is never
// negative nor beyond MaxWait.
func FuzzPreferWait(f *testing.F) {
	for _, seed := range []string{"", "wait=5", "wait=99999999999", "respond-async, wait=3", `wait="7"`, "wait=-1", "WAIT = 2;x", "wait=1e3"} {
		f.Add(seed)
	}
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, header string) {
		d, applied := s.preferWait(header)
		if d < 0 || d > s.maxWait || (applied != "" && !strings.HasPrefix(applied, "wait=")) {
			t.Fatalf("%q: wait %v applied %q", header, d, applied)
		}
	})
}
