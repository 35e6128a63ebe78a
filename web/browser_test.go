package web_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is where Debian's chromium package installs the browser;
// SUBAGENTD_CHROMIUM overrides it.
const chromiumPath = "/usr/bin/chromium"

// waitTimeout bounds every DOM condition a test waits for.
const waitTimeout = 30 * time.Second

// browser is one headless chromium tab driven by a test.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// shared is the one chromium process the tests of this package open their
// tabs in: starting a browser costs more than a test on a small machine.
var shared struct {
	once   sync.Once
	ctx    context.Context // the browser's first tab; parent of every test's tab
	err    error
	cancel func()
}

// TestMain stops the shared browser after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.cancel != nil {
		shared.cancel()
	}
	os.Exit(code)
}

// startBrowser starts the shared headless chromium (own user-data-dir, no
// background network, NoSandbox when running as root) once.
func startBrowser() (context.Context, error) {
	shared.once.Do(func() {
		path := chromiumPath
		if p := os.Getenv("SUBAGENTD_CHROMIUM"); p != "" {
			path = p
		}
		if _, err := os.Stat(path); err != nil {
			shared.err = fmt.Errorf("chromium is required for the dashboard tests and was not found at %s (%w); "+
				"install it with `apt-get install -y chromium` or set SUBAGENTD_CHROMIUM", path, err)
			return
		}
		dir, err := os.MkdirTemp("", "subagentd-web-chromium-")
		if err != nil {
			shared.err = fmt.Errorf("chromium user-data-dir: %w", err)
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path),
			chromedp.UserDataDir(dir),
			chromedp.DisableGPU,
			chromedp.NoFirstRun,
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.WindowSize(1280, 800),
		)
		if os.Geteuid() == 0 {
			opts = append(opts, chromedp.NoSandbox)
		}
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelBrowser := chromedp.NewContext(actx)
		shared.ctx = ctx
		shared.cancel = func() {
			cancelBrowser()
			cancelAlloc()
			os.RemoveAll(dir)
		}
		if err := chromedp.Do(ctx); err != nil {
			shared.err = fmt.Errorf("starting chromium at %s: %w", path, err)
		}
	})
	return shared.ctx, shared.err
}

// newBrowser opens a tab of the shared browser in a browser context of its
// own (no cookies, storage or cache shared with other tests), with a
// 1280×800 viewport. A missing browser fails the test with instructions:
// these tests never skip. Uncaught page exceptions fail the test; console
// output goes to the test log. Tabs live in windows of their own, so tests
// may run in parallel and each page gets animation frames.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	parent, err := startBrowser()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancelTab := chromedp.NewContext(parent, chromedp.WithNewBrowserContext())
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)

	// Console subscribes before the first navigation, so nothing is lost.
	messages := chromedp.Console(ctx)
	consoleDone := make(chan struct{})
	go func() {
		defer close(consoleDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException {
				t.Errorf("uncaught exception in the page: %s (%s:%d)", m.Text, m.URL, m.Line)
				continue
			}
			t.Logf("console.%s: %s", m.Type, m.Text)
		}
	}()
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		<-consoleDone
	})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("opening a chromium tab: %v", err)
	}
	return &browser{t: t, ctx: ctx}
}

// do runs actions and fails the test on error, saying what it was doing.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.fail(what, err)
	}
}

// click clicks, with the pointer, the element sel matches. The page
// redraws parts of itself as data arrives, so the node found may be
// replaced before the click reaches it; the click is then aimed again at
// the node in its place, as a person's next click would be (three tries).
func (b *browser) click(what, sel string) {
	b.t.Helper()
	var err error
	for range 3 {
		err = chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(sel)))
		if err == nil || !strings.Contains(err.Error(), "Could not find node with given id") {
			break
		}
	}
	if err != nil {
		b.fail(what, err)
	}
}

// waitFor polls a JavaScript condition until it is truthy.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(waitTimeout))); err != nil {
		b.fail("waiting until "+what, err)
	}
}

// eval evaluates expr (awaiting a promise) and decodes its value.
func eval[T any](b *browser, what, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.fail(what, err)
	}
	return v
}

// fail saves a screenshot of the failing page and stops the test.
func (b *browser) fail(what string, err error) {
	b.t.Helper()
	b.screenshot("failure")
	b.t.Fatalf("%s: %v", what, err)
}

// screenshot saves the visible page as <artifacts>/<test>-<name>.png. It
// works also after the test's browser context timed out.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), 10*time.Second)
	defer cancel()
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.save(name, shot)
}

func (b *browser) save(name string, png []byte) {
	b.t.Helper()
	path := filepath.Join(artifactDir(b.t), fmt.Sprintf("%s-%s.png", fileSafe(b.t.Name()), name))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Errorf("writing screenshot: %v", err)
		return
	}
	b.t.Logf("screenshot: %s", path)
}

// artifactDir is SUBAGENTD_ARTIFACTS (created when missing), else the
// test's temporary directory.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SUBAGENTD_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("creating SUBAGENTD_ARTIFACTS %s: %v", dir, err)
	}
	return dir
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func fileSafe(s string) string { return strings.Trim(unsafeChars.ReplaceAllString(s, "_"), "_") }

// jsString quotes s as a JavaScript string literal for use in an expression.
func jsString(s string) string { return fmt.Sprintf("%q", s) }
