package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"

	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/store"
)

// postJSON sends body to path and decodes the answer into v.
func (s *testServer) postJSON(t *testing.T, path string, body, v any) {
	t.Helper()
	// A client of its own: CloseClientConnections must not cut this request.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := client.Post(s.URL+path, "application/json", bytes.NewReader(rawJSON(t, body)))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %s", path, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatalf("POST %s: decoding: %v", path, err)
	}
}

// runToEnd starts a one-shot spawn run under parent through the API and
// waits until it settled; it returns the child session id.
func (s *testServer) runToEnd(t *testing.T, parent, label string) string {
	t.Helper()
	var run struct {
		ChildSessionID string `json:"childSessionId"`
		State          string `json:"state"`
	}
	s.postJSON(t, "/v1/runs?wait=true", map[string]any{"provider": "spawn", "parentSessionId": parent, "label": label,
		"prompt": []map[string]string{{"type": "text", "text": "hello " + label}}}, &run)
	if run.State != "settled" {
		t.Fatalf("run %s is %s after waiting, want settled", label, run.State)
	}
	return run.ChildSessionID
}

// TestDashboard_ReconnectResumesWithoutReloadingHistory drops the page's
// streams twice while runs start and end — once EventSource reconnects by
// itself with Last-Event-ID, once the streams are refused so the page
// recreates them with ?after=<cursor> — and checks that every run shows up
// while the page never lists sessions or runs again: the history was loaded
// once, and a reconnect costs the events missed, not the whole history.
func TestDashboard_ReconnectResumesWithoutReloadingHistory(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	sd := srv.seeder(t)
	for i := range 20 {
		sd.root(fmt.Sprintf("history %02d", i), time.Now().Add(-time.Duration(i)*time.Hour))
	}
	var root struct {
		ID string `json:"id"`
	}
	srv.postJSON(t, "/v1/sessions", map[string]any{"label": "live"}, &root)
	b := newBrowser(t)
	openDashboard(b, srv.URL)
	b.waitFor("the history is listed and the baseline read", `document.querySelectorAll('[data-testid="node"]').length === 21 && document.querySelector('#tree').getAttribute('aria-busy') === 'false'`)
	first := srv.runToEnd(t, root.ID, "first")
	b.waitFor("the first run is shown settled", nodeIn(first, "completed"))
	lists := srv.lists.Load()
	streams := srv.streams.Load()

	srv.CloseClientConnections()
	second := srv.runToEnd(t, root.ID, "second")
	b.waitFor("the run that ended during the drop is shown settled", nodeIn(second, "completed"))

	srv.refuseStreams(true)
	srv.CloseClientConnections()
	b.waitFor("the page says it is offline", `document.querySelector('#conn').dataset.state === 'offline'`)
	third := srv.runToEnd(t, root.ID, "third")
	srv.refuseStreams(false)
	b.waitFor("the run that ended while streams were refused is shown settled", nodeIn(third, "completed")+` && `+connConnected)

	if got := srv.streams.Load(); got <= streams+1 {
		t.Errorf("stream requests went from %d to %d: the page did not reconnect", streams, got)
	}
	if got := srv.lists.Load(); got != lists {
		t.Errorf("the page listed sessions or runs %d more times after reconnecting; it must resume from the stream's cursor", got-lists)
	}
	b.screenshot("resumed")
}

