package roots_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/echo"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// running is an Agents whose listed sessions run a turn.
type running map[string]bool

func (r running) Live(_ context.Context, id string) (bool, bool) { return r[id], r[id] }

func TestCreate_RouteCwdAndConflict(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	real := filepath.Join(ws, "project")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	routes, err := model.NewRoutes("main", model.Route{Name: "main", Kind: "echo", DefaultModel: "m", Model: echo.New()})
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	s := roots.New(roots.Config{Store: st, Routes: routes, WorkspaceRoots: []string{ws}})
	ctx := t.Context()

	persona := "terse"
	hdr, err := s.Create(ctx, roots.CreateParams{ID: "r1", Label: "one", Cwd: ws + "/link",
		Agent: &subagent.AgentOptions{Provider: "main", Model: "m2", MaxTokens: 64}, Persona: &persona})
	if err != nil {
		t.Fatal(err)
	}
	if hdr.ID != "r1" || hdr.Cwd != real || hdr.Label != "one" || hdr.AgentProvider != "main" || hdr.AgentModel != "m2" ||
		hdr.MaxTokens != 64 || hdr.Persona == nil || *hdr.Persona != persona || hdr.ParentID != "" {
		t.Errorf("created header = %+v, want its cwd resolved to %s", hdr, real)
	}
	if _, err := s.Create(ctx, roots.CreateParams{ID: "r1"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second create of r1: %v, want ErrConflict", err)
	}
	for _, tc := range []struct {
		name string
		p    roots.CreateParams
		code string
	}{
		{"unknown route", roots.CreateParams{ID: "r2", Agent: &subagent.AgentOptions{Provider: "nope"}}, roots.EUnknownRoute},
		{"cwd outside", roots.CreateParams{ID: "r3", Cwd: t.TempDir()}, subagent.EInvalidRequest},
		{"cwd missing", roots.CreateParams{ID: "r4", Cwd: ws + "/absent"}, subagent.EInvalidRequest},
		{"cwd escaping by ..", roots.CreateParams{ID: "r5", Cwd: ws + "/project/../.."}, subagent.EInvalidRequest},
	} {
		if _, err := s.Create(ctx, tc.p); subagent.ErrorCode(err) != tc.code {
			t.Errorf("%s: err = %v, want %s", tc.name, err, tc.code)
		}
		if _, err := st.GetSession(ctx, tc.p.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: a refused session was stored (%v)", tc.name, err)
		}
	}
}

func TestCheckCwd_NoWorkspacesAcceptsAsIs(t *testing.T) {
	t.Parallel()
	if got, err := roots.CheckCwd("/anywhere/../at/all", nil); err != nil || got != "/anywhere/../at/all" {
		t.Errorf("CheckCwd without workspaces = %q, %v", got, err)
	}
	if got, err := roots.CheckCwd("", []string{t.TempDir()}); err != nil || got != "" {
		t.Errorf("CheckCwd of no cwd = %q, %v", got, err)
	}
}

func TestActivity_RootsByTheirAgents(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	ctx := t.Context()
	for _, id := range []string{"busy", "idle"} {
		if err := st.CreateSession(ctx, store.Session{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	rows := []store.Session{{ID: "busy"}, {ID: "idle"}}
	got, err := roots.New(roots.Config{Store: st, Agents: running{"busy": true}}).Activity(ctx, rows)
	if err != nil || !got["busy"] || got["idle"] {
		t.Errorf("Activity = %v, %v; want only busy working", got, err)
	}
	got, err = roots.New(roots.Config{Store: st}).Activity(ctx, rows)
	if err != nil || got["busy"] || got["idle"] {
		t.Errorf("Activity without agents = %v, %v; want none working", got, err)
	}
}
