// Package clients checks api/openapi.yaml with the tools a user points at
// it: Redocly CLI lints it, and openapi-typescript (with openapi-fetch),
// @hey-api/openapi-ts and oapi-codegen generate clients from it that must
// compile and complete one flow against a live server.
//
// The npm tools are pinned in package.json and package-lock.json here;
// scripts/test installs them (npm ci). oapi-codegen is pinned below and run
// by the go command.
package clients

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// oapiCodegen is the oapi-codegen the Go client is generated with, and the
// module versions its output is built against.
const (
	oapiCodegen    = "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"
	oapiRuntime    = "github.com/oapi-codegen/runtime v1.9.0"
	oapiYAML       = "go.yaml.in/yaml/v3 v3.0.4"
	commandTimeout = 5 * time.Minute
)

// spec is the document under test, relative to this directory.
const spec = "../openapi.yaml"

// TestLint_Redocly: Redocly CLI reports no errors (warnings are allowed;
// ../redocly.yaml says which rules are relaxed and why).
func TestLint_Redocly(t *testing.T) {
	t.Parallel()
	trackSources(t)
	out := run(t, ".", npmTool(t, "redocly"), "lint", spec, "--config", "../redocly.yaml", "--format", "summary")
	if !strings.Contains(out, "Your API description is valid") {
		t.Fatalf("redocly lint did not call the document valid:\n%s", out)
	}
}

// TestGeneratedClients generates each client, compiles it and runs one flow
// (create a session, run with wait, get the run, dispose it) against a
// subagentd process.
func TestGeneratedClients(t *testing.T) {
	base := startServer(t)
	t.Run("openapi-typescript+openapi-fetch", func(t *testing.T) {
		t.Parallel()
		dir := tsDir(t, "flow_openapi_fetch.ts")
		// A .ts (not .d.ts) output, so the compiler checks it too.
		run(t, dir, npmTool(t, "openapi-typescript"), abs(t, spec), "-o", filepath.Join(dir, "schema.ts"))
		runTS(t, dir, "flow_openapi_fetch.js", base)
	})
	t.Run("hey-api", func(t *testing.T) {
		t.Parallel()
		dir := tsDir(t, "flow_hey_api.ts")
		run(t, dir, npmTool(t, "openapi-ts"), "-i", abs(t, spec), "-o", filepath.Join(dir, "hey"))
		runTS(t, dir, "flow_hey_api.js", base)
	})
	t.Run("oapi-codegen", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		copyFile(t, "testdata/go/flow.go", filepath.Join(dir, "flow.go"))
		gomod := "module flow\n\ngo 1.26\n\nrequire (\n\t" + oapiRuntime + "\n\t" + oapiYAML + "\n)\n"
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, dir, "go", "run", oapiCodegen, "-generate", "types,client", "-package", "main", "-o", "client.gen.go", abs(t, spec))
		run(t, dir, "go", "mod", "tidy")
		run(t, dir, "go", "build", "-o", "flow", ".")
		if out := run(t, dir, filepath.Join(dir, "flow"), base); !strings.Contains(out, "flow ok") {
			t.Fatalf("flow: %s", out)
		}
	})
}

// tsDir is a fresh directory holding the tsconfig, the flow file and a link
// to the installed npm packages.
func tsDir(t *testing.T, flow string) string {
	t.Helper()
	dir := t.TempDir()
	copyFile(t, "testdata/tsconfig.json", filepath.Join(dir, "tsconfig.json"))
	copyFile(t, filepath.Join("testdata", flow), filepath.Join(dir, flow))
	if err := os.Symlink(abs(t, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runTS compiles every .ts file in dir (the generated client with it) and
// runs the compiled flow against base.
func runTS(t *testing.T, dir, flow, base string) {
	t.Helper()
	run(t, dir, npmTool(t, "tsc"), "-p", "tsconfig.json")
	if out := run(t, dir, "node", filepath.Join("out", flow), base); !strings.Contains(out, "flow ok") {
		t.Fatalf("flow: %s", out)
	}
}

// npmTool returns the path of an installed npm tool, failing with what to
// do when it is missing.
func npmTool(t *testing.T, name string) string {
	t.Helper()
	path := abs(t, filepath.Join("node_modules", ".bin", name))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is not installed (%v): run scripts/test, which installs api/clients' npm packages with npm ci", name, err)
	}
	return path
}

// run runs name in dir with a bounded time and returns its combined
// output; a failure fails the test with that output.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// startServer builds cmd/api, starts it on a free loopback port with the
// in-memory store and the echo model, and returns its base URL. The
// process is stopped with SIGTERM when the test ends.
func startServer(t *testing.T) string {
	t.Helper()
	trackSources(t)
	bin := filepath.Join(t.TempDir(), "subagentd")
	run(t, "../..", "go", "build", "-o", bin, "./cmd/api")
	cmd := exec.Command(bin)
	cmd.Dir = t.TempDir() // the workspace root
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SUBAGENTD_ADDR=127.0.0.1:0"}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("subagentd: %v", err)
		}
	})
	addr := make(chan string, 1)
	go func() {
		defer close(addr)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				addr <- rec.Addr
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout) // keep the log flowing
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatal("subagentd exited before it listened")
		}
		return "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("subagentd did not listen within 30 s")
		return ""
	}
}

// trackSources reads every source file of the repository. go test caches a
// result by the files the test process itself opens; the spec and the
// server reach these tests only through subprocesses, so without this a
// change to them would leave a stale cached pass.
func trackSources(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		_, err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func abs(t *testing.T, path string) string {
	t.Helper()
	p, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
