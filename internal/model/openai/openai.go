// Package openai implements model.Model over an OpenAI-compatible Chat
// Completions server (OpenAI, DeepSeek, vLLM, Ollama, llama.cpp) with the
// openai-go SDK. Every SDK default that depends on the environment is set
// explicitly, so a route behaves the same whatever OPENAI_* variables are set.
package openai

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/subagentd/subagentd/internal/model"
)

// DefaultBaseURL is used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// DefaultTimeout bounds one request when Config.Timeout is zero. It covers
// the whole streamed answer, so it is generous.
const DefaultTimeout = 10 * time.Minute

// Config configures one OpenAI-compatible route.
type Config struct {
	// BaseURL is the API root, e.g. http://127.0.0.1:11434/v1; empty means
	// DefaultBaseURL.
	BaseURL string
	// APIKey is sent as a bearer token; empty sends no Authorization header
	// (local servers need none).
	APIKey string
	// DefaultModel is requested when model.Request.Model is empty.
	DefaultModel string
	// Timeout bounds one request attempt including reading its whole stream;
	// zero means DefaultTimeout.
	Timeout time.Duration
	// MaxRetries is how often a failed request is retried before streaming
	// starts. Zero, the default, never retries: the caller owns retry policy.
	MaxRetries int
	// HTTPClient sends the requests; nil means a private client on
	// http.DefaultTransport.
	HTTPClient *http.Client
}

// Model streams steps from one OpenAI-compatible server. It is safe for
// concurrent use.
type Model struct {
	svc          sdk.ChatCompletionService
	defaultModel string
	apiKey       string // kept only to redact it from server error messages
	timeout      time.Duration
	// completionTokens sends max_completion_tokens, which api.openai.com
	// requires for newer models; other servers are sent max_tokens, which
	// every OpenAI-compatible server understands.
	completionTokens bool
}

var _ model.Model = (*Model)(nil)

// New returns a Model for cfg. It returns an error when BaseURL is not an
// absolute http(s) URL or MaxRetries or Timeout is negative.
func New(cfg Config) (*Model, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("openai model: base URL %q must be an absolute http or https URL", cfg.BaseURL)
	}
	if cfg.MaxRetries < 0 {
		return nil, fmt.Errorf("openai model: max retries %d must not be negative", cfg.MaxRetries)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("openai model: timeout %s must not be negative", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	// NewChatCompletionService, unlike sdk.NewClient, reads no environment
	// variables; everything it needs is passed here.
	svc := sdk.NewChatCompletionService(
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(cfg.MaxRetries),
		option.WithRequestTimeout(cfg.Timeout),
		option.WithHTTPClient(cfg.HTTPClient),
	)
	return &Model{
		svc:              svc,
		defaultModel:     cfg.DefaultModel,
		apiKey:           cfg.APIKey,
		timeout:          cfg.Timeout,
		completionTokens: u.Hostname() == "api.openai.com",
	}, nil
}

// Stream sends req as one streamed chat completion and yields its deltas:
// text and reasoning as they arrive, then each assembled tool call, the usage
// when the server reports it, and a final ChunkFinish.
//
// It yields ctx.Err() as soon as ctx is done, an *Error for an HTTP error
// status or an error event in the stream, an error wrapping ErrStreamEnded
// when the stream stops before a finish reason, and other errors for an
// invalid request or a transport failure. No error names the API key or
// carries the request body.
func (m *Model) Stream(ctx context.Context, req model.Request) iter.Seq2[model.Chunk, error] {
	return func(yield func(model.Chunk, error) bool) {
		params, err := m.params(req)
		if err != nil {
			yield(model.Chunk{}, err)
			return
		}
		var resp *http.Response
		stream := m.svc.NewStreaming(ctx, params, option.WithResponseInto(&resp))
		defer stream.Close()

		var a assembler
		for stream.Next() {
			if err := ctx.Err(); err != nil {
				yield(model.Chunk{}, err)
				return
			}
			for _, c := range a.add(stream.Current()) {
				if !yield(c, nil) {
					return
				}
			}
		}
		if err := m.streamErr(ctx, stream.Err(), resp); err != nil {
			yield(model.Chunk{}, err)
			return
		}
		if !a.finished() {
			yield(model.Chunk{}, ErrStreamEnded)
			return
		}
		for _, c := range a.final() {
			if !yield(c, nil) {
				return
			}
		}
	}
}

// streamErr turns the SDK's end-of-stream error into one that is safe to show.
// resp is the HTTP response when one arrived.
func (m *Model) streamErr(ctx context.Context, err error, resp *http.Response) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("model request timed out after %s: %w", m.timeout, context.DeadlineExceeded)
	}
	if resp == nil {
		// No response: a transport failure. A *url.Error names the URL; keep
		// only its cause.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return fmt.Errorf("model request failed: %w", err)
	}
	if resp.StatusCode >= 400 {
		return httpError(resp, m.apiKey)
	}
	return streamFailure(err, m.apiKey)
}
