package a2a

import (
	"context"
	"errors"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/webhooks"
)

// TestErrorOf: problem codes become the A2A errors clients test for, with
// the problem's message; anything else is an internal error that shows
// nothing of itself.
func TestErrorOf(t *testing.T) {
	ctx := context.Background()
	for code, want := range map[string]error{
		subagent.ETaskNotFound:          a2a.ErrTaskNotFound,
		subagent.EInvalidRequest:        a2a.ErrInvalidParams,
		subagent.ESessionNotFound:       a2a.ErrInvalidParams,
		subagent.EUnsupportedCapability: a2a.ErrUnsupportedOperation,
		subagent.EForbidden:             a2a.ErrUnauthorized,
		subagent.EDraining:              a2a.ErrServerError,
		webhooks.EPushNotFound:          a2a.ErrInvalidParams,
		"SOMETHING_NEW":                 a2a.ErrInternalError,
	} {
		err := errorOf(ctx, subagent.Errorf(code, "the detail"))
		var ae *a2a.Error
		if !errors.Is(err, want) || !errors.As(err, &ae) || ae.Message != code+": the detail" {
			t.Errorf("errorOf(%s) = %v, want %v with the problem's message", code, err, want)
		}
	}
	err := errorOf(ctx, errors.New("pq: connection refused at 10.0.0.1"))
	if !errors.Is(err, a2a.ErrInternalError) || err.Error() != "internal error" {
		t.Errorf("errorOf(an internal error) = %q, want a bare internal error", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := errorOf(cctx, cctx.Err()); !errors.Is(err, context.Canceled) {
		t.Errorf("errorOf(the caller's cancellation) = %v, want it as it is", err)
	}
}

// TestContentOf: text parts are text blocks, data parts their JSON text;
// files are refused as an unsupported content type.
func TestContentOf(t *testing.T) {
	got, err := contentOf(a2a.ContentParts{a2a.NewTextPart("hi"), a2a.NewDataPart(map[string]any{"k": 1})})
	if err != nil || len(got) != 2 || got[0] != (block{Type: "text", Text: "hi"}) || got[1] != (block{Type: "text", Text: `{"k":1}`}) {
		t.Fatalf("contentOf = %+v, %v", got, err)
	}
	if _, err := contentOf(a2a.ContentParts{a2a.NewFileURLPart("https://example.com/x", "text/plain")}); !errors.Is(err, a2a.ErrUnsupportedContentType) {
		t.Fatalf("contentOf(a file) = %v, want ContentTypeNotSupported", err)
	}
	if _, err := contentOf(nil); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Fatalf("contentOf(nothing) = %v, want InvalidParams", err)
	}
}
