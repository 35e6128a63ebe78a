package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParse_FullFile(t *testing.T) {
	t.Parallel()
	start := t.TempDir()
	if err := os.Mkdir(filepath.Join(start, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := `
providers:
  - name: claude
    type: acp
    command: claude-agent-acp
    args: [--verbose]
    env: {ANTHROPIC_BASE_URL: "http://127.0.0.1:9000"}
    cwd: work
    permission: allow
    disposeEofGrace: 2s
    disposeGrace: 500ms
    idleTimeout: 0s
  - name: gemini_2
    command: gemini
models:
  - name: local
    type: openai
    baseURL: http://127.0.0.1:11434/v1
    apiKeyEnv: OPENAI_API_KEY
    model: llama3.1
    timeout: 2m
    maxRetries: 0
  - name: remote
    model: gpt-x
defaultModel: local
workspaceRoots: [` + start + `]
`
	got, err := parse([]byte(src), start)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	want := &File{
		Providers: []ProviderConfig{{
			Name: "claude", Type: TypeACP, Command: "claude-agent-acp", Args: []string{"--verbose"},
			Env:        map[string]string{"ANTHROPIC_BASE_URL": "http://127.0.0.1:9000"},
			Cwd:        filepath.Join(start, "work"),
			Permission: PermissionAllow, DisposeEOFGrace: 2 * time.Second, DisposeGrace: 500 * time.Millisecond,
		}, {
			Name: "gemini_2", Type: TypeACP, Command: "gemini", Permission: PermissionReject,
			DisposeEOFGrace: DefaultDisposeEOFGrace, DisposeGrace: DefaultDisposeGrace, IdleTimeout: DefaultIdleTimeout,
		}},
		Models: []ModelConfig{{
			Name: "local", Type: TypeOpenAI, BaseURL: "http://127.0.0.1:11434/v1", APIKeyEnv: "OPENAI_API_KEY",
			Model: "llama3.1", Timeout: 2 * time.Minute, MaxRetries: 0,
		}, {
			Name: "remote", Type: TypeOpenAI, Model: "gpt-x", MaxRetries: DefaultMaxRetries,
		}},
		DefaultModel:   "local",
		WorkspaceRoots: []string{start},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parse =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParse_EmptyFileDefaultsRootToStartDirectory(t *testing.T) {
	t.Parallel()
	start := t.TempDir()
	got, err := parse(nil, start)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if !reflect.DeepEqual(got, &File{WorkspaceRoots: []string{start}}) {
		t.Fatalf("parse = %+v", got)
	}
}

func TestParse_Errors(t *testing.T) {
	t.Parallel()
	start := t.TempDir()
	outside := t.TempDir()
	file := filepath.Join(start, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	roots := "workspaceRoots: [" + start + "]\n"

	tests := []struct {
		name string
		src  string
		want string // the complete error text
	}{
		{"unknown top-level key", "providers: []\nprovider: []\n",
			`line 2: unknown field "provider"`},
		{"unknown provider key", "providers:\n  - name: a\n    command: x\n    comand: y\n",
			`line 4: unknown field "comand"`},
		{"unknown model key", "models:\n  - name: m\n    model: x\n    apiKey: sk-1\n",
			`line 4: unknown field "apiKey"`},
		{"syntax error", "providers: {\n",
			`line 1: could not find flow mapping end token '}'`},
		{"wrong shape", "workspaceRoots: 5\n",
			`line 1: int was used where sequence is expected`},
		{"duplicate key", "defaultModel: a\ndefaultModel: b\n",
			`line 2: mapping key "defaultModel" already defined at [1:1]`},
		{"bad provider name", "providers:\n  - name: Claude\n    command: x\n",
			`line 2: providers[0].name: "Claude" must match [a-z0-9][a-z0-9_-]*`},
		{"missing provider name", "providers:\n  - command: x\n",
			`line 2: providers[0].name: is required`},
		{"reserved provider name", "providers:\n  - name: spawn\n    command: x\n",
			`line 2: providers[0].name: "spawn" is a built-in provider`},
		{"duplicate provider", "providers:\n  - name: a\n    command: x\n  - name: a\n    command: y\n",
			`line 4: providers[1].name: duplicate provider name "a"`},
		{"missing command", "providers:\n  - name: a\n",
			`line 2: providers[0].command: is required`},
		{"wrong provider type", "providers:\n  - name: a\n    type: codex\n    command: x\n",
			`line 3: providers[0].type: "codex" is not a provider type (want "acp" or "a2a")`},
		{"a2a without url", "providers:\n  - name: a\n    type: a2a\n",
			`line 2: providers[0].url: is required (the agent card URL)`},
		{"a2a with a bad url", "providers:\n  - name: a\n    type: a2a\n    url: ftp://x.example/card\n",
			`line 4: providers[0].url: "ftp://x.example/card" is not an http(s) URL without credentials`},
		{"a2a with credentials in its url", "providers:\n  - name: a\n    type: a2a\n    url: https://u:p@x.example/card\n",
			`line 4: providers[0].url: "https://u:p@x.example/card" is not an http(s) URL without credentials`},
		{"a2a with a command", "providers:\n  - name: a\n    type: a2a\n    url: https://x.example/\n    command: x\n",
			`line 3: providers[0].type: a provider of type "a2a" takes only name, url and auth`},
		{"a2a with a bad bearerEnv", "providers:\n  - name: a\n    type: a2a\n    url: https://x.example/\n    auth:\n      bearerEnv: 1X\n",
			`line 6: providers[0].auth.bearerEnv: "1X" is not an environment variable name`},
		{"acp with a url", "providers:\n  - name: a\n    command: x\n    url: https://x.example/\n",
			`line 2: providers[0].type: url and auth are for providers of type "a2a"`},
		{"bad permission", "providers:\n  - name: a\n    command: x\n    permission: maybe\n",
			`line 4: providers[0].permission: "maybe" must be "reject", "allow" or "ask"`},
		{"bad rule kind", "providers:\n  - name: a\n    command: x\n    rules:\n      - kind: write\n        decision: ask\n",
			`line 5: providers[0].rules[0].kind: "write" must be one of read, edit, delete, move, search, execute, think, fetch, other`},
		{"missing rule decision", "providers:\n  - name: a\n    command: x\n    rules:\n      - kind: edit\n",
			`line 5: providers[0].rules[0].decision: is required`},
		{"bad rule decision", "providers:\n  - name: a\n    command: x\n    rules:\n      - kind: edit\n        decision: yes\n",
			`line 6: providers[0].rules[0].decision: "yes" must be "allow", "reject" or "ask"`},
		{"bad title pattern", "providers:\n  - name: a\n    command: x\n    rules:\n      - kind: edit\n        titlePattern: \"(\"\n        decision: ask\n",
			"line 6: providers[0].rules[0].titlePattern: \"(\" is not a regular expression: error parsing regexp: missing closing ): `(`"},
		{"unknown rule key", "providers:\n  - name: a\n    command: x\n    rules:\n      - kind: edit\n        decison: ask\n",
			`line 6: unknown field "decison"`},
		{"bad approval timeout", "providers:\n  - name: a\n    command: x\n    permission: ask\n    approvalTimeout: 0s\n",
			`line 5: providers[0].approvalTimeout: "0s" must be a positive duration such as "10m"`},
		{"approval timeout without ask", "providers:\n  - name: a\n    command: x\n    approvalTimeout: 1m\n",
			`line 4: providers[0].approvalTimeout: applies only when permission or a rule is "ask"`},
		{"bad onTimeout", "providers:\n  - name: a\n    command: x\n    permission: ask\n    approvalTimeout: 1m\n    onTimeout: allow\n",
			`line 6: providers[0].onTimeout: "allow" must be "reject" or "cancel"`},
		{"onTimeout without timeout", "providers:\n  - name: a\n    command: x\n    permission: ask\n    onTimeout: cancel\n",
			`line 5: providers[0].onTimeout: needs approvalTimeout`},
		{"zero grace", "providers:\n  - name: a\n    command: x\n    disposeGrace: 0s\n",
			`line 4: providers[0].disposeGrace: "0s" must be a positive duration such as "3s"`},
		{"negative idle timeout", "providers:\n  - name: a\n    command: x\n    idleTimeout: -1s\n",
			`line 4: providers[0].idleTimeout: "-1s" must be a non-negative duration such as "5m"`},
		{"bad grace", "providers:\n  - name: a\n    command: x\n    disposeEofGrace: soon\n",
			`line 4: providers[0].disposeEofGrace: "soon" must be a positive duration such as "3s"`},
		{"empty cwd", roots + "providers:\n  - name: a\n    command: x\n    cwd: \"\"\n",
			`line 5: providers[0].cwd: must not be empty (omit it to use the parent session's cwd)`},
		{"missing cwd", roots + "providers:\n  - name: a\n    command: x\n    cwd: nope\n",
			`line 5: providers[0].cwd: "` + filepath.Join(start, "nope") + `" does not exist`},
		{"cwd is a file", roots + "providers:\n  - name: a\n    command: x\n    cwd: file\n",
			`line 5: providers[0].cwd: "` + file + `" is not a directory`},
		{"cwd outside roots", roots + "providers:\n  - name: a\n    command: x\n    cwd: " + outside + "\n",
			`line 5: providers[0].cwd: "` + outside + `" is outside the workspace roots`},
		{"bad env name", "providers:\n  - name: a\n    command: x\n    env: {\"A=B\": c}\n",
			`line 4: providers[0].env: "A=B" is not an environment variable name`},
		{"relative root", "workspaceRoots: [/srv, work]\n",
			`line 1: workspaceRoots[1]: "work" is not an absolute path`},
		{"model name", "models:\n  - name: echo\n    model: x\n",
			`line 2: models[0].name: "echo" is the built-in model`},
		{"duplicate model", "models:\n  - name: m\n    model: x\n  - name: m\n    model: y\n",
			`line 4: models[1].name: duplicate model name "m"`},
		{"missing model id", "models:\n  - name: m\n",
			`line 2: models[0].model: is required`},
		{"model type", "models:\n  - name: m\n    type: anthropic\n    model: x\n",
			`line 3: models[0].type: "anthropic" is not a model type (want "openai")`},
		{"base url", "models:\n  - name: m\n    model: x\n    baseURL: localhost:11434\n",
			`line 4: models[0].baseURL: "localhost:11434" is not an http(s) URL`},
		{"api key env", "models:\n  - name: m\n    model: x\n    apiKeyEnv: sk-123\n",
			`line 4: models[0].apiKeyEnv: "sk-123" is not an environment variable name`},
		{"timeout", "models:\n  - name: m\n    model: x\n    timeout: -1s\n",
			`line 4: models[0].timeout: "-1s" must be a non-negative duration such as "2m"`},
		{"retries", "models:\n  - name: m\n    model: x\n    maxRetries: -1\n",
			`line 4: models[0].maxRetries: -1 must not be negative`},
		{"default model", "defaultModel: gpt\n",
			`line 1: defaultModel: "gpt" is not a configured model (nor "echo")`},
		{"several problems are all reported", "providers:\n  - name: A\n  - name: b\n    command: x\n    permission: no\n",
			"line 2: providers[0].name: \"A\" must match [a-z0-9][a-z0-9_-]*\n" +
				"line 2: providers[0].command: is required\n" +
				`line 5: providers[1].permission: "no" must be "reject", "allow" or "ask"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parse([]byte(tt.src), start)
			if err == nil {
				t.Fatalf("parse succeeded, want %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Fatalf("error =\n%s\nwant\n%s", err, tt.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Line == 0 {
				t.Fatalf("error %v carries no *Error with a line", err)
			}
		})
	}
}

func TestParse_EchoIsAValidDefaultModel(t *testing.T) {
	t.Parallel()
	f, err := parse([]byte("defaultModel: echo\n"), t.TempDir())
	if err != nil || f.DefaultModel != EchoModel {
		t.Fatalf("parse = %+v, %v", f, err)
	}
}

func TestParse_CwdThroughSymlinkOutOfRootsIsRejected(t *testing.T) {
	t.Parallel()
	start := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(start, "link")); err != nil {
		t.Fatal(err)
	}
	_, err := parse([]byte("providers:\n  - name: a\n    command: x\n    cwd: link\n"), start)
	if err == nil || !strings.Contains(err.Error(), "is outside the workspace roots") {
		t.Fatalf("err = %v, want outside the workspace roots", err)
	}
}

func TestLoad_ResolvesRelativeCwdAgainstStartDirectory(t *testing.T) {
	start := t.TempDir()
	if err := os.Mkdir(filepath.Join(start, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "subagentd.yaml")
	if err := os.WriteFile(path, []byte("providers:\n  - name: a\n    command: x\n    cwd: ./work\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(start)
	f, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(wd, "work"); f.Providers[0].Cwd != want {
		t.Fatalf("cwd = %q, want %q", f.Providers[0].Cwd, want)
	}
	if !reflect.DeepEqual(f.WorkspaceRoots, []string{wd}) {
		t.Fatalf("roots = %v, want [%s]", f.WorkspaceRoots, wd)
	}
}

func TestLoad_ErrorNamesFileAndLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "subagentd.yaml")
	if err := os.WriteFile(path, []byte("providers: []\nbogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	want := "config " + path + `: line 2: unknown field "bogus"`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v, want ErrNotExist", err)
	}
}

func TestResolveWorkdir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	sub := filepath.Join(root, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	sibling := root + "-sibling" // shares the root's prefix but lies outside it
	if err := os.Mkdir(sibling, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sibling) })
	tests := []struct {
		dir  string
		want string // "" = accepted
	}{
		{root, ""},
		{sub, ""},
		{"sub", `"sub" is not an absolute path`},
		{sibling, `"` + sibling + `" is outside the workspace roots`},
		{filepath.Join(root, "none"), `"` + filepath.Join(root, "none") + `" does not exist`},
	}
	for _, tt := range tests {
		_, err := ResolveWorkdir(tt.dir, []string{root})
		if got := errText(err); got != tt.want {
			t.Errorf("ResolveWorkdir(%q) = %q, want %q", tt.dir, got, tt.want)
		}
	}
	// The path returned is the one checked: links resolved.
	link := filepath.Join(root, "link")
	if err := os.Symlink(sub, link); err != nil {
		t.Fatal(err)
	}
	real, err := ResolveWorkdir(link, []string{root})
	want, _ := filepath.EvalSymlinks(sub)
	if err != nil || real != want {
		t.Errorf("ResolveWorkdir(%q) = %q, %v; want %q", link, real, err, want)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A command given as a relative path is pinned to the start directory at
// load: resolved later it would follow the child's cwd, which a client
// picks. A bare name is left to PATH.
func TestParse_RelativeCommandIsPinnedToTheStartDirectory(t *testing.T) {
	t.Parallel()
	start := t.TempDir()
	got, err := parse([]byte("providers:\n  - name: a\n    command: ./bin/agent\n  - name: b\n    command: claude-agent-acp\n"), start)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if want := filepath.Join(start, "bin", "agent"); got.Providers[0].Command != want {
		t.Fatalf("command = %q, want %q", got.Providers[0].Command, want)
	}
	if got.Providers[1].Command != "claude-agent-acp" {
		t.Fatalf("bare command = %q, want it unchanged", got.Providers[1].Command)
	}
}

// subagent_<name> must stay a valid OpenAI tool name (64 characters).
func TestParse_ProviderNameLeavesRoomForItsToolName(t *testing.T) {
	t.Parallel()
	name := strings.Repeat("a", 56)
	_, err := parse([]byte("providers:\n  - name: "+name+"\n    command: x\n"), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "longer than 55 characters") {
		t.Fatalf("parse with a 56-character provider name: %v", err)
	}
}

func TestParse_EmptyWorkspaceRootsIsAnError(t *testing.T) {
	t.Parallel()
	if _, err := parse([]byte("workspaceRoots: []\n"), t.TempDir()); err == nil || !strings.Contains(err.Error(), "at least one directory") {
		t.Fatalf("parse with workspaceRoots: []: %v", err)
	}
}

func TestParse_PermissionRules(t *testing.T) {
	t.Parallel()
	src := "providers:\n  - name: a\n    command: x\n    permission: ask\n    approvalTimeout: 2m\n    onTimeout: cancel\n    rules:\n" +
		"      - {kind: read, decision: allow}\n" +
		"      - {kind: edit, titlePattern: '\\.md$', decision: allow}\n" +
		"      - {kind: execute, decision: reject}\n"
	f, err := parse([]byte(src), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pc := f.Providers[0]
	if pc.ApprovalTimeout != 2*time.Minute || pc.OnTimeout != OnTimeoutCancel || len(pc.Rules) != 3 || !pc.MayAsk() {
		t.Fatalf("provider = %+v", pc)
	}
	for _, tc := range []struct{ kind, title, want string }{
		{"read", "Read a.go", PermissionAllow},
		{"edit", "Write notes.md", PermissionAllow},
		{"edit", "Write main.go", PermissionAsk},
		{"execute", "rm -rf /", PermissionReject},
		{"", "untitled", PermissionAsk},
	} {
		if got := pc.PermissionFor(tc.kind, tc.title); got != tc.want {
			t.Errorf("PermissionFor(%q, %q) = %q, want %q", tc.kind, tc.title, got, tc.want)
		}
	}
	def, err := parse([]byte("providers:\n  - name: a\n    command: x\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if p := def.Providers[0]; p.MayAsk() || p.PermissionFor("edit", "x") != PermissionReject || p.OnTimeout != "" {
		t.Fatalf("default provider = %+v, want reject and no approvals", p)
	}
}

func TestParse_A2AProvider(t *testing.T) {
	t.Parallel()
	f, err := Parse([]byte("providers:\n  - name: remote\n    type: a2a\n    url: https://agents.example/.well-known/agent-card.json\n    auth:\n      bearerEnv: REMOTE_TOKEN\n  - name: open\n    type: a2a\n    url: http://10.0.0.7:8080/\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []ProviderConfig{
		{Name: "remote", Type: TypeA2A, URL: "https://agents.example/.well-known/agent-card.json", BearerEnv: "REMOTE_TOKEN"},
		{Name: "open", Type: TypeA2A, URL: "http://10.0.0.7:8080/"},
	}
	if !reflect.DeepEqual(f.Providers, want) {
		t.Fatalf("providers = %+v, want %+v", f.Providers, want)
	}
}
