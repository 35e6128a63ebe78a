package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The A2A face driven by third-party clients from outside the process:
// the a2a-go CLI (built from cmd/api/testdata/a2a-cli, which pins it) and
// the A2A JavaScript SDK (cmd/api/testdata/a2a-client, installed by
// scripts/test).

// a2aCLIDir and a2aClientDir hold the pinned clients.
const (
	a2aCLIDir    = "testdata/a2a-cli"
	a2aClientDir = "testdata/a2a-client"
)

// theA2ACLI is the a2a-go CLI, built from its pinned module.
var theA2ACLI goBinary

// a2aCLI builds the a2a-go CLI once per test process and returns its path.
func a2aCLI(t *testing.T) string {
	t.Helper()
	return theA2ACLI.build(t, "a2a", a2aCLIDir, "github.com/a2aproject/a2a-go/v2/cmd/a2a")
}

// cliRun runs the CLI with args and returns its stdout; it fails the test
// unless the exit status is as wanted.
func cliRun(t *testing.T, wantOK bool, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, a2aCLI(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if (err == nil) != wantOK {
		t.Fatalf("a2a %s: %v (want success %v)\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, wantOK, stdout.String(), stderr.String())
	}
	return stdout.String() + stderr.String()
}

// cliEvent is an event or task as the CLI prints it with -o json.
type cliEvent struct {
	Task           *cliTask `json:"task"`
	StatusUpdate   *cliTask `json:"statusUpdate"`
	ArtifactUpdate *struct {
		Append   bool `json:"append"`
		Artifact struct {
			Parts []struct{ Text string } `json:"parts"`
		} `json:"artifact"`
		TaskID string `json:"taskId"`
	} `json:"artifactUpdate"`
	// A bare task (send without --stream, get task, cancel).
	cliTask
}

type cliTask struct {
	ID        string `json:"id"`
	TaskID    string `json:"taskId"`
	ContextID string `json:"contextId"`
	Status    struct {
		State string `json:"state"`
	} `json:"status"`
	Artifacts []struct {
		Parts []struct{ Text string } `json:"parts"`
	} `json:"artifacts"`
}

func (t *cliTask) text() string {
	var b strings.Builder
	for _, a := range t.Artifacts {
		for _, p := range a.Parts {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// cliStream is what a streaming command printed.
type cliStream struct {
	task  *cliTask
	text  string
	final string
}

// readStream decodes the CLI's JSON events from r until it ends or stop
// says so after an event.
func readStream(t *testing.T, r io.Reader, stop func(cliStream) bool) cliStream {
	t.Helper()
	return readMore(t, json.NewDecoder(r), cliStream{}, stop)
}

// readMore goes on decoding events from dec after s.
func readMore(t *testing.T, dec *json.Decoder, s cliStream, stop func(cliStream) bool) cliStream {
	t.Helper()
	for {
		var ev cliEvent
		if err := dec.Decode(&ev); err != nil {
			if err != io.EOF {
				t.Errorf("decode the CLI's events: %v", err)
			}
			return s
		}
		switch {
		case ev.Task != nil:
			s.task = ev.Task
		case ev.ArtifactUpdate != nil:
			for _, p := range ev.ArtifactUpdate.Artifact.Parts {
				s.text += p.Text
			}
		case ev.StatusUpdate != nil:
			s.final = ev.StatusUpdate.Status.State
		}
		if stop != nil && stop(s) {
			return s
		}
	}
}

// decodeTask decodes the task a CLI command printed.
func decodeTask(t *testing.T, out string) cliTask {
	t.Helper()
	var ev cliEvent
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &ev); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if ev.Task != nil {
		return *ev.Task
	}
	return ev.cliTask
}

// TestA2A_CLI drives the face with the a2a-go CLI over JSON-RPC and
// HTTP+JSON: discover, a streamed turn, a second message in the context,
// get, cancel of a /sleep turn while subscribed, a subscription after a
// dropped stream, and a refusal without the token.
func TestA2A_CLI(t *testing.T) {
	t.Parallel()
	a2aCLI(t)
	base := wiredServer(t, map[string]string{"SUBAGENTD_TOKENS": "cli:" + a2aToken})
	auth := "--auth=Bearer " + a2aToken

	out := cliRun(t, true, "discover", base+"/a2a/spawn", "-o", "json")
	var card struct {
		Name         string `json:"name"`
		Capabilities struct {
			Streaming bool `json:"streaming"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal([]byte(out), &card); err != nil || card.Name != "spawn" || !card.Capabilities.Streaming {
		t.Fatalf("discover: %v %s", err, out)
	}

	for _, b := range []struct{ name, url string }{
		{"jsonrpc", base + "/a2a/spawn"},
		{"rest", base + "/a2a/spawn/rest"},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			cli := func(args ...string) []string { return append(args, "--transport", b.name, auth, "-o", "json") }

			out := cliRun(t, true, cli("send", b.url, "hello cli", "--stream")...)
			first := readStream(t, strings.NewReader(out), nil)
			if first.task == nil || first.text != "echo: hello cli" || first.final != "TASK_STATE_COMPLETED" {
				t.Fatalf("send --stream printed %+v:\n%s", first, out)
			}
			ctxID := first.task.ContextID

			second := decodeTask(t, cliRun(t, true, cli("send", b.url, "and again", "--context", ctxID)...))
			if second.ContextID != ctxID || second.ID == first.task.ID || second.Status.State != "TASK_STATE_COMPLETED" || second.text() != "echo: and again" {
				t.Fatalf("a second message in the context answered %+v", second)
			}
			if got := decodeTask(t, cliRun(t, true, cli("get", "task", b.url, first.task.ID)...)); got.Status.State != "TASK_STATE_COMPLETED" || got.text() != first.text {
				t.Fatalf("get task answered %+v", got)
			}

			// Cancel a /sleep turn while a subscriber follows it.
			slow := decodeTask(t, cliRun(t, true, cli("send", b.url, "/sleep 30s\nslow", "--context", ctxID, "--immediate")...))
			if slow.Status.State != "TASK_STATE_WORKING" {
				t.Fatalf("send --immediate of a /sleep turn answered %+v", slow)
			}
			sub, subOut := startCLI(t, cli("subscribe", b.url, slow.ID)...)
			dec := json.NewDecoder(subOut)
			subbed := readMore(t, dec, cliStream{}, func(s cliStream) bool { return s.task != nil })
			if subbed.task == nil {
				t.Fatal("the subscriber printed no task")
			}
			if got := decodeTask(t, cliRun(t, true, cli("cancel", b.url, slow.ID)...)); got.Status.State != "TASK_STATE_CANCELED" {
				t.Fatalf("cancel answered %+v", got)
			}
			if s := readMore(t, dec, subbed, nil); s.final != "TASK_STATE_CANCELED" {
				t.Fatalf("the subscriber saw %+v, want it to end cancelled", s)
			}
			if err := sub.Wait(); err != nil {
				t.Fatalf("subscribe: %v", err)
			}

			// A stream dropped mid-task, then a subscription to the task.
			const want1, want2 = "echo: /sleep 3s\nfirst", "echo: /sleep 3s\nsecond"
			stream, streamOut := startCLI(t, cli("send", b.url, "/sleep 3s\nfirst", "--stream")...)
			var steered chan string
			before := readStream(t, streamOut, func(s cliStream) bool {
				if steered == nil && s.task != nil {
					steered = make(chan string, 1)
					go func() {
						// The message to the running task waits until a step takes it.
						steered <- cliRun(t, true, cli("send", b.url, "/sleep 3s\nsecond", "--context", s.task.ContextID, "--task", s.task.ID, "--immediate")...)
					}()
				}
				return s.text == want1
			})
			_ = stream.Process.Kill()
			_ = stream.Wait()
			if before.text != want1 {
				t.Fatalf("before the drop the stream carried %q", before.text)
			}
			if into := decodeTask(t, <-steered); into.ID != before.task.ID {
				t.Fatalf("the message to the running task answered %+v, want task %s", into, before.task.ID)
			}
			after := readStream(t, strings.NewReader(cliRun(t, true, cli("subscribe", b.url, before.task.ID)...)), nil)
			if after.text != want1+want2 || after.final != "TASK_STATE_COMPLETED" {
				t.Fatalf("the subscription printed %q ending %s, want %q, completed", after.text, after.final, want1+want2)
			}

			// Refused with 401 problem+json by the guard; the REST client
			// reports that as a "server error".
			if out := cliRun(t, false, "get", "task", b.url, first.task.ID, "--transport", b.name); strings.Contains(out, first.task.ID+"\n") || strings.Contains(out, "COMPLETED") {
				t.Fatalf("get task without the token printed the task: %s", out)
			}
		})
	}
}

// startCLI starts the CLI with args and returns it with its stdout; the
// test's end kills it.
func startCLI(t *testing.T, args ...string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), a2aCLI(t), args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewReader(out)
}

// TestA2A_NodeClient runs the A2A JavaScript SDK's flow (flow.mjs) against
// the face over JSON-RPC and HTTP+JSON.
func TestA2A_NodeClient(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(filepath.Join(a2aClientDir, "node_modules", "@a2a-js", "sdk", "package.json")); err != nil {
		t.Fatalf("the A2A JavaScript SDK is not installed (%v): run scripts/test, which installs %s with npm ci", err, a2aClientDir)
	}
	// Read here so that go test's cache knows the flow: node reads it in a
	// subprocess, which the cache does not see.
	if _, err := os.ReadFile(filepath.Join(a2aClientDir, "flow.mjs")); err != nil {
		t.Fatal(err)
	}
	base := wiredServer(t, map[string]string{"SUBAGENTD_TOKENS": "node:" + a2aToken})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "flow.mjs", base, a2aToken)
	cmd.Dir = a2aClientDir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "flow ok") {
		t.Fatalf("node flow.mjs: %v\n%s", err, out)
	}
}