// TestDashboard_ScaleThousandSessionsTenThousandEvents opens a tree of
// 1,000 sessions with the transcript of a 10,000-event session selected and
// measures, in the browser, when each is first drawn (checked on every
// animation frame: the tree's first page of 100 sessions, all 1,000, the
// transcript's end) and the time from appending one live event on the
// server to seeing it on the page, and, for the machine's floor, when a
// bare page from the same server is first painted.
// The numbers are logged (bench/ tracks performance); the test asserts that
// everything is shown, not how fast.
func TestDashboard_ScaleThousandSessionsTenThousandEvents(t *testing.T) {
	t.Parallel()
	srv := startServer(t, scripted.New())
	sd := srv.seeder(t)
	t0 := time.Now().Add(-time.Hour)
	root := sd.root("big tree", t0)
	var long string
	sessions := 1
	for i := 0; sessions < 1000; i++ {
		mid := sd.child(root, "spawn", "continuable", fmt.Sprintf("team %02d", i), t0.Add(time.Duration(sessions)*time.Millisecond))
		sd.run(seedRun{child: mid, parent: root, provider: "spawn", taskID: newID("task"), start: t0.Add(time.Second), end: t0.Add(2 * time.Second), stop: "completed"})
		sessions++
		for j := 0; j < 49 && sessions < 1000; j++ {
			c := sd.child(mid, "spawn", "one-shot", fmt.Sprintf("worker %02d.%02d", i, j), t0.Add(time.Duration(sessions)*time.Millisecond))
			sd.run(seedRun{child: c, parent: mid, provider: "spawn", start: t0.Add(time.Second), end: t0.Add(3 * time.Second), stop: "completed", output: "ok"})
			sessions++
			if long == "" {
				long = c
			}
		}
	}
	var evs []event
	for n := 1; n <= 1000; n++ {
		tr := turn(n, fmt.Sprintf("question %d", n), fmt.Sprintf("answer %d", n), 10, 5)
		// 10 events a turn: two more chunks before the message.
		chunk := tr[3]
		evs = append(evs, tr[0], tr[1], tr[2], chunk, chunk, chunk, tr[4], tr[5], tr[6])
		evs = append(evs, ev("agent/inbox/spliced", map[string]any{"outcome": "none", "target": "next-step"}))
	}
	for i := 0; i < len(evs); i += 1000 {
		sd.events(long, t0.Add(time.Duration(i)*time.Millisecond), evs[i:i+1000]...)
	}

	b := newBrowser(t)
	b.do("recording when each SSE event reaches the page, and when each view is first drawn", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		// The renderer's busy time, which a loaded machine stretches less
		// than the clock, and its CPU time, which it stretches least.
		if _, err := cdp.Call(ctx, tg, performance.Enable, performance.EnableParams{}); err != nil {
			return err
		}
		for _, src := range []string{recordSSE, recordDrawn} {
			if _, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: src}); err != nil {
				return err
			}
		}
		return nil
	}))
	// The goal times the first draw of both views: the CPU time until then
	// is read from readings taken while the page loads.
	cpu := sampleCPU(b)
	b.do("opening the dashboard on the long session", chromedp.Navigate(srv.URL+"/#s="+long))
	_ = pollValue[float64](b, "the tree's first page and the transcript's end are drawn", `window.__drawn.treeFirst && window.__drawn.conv`)
	firstDrawn := eval[map[string]float64](b, "reading when the views were first drawn", `window.__drawn`)
	firstCPU := cpu.at(max(firstDrawn["treeFirst"], firstDrawn["conv"]))
	_ = pollValue[float64](b, "the tree shows 1,000 sessions", `window.__drawn.tree`)
	// 10,000 seeded events after the child's descriptor.
	_ = pollValue[float64](b, "the transcript shows the last answer and counts all 10,001 log events", `window.__drawn.conv && window.__drawn.count`)
	drawn := eval[map[string]float64](b, "reading when the views were drawn", `window.__drawn`)
	// index.html sends the first reads before the modules load; the page
	// took every one (a path spelled otherwise would be read twice).
	if left := eval[[]string](b, "listing the first reads not taken", `[...window.firstReads.keys()]`); len(left) != 0 {
		t.Errorf("the page read %q again instead of taking the answers index.html asked for", left)
	}
	work := map[string]float64{}
	b.do("reading the renderer's busy time so far", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		res, err := cdp.Call(ctx, tg, performance.GetMetrics, cdp.Empty{})
		for _, m := range res.Metrics {
			work[m.Name] = m.Value * 1000
		}
		return err
	}))

	// A live event is timed in the page, from the SSE frame's arrival to
	// the DOM change that shows it, once both streams are open.
	b.waitFor("both streams are connected", connConnected+` && document.querySelector('#transcript-conn').textContent === ''`)
	extra := newID("child")
	watch := func(what, shown string) {
		b.t.Helper()
		_ = eval[bool](b, "watching for "+what, fmt.Sprintf(`(() => {
			window.__shown = 0;
			const mo = new MutationObserver(() => {
				if (%s) { window.__shown = performance.now(); mo.disconnect(); }
			});
			mo.observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
			return true;
		})()`, shown))
	}
	watch("the live message", `[...document.querySelectorAll('[data-testid="msg-user"]')].at(-1)?.textContent.includes('one more')`)
	sd.events(long, time.Now(), turn(1001, "one more", "live answer", 1, 1)[0])
	liveConv := pollValue[float64](b, "the live message is in the transcript",
		`window.__shown && window.__shown - window.__sse.findLast(e => e.type === 'user/message').t`)

	// The new row sits at the top of the tree, scrolled away from the
	// selected session: what changes on screen is the session count.
	watch("the live run", `document.querySelector('#session-count').textContent === '(1001)' && document.querySelector('#tree .tree-list').dataset.rows === '1001'`)
	if err := sd.st.CreateSession(sd.ctx, store.Session{ID: extra, ParentID: root, Origin: "subagent", DelegationDepth: 1,
		Provider: "spawn", Mode: "one-shot", Label: "late worker", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	sd.run(seedRun{child: extra, parent: root, provider: "spawn", start: time.Now()})
	liveTree := pollValue[float64](b, "the live run is counted in the tree",
		`window.__shown && window.__shown - window.__sse.findLast(e => e.type === 'subagent/start').t`)
	b.do("scrolling the tree to its top", chromedp.Evaluate[chromedp.Void](`document.querySelector('.sessions-col').scrollTop = 0`))
	b.waitFor("the live run's row is rendered at the top, running", nodeIn(extra, "running"))

	// More live messages, for a tail of the time to screen.
	var lives []float64
	for i := range 20 {
		text := fmt.Sprintf("live %d", i)
		watch(text, fmt.Sprintf(`[...document.querySelectorAll('[data-testid="msg-user"]')].at(-1)?.textContent.includes(%s)`, jsString(text)))
		sd.events(long, time.Now(), turn(1002+i, text, "ok", 1, 1)[0])
		lives = append(lives, pollValue[float64](b, "live message "+text+" is in the transcript",
			`window.__shown && window.__shown - window.__sse.findLast(e => e.type === 'user/message').t`))
	}
	slices.Sort(lives)
	b.screenshot("thousand")

	// The machine's floor for a first draw: the first paint of a page with
	// nothing to do (an API answer, which the browser shows as text), from
	// the same server in the same browser.
	var bare []float64
	for i := range 3 {
		b.do("opening a bare page", chromedp.Navigate(fmt.Sprintf("%s/v1/providers?bare=%d", srv.URL, i)))
		bare = append(bare, pollValue[float64](b, "the bare page is painted",
			`performance.getEntriesByType('paint').find((e) => e.name === 'first-paint')?.startTime`))
	}
	slices.Sort(bare)

	t.Logf("in the browser: 20 more live messages from SSE arrival to the DOM: p50 %.1f ms, max (p99 of 20) %.1f ms", lives[len(lives)/2], lives[len(lives)-1])

	t.Logf("in the browser, from navigation start: a bare page (an API answer shown as text) first painted at %.0f / %.0f / %.0f ms (min / median / max of 3)",
		bare[0], bare[1], bare[2])
	t.Logf("in the browser, from navigation start: 1,000-session tree first drawn (its first 100 sessions) at %.0f ms, all 1,000 at %.0f ms; "+
		"10,000-event transcript drawn (its end, at the last answer) at %.0f ms",
		drawn["treeFirst"], drawn["tree"], drawn["conv"])
	t.Logf("in the browser: the renderer's main thread until both were drawn: busy %.0f ms (script %.0f, layout %.0f, style %.0f), "+
		"on the CPU %.0f ms (the renderer process %.0f ms)",
		work["TaskDuration"], work["ScriptDuration"], work["LayoutDuration"], work["RecalcStyleDuration"], work["ThreadTime"], work["ProcessTime"])
	t.Logf("in the browser: the renderer's main thread's CPU time until the first draw of both: %.0f ms", firstCPU)
	t.Logf("in the browser: one live event from SSE arrival to the DOM: transcript message %.1f ms, tree node %.1f ms", liveConv, liveTree)
}

// cpuSampler reads the renderer's main-thread CPU time (CDP
// Performance.getMetrics ThreadTime) every 10 ms or so while a page
// loads, so that the CPU time spent until a moment of the load can be told
// afterwards: read once the test saw that moment, it would count the work
// the page went on with meanwhile. Each reading is a short task on the
// page's main thread, so the readings add a little to what they measure.
type cpuSampler struct {
	stop    chan struct{}
	done    chan struct{}
	samples []cpuSample
}

// cpuSample is one reading: when it was taken and when the page then shown
// was navigated to (both monotonic, in s), and the CPU time (ms).
type cpuSample struct{ at, nav, cpu float64 }

func sampleCPU(b *browser) *cpuSampler {
	c := &cpuSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			res, err := chromedp.Call(b.ctx, performance.GetMetrics, cdp.Empty{})
			if err == nil {
				m := map[string]float64{}
				for _, x := range res.Metrics {
					m[x.Name] = x.Value
				}
				c.samples = append(c.samples, cpuSample{at: m["Timestamp"], nav: m["NavigationStart"], cpu: m["ThreadTime"] * 1000})
			}
			select {
			case <-c.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return c
}

// at stops sampling and returns the CPU time spent until ms from the
// navigation start of the page shown last, read between the readings
// either side of it as if spent evenly; 0 if no reading came after it.
func (c *cpuSampler) at(ms float64) float64 {
	close(c.stop)
	<-c.done
	if len(c.samples) == 0 {
		return 0
	}
	nav := c.samples[len(c.samples)-1].nav
	t := nav + ms/1000
	var prev *cpuSample
	for i, s := range c.samples {
		if s.nav != nav {
			continue
		}
		if s.at >= t {
			if prev == nil {
				return s.cpu
			}
			return prev.cpu + (s.cpu-prev.cpu)*(t-prev.at)/(s.at-prev.at)
		}
		prev = &c.samples[i]
	}
	return 0
}

// recordSSE runs before the page's scripts: it notes in window.__sse when
// each named SSE event arrives, before the page's own listener runs.
const recordSSE = `window.__sse = [];
(() => {
	const add = EventSource.prototype.addEventListener;
	EventSource.prototype.addEventListener = function (type, fn, opts) {
		return add.call(this, type, function (ev) {
			window.__sse.push({ t: performance.now(), type });
			return fn.apply(this, arguments);
		}, opts);
	};
})();`

// recordDrawn runs before the page's scripts: it notes in window.__drawn
// when each view of the scale test is first painted — the tree's first
// page (100 sessions), the whole tree, the transcript's end and its event
// count — until all four are. A view is in frame n's paint when it is on the
// page after the frame's callbacks (the page's own draw among them) and its
// layout: a ResizeObserver on a probe this script resizes in every frame
// looks then, before the paint. The time noted is after the paint: a task
// queued from the frame's first callback, which runs once the frame is drawn.
const recordDrawn = `window.__drawn = {};
(() => {
	const rows = () => Number(document.querySelector('#tree .tree-list')?.dataset.rows || 0);
	const checks = {
		treeFirst: () => rows() >= 100 && !!document.querySelector('[data-testid="node"]'),
		tree: () => rows() === 1000 && !!document.querySelector('[data-testid="node"]'),
		conv: () => [...document.querySelectorAll('[data-testid="msg-assistant"]')].at(-1)?.querySelector('[data-testid="assistant-text"]').textContent === 'answer 1000',
		count: () => document.querySelector('#log-count')?.textContent === '(10001)',
	};
	const painted = new Set();
	const probe = document.createElement('div');
	probe.style.cssText = 'position: fixed; top: 0; left: 0; height: 0; visibility: hidden; pointer-events: none';
	new ResizeObserver(() => {
		for (const [k, done] of Object.entries(checks)) if (!window.__drawn[k] && done()) painted.add(k);
	}).observe(probe);
	let width = 0;
	const frame = () => {
		if (!probe.isConnected) document.documentElement.append(probe);
		probe.style.width = (width ^= 1) + 'px';
		setTimeout(() => {
			for (const k of painted) window.__drawn[k] ??= performance.now();
			painted.clear();
		}, 0);
		if (Object.keys(window.__drawn).length < Object.keys(checks).length) requestAnimationFrame(frame);
	};
	requestAnimationFrame(frame);
})();`

// pollValue waits until expr is truthy and returns its value.
func pollValue[T any](b *browser, what, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Poll[T](expr, chromedp.WithPollingTimeout(2*waitTimeout)))
	if err != nil {
		b.fail("waiting until "+what, err)
	}
	return v
}
