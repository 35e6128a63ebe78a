package http

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/fork"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// TestEndToEnd_SpawnWithScriptedModel drives the real spawn provider and
// agent loop through the API: the real events and payloads must match the
// spec's schemas (every frame is validated by the stream reader).
func TestEndToEnd_SpawnWithScriptedModel(t *testing.T) {
	b := setup(t)
	release := make(chan struct{})
	routes, err := model.NewRoutes("scripted", model.Route{Name: "scripted", Kind: "scripted",
		Model: scripted.New(scripted.Step{Text: "first answer"}, scripted.Step{Text: "streamed answer", Pause: release})})
	if err != nil {
		t.Fatal(err)
	}
	deps := inprocess.Deps{Store: b.st, Routes: routes, Logger: slog.New(slog.DiscardHandler)}
	for _, p := range []subagent.Provider{spawn.New(deps), fork.New(deps)} {
		if err := b.svc.Register(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	var providers providerListJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/providers"}).decode(t, &providers)
	if len(providers.Providers) != 2 || providers.Providers[1].Name != "fork" || !providers.Providers[1].InheritsParentContext {
		t.Fatalf("providers = %+v", providers)
	}
	parent := b.rootSession(t)
	events := b.stream(t, "/v1/events?after=0", nil)

	var run runJSON
	b.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs?wait=true", body: map[string]any{
		"provider": "spawn", "parentSessionId": parent, "prompt": textPrompt("question"), "label": "e2e",
		"toolFilter": map[string]any{"allow": []string{}}, "maxDepth": 3,
	}}).decode(t, &run)
	if run.State != store.StateSettled || run.Result.StopReason != subagent.StopCompleted ||
		string(run.Result.Output) != `[{"type":"text","text":"first answer"}]` {
		t.Fatalf("run = %+v, result %+v", run, run.Result)
	}
	for _, want := range []string{subagent.EventProviderAdded, subagent.EventProviderAdded, subagent.EventStart, subagent.EventEnd} {
		if f := events.next(t); f.event != want {
			t.Fatalf("event %+v, want %s", f, want)
		}
	}
	replay := b.stream(t, "/v1/runs/"+run.RunID+"/stream", nil)
	frames := replay.end(t)
	if last := frames[len(frames)-1]; last.event != "result" {
		t.Fatalf("last frame %+v", last)
	}

	// A second run streams its chunks live.
	second := b.startRun(t, "spawn", parent, nil)
	live := b.stream(t, "/v1/sessions/"+second.ChildSessionID+"/stream", nil)
	var text string
	for text != "streamed answer" {
		f := live.next(t)
		if f.event != sessionlog.EventAssistantChunk {
			continue
		}
		var env struct{ Data sessionlog.ChunkData }
		if err := json.Unmarshal(f.data, &env); err != nil {
			t.Fatal(err)
		}
		text += env.Data.Chunk.Text
	}
	close(release)
	var settled runJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + second.RunID + "?wait=30"}).decode(t, &settled)
	if settled.Result.StopReason != subagent.StopCompleted {
		t.Fatalf("second run = %+v", settled)
	}
}
