package http

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Idempotency keys (DESIGN §3, after the IETF httpapi
// idempotency-key-header draft).
const (
	idempotencyHeader = "Idempotency-Key"
	maxIdempotencyKey = 255
	// IdempotencyTTL is how long a key is remembered.
	IdempotencyTTL = 24 * time.Hour
	// idempotencyStale is when an in-flight reservation is deemed left by
	// a process that died: longer than any request runs (MaxWait included).
	idempotencyStale = 15 * time.Minute
	// maxReplayBody bounds a stored answer; a larger one is not stored,
	// and its key is released.
	maxReplayBody = 1 << 20
)

// replayedHeaders are the answer headers a replay repeats.
var replayedHeaders = []string{"Content-Type", "Location", "Preference-Applied"}

// storedAnswer is the response column of an idempotency key. The body is
// a string, not JSON: a jsonb column would reorder it, and a replay must
// repeat the answer byte for byte.
type storedAnswer struct {
	Header map[string]string `json:"header,omitempty"`
	Body   string            `json:"body,omitempty"`
}

// idempotent makes a POST with an Idempotency-Key happen once per tenant
// and key: the first request runs and its answer is stored; a retry with
// the same request gets that answer again (with Idempotent-Replayed:
// true), one with another request IDEMPOTENCY_KEY_REUSED (422), one while
// the first is running IDEMPOTENCY_KEY_IN_USE (409). Answers that say
// nothing about the request — 5xx, 429, a client gone before the answer —
// are not stored: the retry runs again.
func (s *Server) idempotent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, present := r.Header[idempotencyHeader]
		// Sign-in is left out: replaying it would not set the cookie.
		if r.Method != http.MethodPost || !present || r.URL.Path == authSessionPath {
			next.ServeHTTP(w, r)
			return
		}
		if err := s.runOnce(w, r, key, next); err != nil {
			s.writeError(w, r, err)
		}
	})
}

func (s *Server) runOnce(w http.ResponseWriter, r *http.Request, values []string, next http.Handler) error {
	key := values[0]
	if len(values) != 1 || key == "" || len(key) > maxIdempotencyKey || !printableASCII(key) {
		return invalid(map[string]string{idempotencyHeader: fmt.Sprintf("must be one header of 1 to %d visible ASCII characters", maxIdempotencyKey)})
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.bodyLimit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return s.tooLarge(w, r)
		}
		return decodeError(err, s.bodyLimit)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", r.Method, r.URL.RequestURI())
	h.Write(body)
	hash := hex.EncodeToString(h.Sum(nil))
	ctx := r.Context()
	rec, reserved, err := s.store.ReserveIdempotency(ctx, key, hash, time.Now().Add(-idempotencyStale))
	if err != nil {
		return fmt.Errorf("reserve idempotency key: %w", err)
	}
	if !reserved {
		switch {
		case rec.RequestHash != hash:
			return subagent.Errorf(codeIdempotencyReused, "Idempotency-Key %q was used for another request in the last 24 hours", key)
		case rec.Status == 0:
			return subagent.Errorf(codeIdempotencyInUse, "the first request with Idempotency-Key %q is still running; retry later", key)
		}
		s.domain.IdempotentReplay()
		return s.replay(w, rec)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rw := &answerRecorder{ResponseWriter: w}
	completed := false
	defer func() {
		if !completed {
			s.releaseKey(ctx, key)
		}
	}()
	next.ServeHTTP(rw, r)
	if !rw.storable() {
		return nil
	}
	answer := storedAnswer{Header: map[string]string{}}
	for _, name := range replayedHeaders {
		if v := w.Header().Get(name); v != "" {
			answer.Header[name] = v
		}
	}
	answer.Body = rw.body.String()
	data, err := json.Marshal(answer)
	if err != nil {
		return nil
	}
	if err := s.store.CompleteIdempotency(context.WithoutCancel(ctx), key, rw.status, data); err != nil {
		s.log.WarnContext(ctx, "store the answer of an idempotent request", slog.Any("error", err))
		return nil
	}
	completed = true
	return nil
}

// releaseKey drops a reservation whose request produced no answer worth
// replaying.
func (s *Server) releaseKey(ctx context.Context, key string) {
	if err := s.store.ReleaseIdempotency(context.WithoutCancel(ctx), key); err != nil {
		s.log.WarnContext(ctx, "release idempotency key", slog.Any("error", err))
	}
}

// replay writes a stored answer again.
func (s *Server) replay(w http.ResponseWriter, rec store.Idempotency) error {
	var a storedAnswer
	if err := json.Unmarshal(rec.Response, &a); err != nil && len(rec.Response) > 0 {
		return fmt.Errorf("stored answer of idempotency key: %w", err)
	}
	for k, v := range a.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Idempotent-Replayed", "true")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(rec.Status)
	_, _ = io.WriteString(w, a.Body)
	return nil
}

func printableASCII(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// answerRecorder copies what a handler answers, for storing it.
type answerRecorder struct {
	http.ResponseWriter
	status   int
	body     bytes.Buffer
	overflow bool
}

func (rw *answerRecorder) WriteHeader(code int) {
	if rw.status == 0 {
		rw.status = code
	}
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *answerRecorder) Write(p []byte) (int, error) {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	if rw.body.Len()+len(p) > maxReplayBody {
		rw.overflow = true
	} else {
		rw.body.Write(p)
	}
	return rw.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (rw *answerRecorder) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

// storable reports whether the answer describes the request, so that a
// retry must get it again.
func (rw *answerRecorder) storable() bool {
	return rw.status != 0 && rw.status < 500 && rw.status != http.StatusTooManyRequests && !rw.overflow
}

// SweepExpired deletes idempotency keys older than IdempotencyTTL and
// expired sign-ins, now and then every interval until ctx ends.
func (s *Server) SweepExpired(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		now := time.Now()
		n, err := s.store.SweepIdempotency(ctx, now.Add(-IdempotencyTTL))
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.ErrorContext(ctx, "sweep idempotency keys", slog.Any("error", err))
		case n > 0:
			s.log.DebugContext(ctx, "swept idempotency keys", slog.Int64("deleted", n))
		}
		n, err = s.store.SweepSignins(ctx, now)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.ErrorContext(ctx, "sweep sign-ins", slog.Any("error", err))
		case n > 0:
			s.log.DebugContext(ctx, "swept expired sign-ins", slog.Int64("deleted", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
