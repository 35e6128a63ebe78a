package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
)

// logLines collects the JSON log records run writes.
type logLines struct {
	w     *io.PipeWriter
	lines chan map[string]any
}

func newLogLines(t *testing.T) *logLines {
	r, w := io.Pipe()
	l := &logLines{w: w, lines: make(chan map[string]any, 100)}
	go func() {
		defer close(l.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			var rec map[string]any
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				rec = map[string]any{"msg": "not JSON: " + sc.Text()}
			}
			l.lines <- rec
		}
	}()
	return l
}

// until returns the first record with message msg, failing after a while.
func (l *logLines) until(t *testing.T, msg string) map[string]any {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case rec, ok := <-l.lines:
			if !ok {
				t.Fatalf("log ended before %q", msg)
			}
			if rec["msg"] == msg {
				return rec
			}
		case <-timeout:
			t.Fatalf("no %q in the log", msg)
		}
	}
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestRun_ServesAndShutsDown starts the server on a free port, uses it,
// and stops it: streams end, run returns nil.
func TestRun_ServesAndShutsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	logs := newLogLines(t)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, nil, env(map[string]string{"SUBAGENTD_ADDR": "127.0.0.1:0"}), logs.w)
		logs.w.Close()
	}()
	logs.until(t, "DATABASE_URL is not set: sessions, runs and events live in memory and are lost when the process exits")
	addr := logs.until(t, "listening")["addr"].(string)
	base := "http://" + addr

	resp, err := http.Get(base + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Post(base+"/v1/sessions", "application/json", strings.NewReader(`{"label":"x"}`))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create session: %v %v", resp, err)
	}
	resp.Body.Close()
	stream, err := http.Get(base + "/v1/events?after=0")
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("events: %v %v", stream, err)
	}
	defer stream.Body.Close()
	if resp, err := http.Get(base + "/"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("dashboard: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	cancel()
	if _, err := io.Copy(io.Discard, stream.Body); err != nil {
		t.Fatalf("event stream did not end cleanly: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(shutdownGrace):
		t.Fatal("run did not return")
	}
	for rec := range logs.lines {
		if rec["msg"] == "stopped" {
			return
		}
	}
	t.Fatal(`no "stopped" in the log`)
}

func TestLoadConfig_FlagsMirrorEnv(t *testing.T) {
	cfg, err := loadConfig([]string{"-addr", "0.0.0.0:9000"}, env(map[string]string{
		"SUBAGENTD_ADDR": "127.0.0.1:1", "SUBAGENTD_MODEL": "llama3.1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.get("SUBAGENTD_ADDR") != "0.0.0.0:9000" || cfg.get("SUBAGENTD_MODEL") != "llama3.1" || cfg.get("DATABASE_URL") != "" {
		t.Fatalf("config = %v", cfg)
	}
	if cfg, _ := loadConfig(nil, env(nil)); cfg.get("SUBAGENTD_ADDR") != "127.0.0.1:8080" {
		t.Fatalf("default addr %q", cfg.get("SUBAGENTD_ADDR"))
	}
	var bad usageError
	if _, err := loadConfig([]string{"-bogus"}, env(nil)); !errors.As(err, &bad) {
		t.Fatalf("unknown flag: %v, want a usage error", err)
	}
	if _, err := loadConfig([]string{"extra"}, env(nil)); !errors.As(err, &bad) {
		t.Fatalf("stray argument: %v, want a usage error", err)
	}
	if _, err := loadConfig([]string{"-h"}, env(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	if _, err := loadConfig([]string{"-version"}, env(nil)); !errors.Is(err, errVersion) {
		t.Fatalf("-version: %v, want errVersion", err)
	}
}

// TestVersion_Stamped: a version stamped with -ldflags -X main.version
// wins over what the build recorded, which is never empty.
func TestVersion_Stamped(t *testing.T) {
	if v := versionOr("v1.2.3"); v != "v1.2.3" {
		t.Fatalf("stamped version reported as %q", v)
	}
	if v := versionOr(""); v == "" {
		t.Fatal("an unstamped build reports no version")
	}
}

// TestCLI runs the binary as a newcomer would: -h explains every flag and
// exits 0, a bad flag says what is wrong and where the usage is and exits
// 2, a bad value is reported under the name it was given, -version prints
// the build's version, a fatal start-up error is one JSON log record and
// exits 1.
func TestCLI(t *testing.T) {
	bin := binary(t)
	cliEnv := func(env []string, args ...string) (stdout, stderr string, code int) {
		var out, errOut strings.Builder
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}
	cli := func(args ...string) (stdout, stderr string, code int) { return cliEnv(nil, args...) }

	out, _, code := cli("-h")
	if code != 0 {
		t.Fatalf("-h exited %d", code)
	}
	for _, s := range settings {
		if !strings.Contains(out, "-"+s.flag+" ") || !strings.Contains(out, "$"+s.env+" ") || !strings.Contains(out, s.usage) {
			t.Errorf("-h does not explain -%s / $%s:\n%s", s.flag, s.env, out)
		}
	}
	if !strings.Contains(out, "(default: 127.0.0.1:8080)") {
		t.Errorf("-h does not show the address default:\n%s", out)
	}

	_, errOut, code := cli("-bogus")
	if code != 2 || !strings.Contains(errOut, "-bogus") || !strings.Contains(errOut, "run 'subagentd -h'") ||
		strings.Contains(errOut, "Usage:") || strings.Count(errOut, "\n") != 2 {
		t.Fatalf("-bogus exited %d with %q; want the mistake and where the usage is, on two lines", code, errOut)
	}

	// A bad value is named as it was given: the flag, or the variable.
	out, _, code = cli("-lease-ttl", "10ms")
	if code != 1 || !strings.Contains(out, `-lease-ttl: want a Go duration`) || strings.Contains(out, "SUBAGENTD_LEASE_TTL:") {
		t.Fatalf("-lease-ttl 10ms exited %d, logged %q; want the error under -lease-ttl", code, out)
	}
	out, _, code = cliEnv([]string{"SUBAGENTD_LEASE_TTL=10ms"})
	if code != 1 || !strings.Contains(out, `SUBAGENTD_LEASE_TTL: want a Go duration`) {
		t.Fatalf("SUBAGENTD_LEASE_TTL=10ms exited %d, logged %q; want the error under the variable", code, out)
	}

	out, errOut, code = cli("-version")
	if code != 0 || errOut != "" || !regexp.MustCompile(`^subagentd \S+\n$`).MatchString(out) {
		t.Fatalf("-version exited %d with %q %q", code, out, errOut)
	}
	// What the go command recorded in the binary: the main module's
	// version, else the VCS revision (a worktree's build records neither).
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	want := "dev"
	if m := regexp.MustCompile(`(?m)^\tmod\t\S+\t(\S+)`).FindSubmatch(meta); m != nil && string(m[1]) != "(devel)" {
		want = string(m[1])
	} else if m := regexp.MustCompile(`(?m)^\tbuild\tvcs\.revision=(\S+)`).FindSubmatch(meta); m != nil {
		want = string(m[1])
	}
	if !strings.HasPrefix(out, "subagentd "+want) {
		t.Fatalf("-version of an unstamped build says %q; want %s, from:\n%s", out, want, meta)
	}

	out, errOut, code = cli("-addr", "127.0.0.1:notaport")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || code != 1 || errOut != "" {
		t.Fatalf("bad address exited %d, stderr %q, last line %q", code, errOut, lines[len(lines)-1])
	}
	if last["level"] != "ERROR" || !strings.Contains(fmt.Sprint(last["error"]), "notaport") {
		t.Fatalf("fatal record %v", last)
	}
}

func TestRun_BadAddress(t *testing.T) {
	logs := newLogLines(t)
	defer logs.w.Close()
	go func() {
		for range logs.lines {
		}
	}()
	if err := run(t.Context(), []string{"-addr", "127.0.0.1:notaport"}, env(nil), logs.w); err == nil {
		t.Fatal("run listened on a bad address")
	}
}

func settingNames() []string {
	var names []string
	for _, s := range settings {
		names = append(names, s.env)
	}
	return names
}

// TestCompose_SetsOnlyReadVariables: compose.yaml runs at least two
// replicas (services api-…), each with a DATABASE_URL, its own
// SUBAGENTD_REPLICA_ID and only variables the server reads, and its proxy
// sends requests to every one of them.
func TestCompose_SetsOnlyReadVariables(t *testing.T) {
	data, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
		Configs map[string]struct {
			Content string `yaml:"content"`
		} `yaml:"configs"`
	}
	if err := yaml.Unmarshal(data, &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	proxy := compose.Configs["haproxy"].Content
	ids := map[string]string{}
	for name, svc := range compose.Services {
		if !strings.HasPrefix(name, "api-") {
			continue
		}
		for v := range svc.Environment {
			if !slices.Contains(settingNames(), v) {
				t.Errorf("compose.yaml sets %s for %s, which the server does not read", v, name)
			}
		}
		if svc.Environment["DATABASE_URL"] == "" {
			t.Errorf("compose.yaml does not give %s a DATABASE_URL", name)
		}
		id := svc.Environment["SUBAGENTD_REPLICA_ID"]
		if other, dup := ids[id]; id == "" || dup {
			t.Errorf("%s has replica id %q (also %q's): want a unique one", name, id, other)
		}
		ids[id] = name
		if !strings.Contains(proxy, "server "+name+" "+name+":8080") {
			t.Errorf("the proxy's backend does not list %s", name)
		}
	}
	if len(ids) < 2 {
		t.Errorf("compose.yaml runs %d replicas, want two", len(ids))
	}
}

// TestREADME_ConfigurationTable: the README's table lists exactly the
// variables the server reads.
func TestREADME_ConfigurationTable(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z0-9_]+)` \\|").FindAllStringSubmatch(string(data), -1) {
		listed = append(listed, m[1])
	}
	want := settingNames()
	slices.Sort(listed)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("README lists %v, the server reads %v", listed, want)
	}
}

// TestREADME_TestCommandIsWhatCIRuns: the README's test command is
// scripts/test, and .ci/run ends by running exactly that, so a missing
// install step fails CI as it would fail a newcomer.
func TestREADME_TestCommandIsWhatCIRuns(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile("(?m)^scripts/test +#").Match(readme) {
		t.Error("the README's first code block does not give scripts/test as the test command")
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	if last := lines[len(lines)-1]; last != "exec bash scripts/test" {
		t.Errorf(".ci/run ends with %q, want it to run the README's test command", last)
	}
}
