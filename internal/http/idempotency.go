package http

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Idempotency keys (docs/architecture.md §8, after the IETF httpapi
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
	// and its key stays reserved (see idempotent).
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
// An answer that describes the request but cannot be stored (the store
// failed, see completeKey, or it exceeds maxReplayBody) keeps the key
// reserved: retries are IDEMPOTENCY_KEY_IN_USE, not a second run, until
// the reservation is stale (idempotencyStale; then a retry runs, as after
// a crash of the process that reserved it).
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
	body, err := s.readBody(w, r)
	if err != nil {
		return err
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
	answered := false
	defer func() {
		// Only a request that produced no answer (a panic, say) gives
		// its key back; an answered one keeps it even when the answer
		// could not be stored.
		if !answered {
			s.releaseKey(ctx, key)
		}
	}()
	next.ServeHTTP(rw, r)
	if !rw.describes() {
		return nil
	}
	answered = true
	if rw.overflow {
		s.log.WarnContext(ctx, "the answer of an idempotent request is too large to store; its key stays reserved",
			slog.Int("limit", maxReplayBody))
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
	s.completeKey(context.WithoutCancel(ctx), key, rw.status, data)
	return nil
}

// completeAttempts bounds how often completeKey tries to store an answer,
// completeBackoff is the pause after the first failure (doubled after
// each).
const (
	completeAttempts = 3
	completeBackoff  = 100 * time.Millisecond
)

// completeKey stores the answer of the request that reserved key, trying
// again after a failure. An answer that cannot be stored leaves the key
// reserved (see idempotent).
func (s *Server) completeKey(ctx context.Context, key string, status int, answer []byte) {
	pause := completeBackoff
	for attempt := 1; ; attempt++ {
		err := s.store.CompleteIdempotency(ctx, key, status, answer)
		if err == nil {
			return
		}
		if attempt == completeAttempts {
			s.log.ErrorContext(ctx, "store the answer of an idempotent request; its key stays reserved",
				slog.Any("error", err), slog.Int("attempts", attempt))
			return
		}
		s.log.WarnContext(ctx, "store the answer of an idempotent request; trying again", slog.Any("error", err))
		time.Sleep(pause)
		pause *= 2
	}
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

// describes reports whether the answer describes the request, so that a
// retry must get it again (or at least never run the request again).
func (rw *answerRecorder) describes() bool {
	return rw.status != 0 && rw.status < 500 && rw.status != http.StatusTooManyRequests
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
