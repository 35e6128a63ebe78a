// Command flow drives subagentd through the client oapi-codegen generated
// from api/openapi.yaml (client.gen.go, same package): create a session,
// run with wait, get the run, dispose it. Run as: flow <base URL>.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
)

func main() {
	if err := flow(context.Background(), os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "flow:", err)
		os.Exit(1)
	}
}

func flow(ctx context.Context, base string) error {
	c, err := NewClientWithResponses(base)
	if err != nil {
		return err
	}
	label := "oapi-codegen"
	session, err := c.CreateSessionWithResponse(ctx, nil, CreateSessionJSONRequestBody{Label: &label})
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	if session.JSON201 == nil {
		return fmt.Errorf("create session: %s %s", session.Status(), session.Body)
	}

	prompt := "hello from oapi-codegen"
	wait := true
	run, err := c.CreateRunWithResponse(ctx, &CreateRunParams{Wait: &wait}, CreateRunJSONRequestBody{
		Provider:        "spawn",
		ParentSessionId: session.JSON201.Id,
		Prompt:          Prompt{{Type: "text", Text: &prompt}},
	})
	if err != nil {
		return fmt.Errorf("create run: %w", err)
	}
	if run.JSON201 == nil {
		return fmt.Errorf("create run: %s %s", run.Status(), run.Body)
	}
	r := run.JSON201
	var text strings.Builder
	if r.Result != nil {
		for _, b := range r.Result.Output {
			if b.Text != nil {
				text.WriteString(*b.Text)
			}
		}
	}
	if r.State != RunStateSettled || r.Result == nil || r.Result.StopReason != "completed" || text.String() != "echo: "+prompt {
		return fmt.Errorf("run did not settle with the echo: %s", run.Body)
	}

	got, err := c.GetRunWithResponse(ctx, r.RunId, nil)
	if err != nil {
		return fmt.Errorf("get run: %w", err)
	}
	if got.JSON200 == nil || got.JSON200.RunId != r.RunId || got.JSON200.State != RunStateSettled {
		return fmt.Errorf("get run: %s %s", got.Status(), got.Body)
	}

	disposed, err := c.DisposeRunWithResponse(ctx, r.RunId)
	if err != nil {
		return fmt.Errorf("dispose: %w", err)
	}
	if disposed.StatusCode() != http.StatusNoContent {
		return fmt.Errorf("dispose: %s %s", disposed.Status(), disposed.Body)
	}
	fmt.Println("flow ok: run", r.RunId)
	return nil
}
